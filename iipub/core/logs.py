"""structlog lines on stderr: JSON lines (one event per line, fit for cron's log file) or, at a
terminal, structlog's console renderer for a person.

The format is `--log-format`, else `IIPUB_LOG_FORMAT`, else `console` when stderr is a
terminal and `json` when it is not (cron, a pipe, a file). Records from the standard `logging`
module (SQLAlchemy's pool, httpx) go through the same renderer, so a library's error never
breaks the one-JSON-object-per-line format. The command line's own error and note lines follow
the same choice.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import sys
from typing import Any

import structlog

from iipub.core.errors import ConfigError

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("json", "console")

_configured = False
_format: str | None = None  # the format of the last `configure`


def resolve_format(requested: str | None = None) -> str:
    """`requested`, else $IIPUB_LOG_FORMAT, else by whether stderr is a terminal."""
    chosen = requested or os.environ.get("IIPUB_LOG_FORMAT") or None
    if chosen is None:
        return "console" if _isatty() else "json"
    if chosen.lower() not in FORMATS:
        raise ConfigError(f"IIPUB_LOG_FORMAT={chosen!r}: expected one of {', '.join(FORMATS)}")
    return chosen.lower()


def resolve_level(requested: str | None = None) -> str:
    """`requested`, else $IIPUB_LOG_LEVEL, else info."""
    chosen = requested or os.environ.get("IIPUB_LOG_LEVEL") or "info"
    if chosen.lower() not in LEVELS:
        raise ConfigError(f"IIPUB_LOG_LEVEL={chosen!r}: expected one of {', '.join(LEVELS)}")
    return chosen.lower()


def _isatty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


def configure(level: str = "info", fmt: str | None = None, *, force: bool = False) -> None:
    """Bind structlog and the root logger to the current sys.stderr, once per process (again
    with `force`: a subcommand's own `--log-level`)."""
    global _configured, _format
    if _configured and not force:
        return
    _configured = True
    _format = resolve_format(fmt)
    numeric = getattr(logging, level.upper(), logging.INFO)
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor
    if _format == "console":
        # A plain traceback, whatever else is installed: a rich one prints every frame's locals,
        # and a frame's locals may hold the API key or a webhook secret.
        renderer = structlog.dev.ConsoleRenderer(colors=_isatty(), sort_keys=True,
                                                 exception_formatter=structlog.dev.plain_traceback)
        tail: list[structlog.types.Processor] = []  # the console renderer formats exceptions itself
    else:
        renderer = structlog.processors.JSONRenderer(sort_keys=True)
        tail = [structlog.processors.format_exc_info]
    structlog.configure(
        processors=[*shared, *tail, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *tail, renderer],
    ))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(numeric, logging.WARNING))  # libraries: warnings and errors only


def human() -> bool:
    """Whether the command line's own lines are for a person (the console format)."""
    return (_format if _configured and _format else resolve_format_quietly()) == "console"


def resolve_format_quietly() -> str:
    try:
        return resolve_format()
    except ConfigError:
        return "json"


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")


def error_line(message: str, **fields: Any) -> str:
    """The command line's own error report: the same one-object-per-line JSON as every log line
    (`level`, `event`, `timestamp`), with the message an operator reads; `Error: message` in
    the console format."""
    if human():
        return f"Error: {message}"
    doc = {"event": "error", "level": "error", "message": message, "timestamp": _now(),
           **{k: v for k, v in fields.items() if v is not None}}
    return json.dumps(doc, sort_keys=True, ensure_ascii=False)


def note_line(message: str, **fields: Any) -> str:
    """A command's own informational line on stderr, in the same shape (JSON, or the bare
    message in the console format)."""
    if human():
        return message
    doc = {"event": "note", "level": "info", "message": message, "timestamp": _now(), **fields}
    return json.dumps(doc, sort_keys=True, ensure_ascii=False)
