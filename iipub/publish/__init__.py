"""Publication: the relay that delivers the outbox, and the sinks it delivers to."""
