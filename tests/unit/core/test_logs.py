"""`iipub.core.logs`: the console format a person sees at a terminal prints an exception as a plain
traceback, never a frame's locals (they may hold the API key), and the JSON format keeps one
object per line with the traceback inside it."""

from __future__ import annotations

import io
import json
import sys

import pytest
import structlog

from iipub.core import logs
from tests.support.cli import logging_restored

SECRET = "sk-proj-never-printed-0123456789"


def _log_a_failure() -> None:
    api_key = SECRET  # a local of the failing frame, as a provider call's would be
    try:
        raise RuntimeError(f"refused ({len(api_key)} characters)")
    except RuntimeError:
        structlog.get_logger().exception("step_failed", job_id="j1")


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_a_logged_exception_shows_its_traceback_and_no_locals(fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with logging_restored():
        logs.configure("info", fmt, force=True)
        _log_a_failure()
    text = err.getvalue()
    assert "Traceback (most recent call last)" in text and "RuntimeError: refused (32 characters)" in text
    assert SECRET not in text
    if fmt == "json":
        (line,) = text.splitlines()
        assert json.loads(line)["event"] == "step_failed"
    else:
        assert "step_failed" in text and "job_id=j1" in text
