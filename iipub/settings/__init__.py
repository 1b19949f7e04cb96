"""The configuration: its schema, the model table, the output contract, the fingerprint, and how it
is read."""
