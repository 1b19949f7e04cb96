"""iipub: durable, cron-driven orchestration of paid background AI generation jobs."""

__version__ = "0.1.0"
