"""The `iipub` command line in tests: in process (`run_cli`: `iipub.cli.main` with its own
environment, working directory, stdout and stderr; `stderr_at_a_terminal` makes that stderr a
terminal) and, where the process itself is the subject, as the installed console script
(`run_iipub`, `start_iipub`); the checks of its one-line JSON errors."""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

import structlog
from click.testing import CliRunner

from iipub.core import logs

ENV_PREFIXES = ("IIPUB_", "OPENAI_")


def clean_env() -> dict[str, str]:
    """The test run's environment without any IIPUB_* / OPENAI_* setting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    env["PYTHONUNBUFFERED"] = "1"
    return env


# -- the command line, in process -------------------------------------------------------------------


@dataclass
class CliResult:
    """What one `iipub` invocation left: like `subprocess.CompletedProcess`."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


# Whether `run_cli` gives the command a stderr that is a terminal (`stderr_at_a_terminal`).
_at_a_terminal: ContextVar[bool] = ContextVar("stderr_at_a_terminal", default=False)


@contextmanager
def stderr_at_a_terminal() -> Iterator[None]:
    """Within the block, each `run_cli` command's captured stderr is a terminal (its `isatty()`
    is true), as when a person runs `iipub`: the console log format, text errors."""
    token = _at_a_terminal.set(True)
    try:
        yield
    finally:
        _at_a_terminal.reset(token)


class _TerminalStderr(io.TextIOWrapper):
    """The captured stderr, saying it is a terminal."""

    def isatty(self) -> bool:
        return True


@contextmanager
def logging_restored() -> Iterator[None]:
    """`iipub.core.logs.configure` binds structlog and the root logger to the sys.stderr of the
    moment, once per process. Let each invocation configure them afresh (so its JSON log
    lines land in its own stderr), then put back what was there. Running many commands in one
    process is this suite's situation alone, so the module's once-per-process flag is saved,
    cleared and put back here rather than given an option of its own."""
    saved_structlog = structlog.get_config()
    was_configured = structlog.is_configured()
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    saved_flag, saved_format = logs._configured, logs._format
    logs._configured = False
    try:
        yield
    finally:
        logs._configured, logs._format = saved_flag, saved_format
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        if was_configured:
            structlog.configure(**saved_structlog)
        else:
            structlog.reset_defaults()


def run_cli(*args: str, env: Mapping[str, str], cwd: Path | None = None, check: bool = False) -> CliResult:
    """`iipub ARGS` in this process: `iipub.cli.main` exactly as the console script calls it,
    with os.environ replaced by `env` (missing keys unset), `cwd` as working directory, and
    stdout / stderr captured separately. An exception `main` does not turn into an exit code
    propagates (the console script would have printed a traceback)."""
    from iipub.cli import main as cli_main

    overrides: dict[str, str | None] = {k: None for k in os.environ if k not in env}
    overrides.update({k: v for k, v in env.items() if os.environ.get(k) != v})
    old_cwd = os.getcwd()
    old_sigterm = signal.getsignal(signal.SIGTERM)  # `iipub reconcile` installs its own
    code: int | None = None
    with logging_restored(), CliRunner().isolation(env=overrides) as (out, err, _mixed):
        terminal = None
        if _at_a_terminal.get():
            terminal = _TerminalStderr(err, encoding="utf-8", errors="replace", write_through=True)
            sys.stderr = terminal  # the isolation puts the test run's own stderr back on leaving
        try:
            if cwd is not None:
                os.chdir(cwd)
            cli_main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            os.chdir(old_cwd)
            signal.signal(signal.SIGTERM, old_sigterm)
            sys.stdout.flush()
            sys.stderr.flush()
            if terminal is not None:
                terminal.detach()  # the captured bytes stay open to be read below
        stdout = out.getvalue().decode("utf-8", "replace")
        stderr = err.getvalue().decode("utf-8", "replace")
    if code is None:
        raise AssertionError(f"iipub {' '.join(args)}: main() returned instead of exiting")
    result = CliResult(args, code, stdout, stderr)
    if check and code != 0:
        raise AssertionError(f"iipub {' '.join(args)} exited {code}: {stderr[-2000:]}")
    return result


def one_line_error(result: CliResult | subprocess.CompletedProcess[str], code: int, needle: str) -> None:
    """Exit `code`, and stderr is exactly one line: a JSON error object whose message contains
    `needle` (no traceback, no other log line)."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert needle in error_message(lines[0]), result.stderr


def error_message(line: str) -> str:
    """The message of one of the command line's JSON error lines (AssertionError if it is not one)."""
    doc = json.loads(line)
    assert isinstance(doc, dict) and doc.get("level") == "error" and doc.get("event") == "error", line
    return str(doc["message"])


def error_messages(stderr: str) -> list[str]:
    """Every stderr line, each required to be a JSON error object: their messages."""
    return [error_message(line) for line in stderr.strip().splitlines()]


# -- the command line, as a process ---------------------------------------------------------------------


def iipub_exe() -> list[str]:
    """The installed console script (falls back to the module when run from a checkout)."""
    exe = shutil.which("iipub", path=str(Path(sys.executable).parent)) or shutil.which("iipub")
    return [exe] if exe else [sys.executable, "-m", "iipub"]


def run_iipub(*args: str, env: dict[str, str], cwd: Path | None = None, timeout: float = 60,
              check: bool = False) -> subprocess.CompletedProcess[str]:
    """`iipub ARGS` as a child process. Only for tests whose subject is the process itself
    (signals, overlapping processes, the installed script): everything else uses `run_cli`."""
    proc = subprocess.run(
        [*iipub_exe(), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"iipub {' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc


def start_iipub(*args: str, env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    """`iipub ARGS` started as a child process (to be signalled, paused or overlapped)."""
    return subprocess.Popen([*iipub_exe(), *args], env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@contextmanager
def child_iipub(*args: str, env: dict[str, str], cwd: Path) -> Iterator[subprocess.Popen[str]]:
    """`start_iipub` for a block: whatever the block does, the child is gone at its end (killed if
    it still runs) and its pipes are closed."""
    child = start_iipub(*args, env=env, cwd=cwd)
    try:
        yield child
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()
