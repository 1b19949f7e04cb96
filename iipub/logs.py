"""structlog JSON lines on stderr: one event per line, fit for cron's log file.

Records from the standard `logging` module (SQLAlchemy's pool, httpx) go through the same
renderer, so a library's error never breaks the one-JSON-object-per-line format.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any

import structlog

_configured = False


def configure(level: str = "info") -> None:
    global _configured
    if _configured:
        return
    _configured = True
    numeric = getattr(logging, level.upper(), logging.INFO)
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, structlog.processors.JSONRenderer(sort_keys=True)],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(sort_keys=True),
        ],
    ))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(numeric, logging.WARNING))  # libraries: warnings and errors only


def error_line(message: str, **fields: Any) -> str:
    """The command line's own error report: the same one-object-per-line JSON as every log line
    (`level`, `event`, `timestamp`), with the message an operator reads."""
    doc = {"event": "error", "level": "error", "message": message,
           "timestamp": dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z"),
           **{k: v for k, v in fields.items() if v is not None}}
    return json.dumps(doc, sort_keys=True, ensure_ascii=False)


def note_line(message: str, **fields: Any) -> str:
    """A command's own informational line on stderr, in the same JSON shape."""
    doc = {"event": "note", "level": "info", "message": message,
           "timestamp": dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z"), **fields}
    return json.dumps(doc, sort_keys=True, ensure_ascii=False)
