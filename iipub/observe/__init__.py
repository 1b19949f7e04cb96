"""What runs leave and what operators read: status and its queries, metrics, heartbeats,
invariants, the wake-up check."""
