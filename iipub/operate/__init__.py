"""Operator work: remedies (pure) and their executor, adoption, the hand-over file, parked views,
init, the demo."""
