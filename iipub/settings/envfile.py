"""The environment file of a deployment (`IIPUB_ENV_FILE`, `--env-file`): secrets and settings
for cron, the webhook receiver and a shell alike.

One `KEY=value` per line, optionally written `export KEY=value`, so the same file can be
sourced by `sh` (`set -a; . FILE`) and read here. `#` starts a comment line; a value may be
quoted with '…' (taken literally) or "…" (backslash escapes \\" \\\\ \\$ \\`); an unquoted value
ends at the first white space followed by `#`. Nothing is expanded. Variables already set in
the process environment win over the file, so a one-off `IIPUB_LOG_LEVEL=debug iipub …` still
works.
"""

from __future__ import annotations

import os
import re
from collections.abc import MutableMapping
from pathlib import Path

from iipub.core.errors import ConfigError

_LINE = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_DOUBLE_ESCAPE = re.compile(r'\\([\\"$`])')


def parse(text: str, source: str = "environment file") -> dict[str, str]:
    """The variables of an environment file; a line that is none of the above is a
    ConfigError naming it (by number: its value may be a secret)."""
    found: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise ConfigError(f"{source}, line {number}: expected KEY=value or export KEY=value")
        key, value = match.groups()
        found[key] = _value(value, f"{source}, line {number}")
    return found


def _value(text: str, where: str) -> str:
    if text[:1] in ("'", '"'):
        quote = text[0]
        end = _closing(text, quote)
        if end is None:
            raise ConfigError(f"{where}: the value's {quote} quote is not closed")
        rest = text[end + 1:].strip()
        if rest and not rest.startswith("#"):
            raise ConfigError(f"{where}: text after the quoted value")
        inner = text[1:end]
        return inner if quote == "'" else _DOUBLE_ESCAPE.sub(r"\1", inner)
    return re.split(r"\s+#", text, maxsplit=1)[0].strip()


def _closing(text: str, quote: str) -> int | None:
    i = 1
    while i < len(text):
        if quote == '"' and text[i] == "\\":
            i += 2
            continue
        if text[i] == quote:
            return i
        i += 1
    return None


def load(path: str | Path, environ: MutableMapping[str, str] | None = None,
         named_by: str = "IIPUB_ENV_FILE") -> dict[str, str]:
    """Read `path` into `environ` (default: os.environ) without overriding what is already set;
    returns the file's variables. A missing or unreadable file is a ConfigError naming what named
    it (`named_by`: IIPUB_ENV_FILE or --env-file)."""
    environ = os.environ if environ is None else environ
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"environment file not found: {named_by} names {path}, which does not exist "
                          f"(absolute: {os.path.abspath(path)}); nothing was run") from None
    except UnicodeDecodeError:
        raise ConfigError(f"environment file {path} is not UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"cannot read environment file {path}: {exc.strerror}") from None
    found = parse(text, f"environment file {path}")
    for key, value in found.items():
        environ.setdefault(key, value)
    return found
