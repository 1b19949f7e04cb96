"""The wake-up rule: whether a cron run of `reconcile` or `relay` can find anything to do, decided
before the framework loads.

About 1,436 of a day's 1,440 cron minutes find nothing due, so what an idle run costs is what
iipub mostly costs its host. A full run that found nothing to do leaves a `wakeups` row for its
command: the earliest time anything it knows of falls due (`next_at`), a signature of every
table a writer can change (read through indexes: high-water marks and the live rows, so its cost
does not grow with history), the identity of the environment it ran under and the files it read.
The next run compares, with the database driver alone:

- the database's clock (with the drill offset) against `next_at`;
- the signature now against the recorded one (any write since: a transition, an operator
  command, a webhook delivery, a pause, a relay's delivery, a restore of the database);
- the environment and the watched files (configuration, prompts, ledger) against the recorded.

Any difference, any doubt, any error: the full run. The rule fails open.

This module is pure: the identity of an environment, the place a row belongs to, and the
decision. The SQL is `iipub.store.wakeup_sql`'s; `idle_check` runs it with the driver alone and
`wakeup_store` records it after a full run. The rows are per place (host, working directory,
configuration file): several hosts on one database each keep their own.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence

from iipub import __version__
from iipub.settings import environment

COMMANDS = ("reconcile", "relay")

# Variables that change how a run reports or whether the check runs, not what a run does.
_NOT_SETTINGS = ("IIPUB_TEST_", "IIPUB_LOG_", "IIPUB_WAKEUP_CHECK")
# Where the default spend ledger lives without a configuration file (`loading.default_ledger_path`).
_PATH_VARIABLES = frozenset({"HOME", "XDG_STATE_HOME"})
# What the HTTP clients of a run read from the environment (the SDK, httpx, the webhook sink): a
# certificate file that is gone or a malformed proxy fails the full run, which no idle answer may hide.
NETWORK_VARIABLES = frozenset({
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy"})
# The certificate files and folders among them, which the recorder watches like its own files.
CERTIFICATE_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
# Environment variables whose values are secrets: only whether they are set counts.
_SECRET_MARKS = ("KEY", "SECRET", "PASSWORD", "TOKEN", "DATABASE_URL")


def digest(values: Sequence[object]) -> str:
    """The signature's values as one hash (their text: the driver's own types on both sides)."""
    return hashlib.sha256(repr(tuple(values)).encode("utf-8", "backslashreplace")).hexdigest()


def identity(environ: Mapping[str, str], cwd: str, named: Iterable[str] = ()) -> str:
    """What the run's settings come from besides files: iipub's version, the working directory
    (relative paths), every variable the settings may come from (`environment.PREFIXES`), the TLS
    and proxy variables, and the
    variables the settings name (`named`: a webhook sink's `secret_env`). Secrets count only as
    set, or set but unusable in a header: no hash of one is stored; a proxy's credentials likewise.
    The database URL is left out: another database has its own rows."""
    extra = set(named)
    seen: list[tuple[str, str]] = []
    for name in sorted(environ):
        value = environ[name]
        if name in _PATH_VARIABLES:
            seen.append((name, value))
        elif name in NETWORK_VARIABLES:
            seen.append((name, _without_credentials(value)))
        elif name in extra:
            seen.append((name, _secret_mark(value) if value else value))
        elif name.startswith(environment.PREFIXES) and not name.startswith(_NOT_SETTINGS):
            secret = any(mark in name for mark in _SECRET_MARKS)
            seen.append((name, _secret_mark(value) if secret and value else value))
    unset = sorted(extra - set(environ))  # a named variable unset is a state of its own
    text = json.dumps({"version": __version__, "cwd": cwd, "env": seen, "unset": unset}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()


def _without_credentials(url: str) -> str:
    """A proxy's URL with its user and password (a secret) replaced by a mark."""
    scheme, sep, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    if not sep or "@" not in authority:
        return url
    return f"{scheme}://<credentials>@{authority.rpartition('@')[2]}{slash}{path}"


def place(environ: Mapping[str, str], cwd: str, host: str) -> str:
    """Which wake-up rows a run reads and writes: one per host, working directory and
    configuration file, so several hosts (or two configurations on one) running on one database
    each keep their own idle minutes; a change of anything else shows as a changed identity."""
    text = json.dumps([host, cwd, environ.get(environment.CONFIG, "")])
    return hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()


def parse_names(text: str | None) -> list[str] | None:
    """The recorded names of the variables the settings name; None when not what the recorder writes."""
    try:
        value = json.loads(text or "[]")
    except ValueError:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return value


def _secret_mark(value: str) -> str:
    """A secret as the identity counts it: set, or set to something no HTTP header can carry
    (`config.HEADER_SAFE`: the full run refuses such a key, exit 78, which no idle answer may hide)."""
    return "<set>" if all("\x21" <= c <= "\x7e" for c in value) else "<unusable>"


FileMark = list[int] | None  # [size, mtime_ns, inode, ctime_ns], or None: the file was absent


class RecordedWakeup:
    """A `wakeups` row as the check reads it. (A plain class: `dataclasses` alone would cost an
    idle run a tenth of its import time.)"""

    __slots__ = ("asleep", "files", "identity", "idle_summary", "signature")

    def __init__(self, *, signature: str | None, identity: str | None, files: Mapping[str, FileMark],
                 idle_summary: str | None, asleep: bool) -> None:
        self.signature = signature
        self.identity = identity
        self.files = files
        self.idle_summary = idle_summary
        self.asleep = asleep


def parse_files(text: str | None) -> dict[str, FileMark] | None:
    """The recorded files' marks; None when the text is not what the recorder writes."""
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    out: dict[str, FileMark] = {}
    for path, mark in value.items():
        if mark is not None and not (isinstance(mark, list) and all(isinstance(x, int) for x in mark)):
            return None
        out[str(path)] = mark
    return out


def why_awake(recorded: RecordedWakeup | None, env_identity: str, files_now: Callable[[], Mapping[str, FileMark]],
              signature: Callable[[], str]) -> str | None:
    """Why this run must be a full one, or None: nothing can be due, the idle answer is enough.
    The cheap comparisons come first; the files are looked at, and the database's marks read,
    only when everything before them agrees."""
    if recorded is None:
        return "no wake-up recorded"
    if not recorded.asleep:
        return "due"
    if recorded.idle_summary is None:
        return "no idle summary"
    if recorded.identity != env_identity:
        return "environment changed"
    if dict(recorded.files) != dict(files_now()):
        return "files changed"
    if recorded.signature != signature():
        return "database changed"
    return None
