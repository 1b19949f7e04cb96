"""structlog JSON lines on stderr: one event per line, fit for cron's log file."""

from __future__ import annotations

import logging
import sys

import structlog

_configured = False


def configure(level: str = "info") -> None:
    global _configured
    if _configured:
        return
    _configured = True
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(sort_keys=True),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper(), logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
