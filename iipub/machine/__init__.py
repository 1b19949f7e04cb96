"""The state machine in motion: per-state decisions (pure), the steps that apply them, the sweep,
settling webhooks."""
