"""What the operator's documents promise exists: every `iipub …` command line in README.md,
runbook.md, crontab.example and env.example names a real command with real options; every
configuration key they name is a key of its section; every exit code they list is one an error
of `iipub.core.errors` (or `status --check`) exits with, and every such code is listed."""

from __future__ import annotations

import ast
import dataclasses
import re
import shlex
import tomllib
from pathlib import Path

import click
import pytest

from iipub.cli import cli
from iipub.core.severity import Severity
from iipub.settings import config

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "runbook.md", "crontab.example", "env.example")
SECTIONS: dict[str, type] = {
    "budgets": config.Budgets, "reconcile": config.ReconcileSettings, "provider": config.ProviderSettings,
    "relay": config.RelaySettings, "status": config.StatusSettings, "webhooks": config.WebhookSettings,
    "monitoring": config.MonitoringSettings, "ledger": config.LedgerSettings, "products": config.Product,
    "sinks.static": config.StaticSinkSettings, "sinks.webhook": config.WebhookSinkSettings,
}
# Keys README's example leaves out on purpose: the provider URL, organization and project
# (OPENAI_BASE_URL, OPENAI_ORG_ID, OPENAI_PROJECT_ID: its environment table) and the
# [status] alias of [monitoring] heartbeat_after_seconds (named in its prose).
UNLISTED: dict[str, set[str]] = {"provider": {"base_url", "organization", "project"},
                                 "status": {"heartbeat_after_seconds"}}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_LAUNCHERS = {"timeout", "exec", "env", "nice", "sudo", "-u", "iipub:"}


def _code(path: str) -> list[str]:
    text = (ROOT / path).read_text(encoding="utf-8")
    if not path.endswith(".md"):
        return [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.DOTALL)
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.DOTALL))
    return [line for block in blocks for line in block.splitlines()] + spans


def _is_iipub(word: str) -> bool:
    return word in ("iipub", "$IIPUB") or word.endswith("/bin/iipub")


def invocations(path: str) -> list[list[str]]:
    """Each command line that runs iipub: the words after `iipub` (or `$IIPUB`), up to a
    redirection, in each segment of a shell line (`&&`, `||`, `;`, `|`), after its variable
    assignments and a `timeout …` in front."""
    found = []
    for snippet in _code(path):
        for segment in re.split(r"&&|\|\||;|(?<!\\)\|", snippet.replace("\\|", " ")):
            try:
                words = shlex.split(segment)
            except ValueError:  # an unbalanced quote in a table cell
                words = segment.split()
            while words and (_ASSIGNMENT.match(words[0]) or words[0] in _LAUNCHERS or words[0].startswith("-")
                             or words[0].replace(".", "").isdigit()):
                words = words[1:]
            if not words or not _is_iipub(words[0]):
                continue
            rest = []
            for word in words[1:]:
                if word.startswith((">", "2>")) or word in ("&", "…"):
                    break
                cleaned = word.strip("[]()|,;:.…")
                if cleaned:
                    rest.append(cleaned)
            found.append(rest)
    return found


def _options(command: click.Command) -> set[str]:
    return {o for p in command.params if isinstance(p, click.Option) for o in (*p.opts, *p.secondary_opts)}


def check_invocation(words: list[str]) -> str | None:
    """None if `iipub WORDS` names a command with those options; else what is wrong. After a
    group every word that is not an option must be one of its commands (groups take no
    arguments); a command's other words are its arguments and option values."""
    ctx = click.Context(cli)
    command: click.Command = cli
    path = ["iipub"]
    options = _options(cli) | {"--help", "-h"}
    for word in words:
        if word.startswith("--"):
            name = word.split("=", 1)[0]
            if name not in options:
                return f"`{' '.join(path)}` has no option {name}"
        elif isinstance(command, click.Group) and not word.startswith("-"):
            sub = command.get_command(ctx, word)
            if sub is None:
                return f"`{' '.join(path)} {word}`: no such command"
            command, path = sub, [*path, word]
            options = _options(command) | {"--help", "-h"}
    return None


@pytest.mark.parametrize("path", DOCS)
def test_every_documented_command_and_option_exists(path: str) -> None:
    problems = [f"{path}: iipub {' '.join(words)}: {why}" for words in invocations(path)
                if (why := check_invocation(words)) is not None]
    assert not problems, "\n".join(problems)


def test_the_command_check_finds_what_does_not_exist() -> None:
    assert check_invocation(["jobs", "list", "--state", "DELETED"]) is None
    assert check_invocation(["quarantine", "release", "--all", "--verified-lost"]) is None
    assert check_invocation(["reconcile", "--log-level", "debug"]) is None
    assert check_invocation(["jobs", "lst"]) == "`iipub jobs lst`: no such command"
    assert check_invocation(["frobnicate"]) == "`iipub frobnicate`: no such command"
    assert check_invocation(["status", "--chek"]) == "`iipub status` has no option --chek"
    assert ["status", "--check"] in invocations("crontab.example")
    assert any(w[:2] == ["relay", "--prune"] for w in invocations("crontab.example"))


def _fields(section: str) -> set[str]:
    return {f.name for f in dataclasses.fields(SECTIONS[section])}


def _readme_toml() -> dict[str, object]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"```toml\n(.*?)```", text, re.DOTALL)
    return tomllib.loads(block)


def test_the_readme_configuration_file_is_a_valid_configuration() -> None:
    doc = _readme_toml()
    for section, values in doc.items():
        if section == "sinks":
            assert isinstance(values, dict)
            for sink, keys in values.items():
                assert set(keys) <= _fields(f"sinks.{sink}"), (sink, set(keys) - _fields(f"sinks.{sink}"))
        elif section == "products":
            assert isinstance(values, list)
            for product in values:
                assert set(product) - {"prompt_file"} <= _fields("products"), set(product) - _fields("products")
        elif section == "pricing":  # `currency` and one table of prices per model
            assert isinstance(values, dict) and set(values) <= {"currency", "models"}, values
            prices = {f.name for f in dataclasses.fields(config.ModelPrice)}
            for model, keys in values["models"].items():
                assert set(keys) == prices, (model, prices ^ set(keys))
        elif section == "models":  # one table of capabilities per model or prefix
            assert isinstance(values, dict)
            # where a row's values come from and when: the built-in table's, not a configuration key
            rule = {f.name for f in dataclasses.fields(config.ModelRule)} - {"source", "checked"}
            for model, keys in values.items():
                assert set(keys) == rule, (model, rule ^ set(keys))
        else:
            assert isinstance(values, dict)
            assert set(values) <= _fields(section), (section, set(values) - _fields(section))
    # every key of every section is in the README's example (a key nobody can find is not a key)
    for section in ("budgets", "reconcile", "provider", "ledger", "webhooks", "relay", "status", "monitoring"):
        shown = doc[section]
        assert isinstance(shown, dict)
        missing = _fields(section) - set(shown) - UNLISTED.get(section, set())
        assert not missing, f"README's [{section}] does not show {sorted(missing)}"


_KEY_MENTION = re.compile(
    r"\[(budgets|reconcile|provider|relay|status|webhooks|monitoring|ledger|sinks\.static|sinks\.webhook)\] "
    r"`?([a-z_]+)`?|`(budgets|reconcile|provider|relay|monitoring|ledger)\.([a-z_]+)")


def key_mentions(path: str) -> set[tuple[str, str]]:
    text = (ROOT / path).read_text(encoding="utf-8")
    return {(m.group(1) or m.group(3), m.group(2) or m.group(4)) for m in _KEY_MENTION.finditer(text)}


@pytest.mark.parametrize("path", [*DOCS, "docs/scale-out.md"])
def test_every_documented_key_exists(path: str) -> None:
    aliases = {("status", "heartbeat_after_seconds")}  # PRODUCT.md's name for [monitoring]'s key
    unknown = sorted(f"[{s}] {k}" for s, k in key_mentions(path)
                     if k not in _fields(s) and (s, k) not in aliases and not k.endswith("_"))  # `backoff_*`
    assert not unknown, f"{path} names keys that do not exist: {unknown}"


def test_the_key_check_finds_what_does_not_exist() -> None:
    assert ("reconcile", "max_in_flight") in key_mentions("README.md")
    assert ("ledger", "enabled") in key_mentions("runbook.md")
    assert "nope" not in _fields("reconcile")


def error_exit_codes() -> set[int]:
    """Every `exit_code = N` of an error class in the package."""
    codes = set()
    for path in (ROOT / "iipub").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    if (isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "exit_code"
                                                             for t in stmt.targets)
                            and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, int)):
                        codes.add(stmt.value.value)
    return codes


def documented_exit_codes() -> set[int]:
    text = (ROOT / "runbook.md").read_text(encoding="utf-8")
    table = text[text.index("## Exit codes"):]
    return {int(m) for m in re.findall(r"^\| (\d+) \|", table, re.MULTILINE)}


@pytest.mark.slow
def test_every_exit_code_is_documented_and_every_documented_one_exists() -> None:

    real = error_exit_codes() | {0, Severity.OK, Severity.WARNING, Severity.CRITICAL, Severity.UNKNOWN}
    listed = documented_exit_codes()
    assert {1, 2, 65, 69, 70, 73, 74, 75, 78, 130} <= error_exit_codes()
    assert listed == real, f"listed but raised by nothing: {listed - real}; raised but not listed: {real - listed}"
    for path in ("README.md", "runbook.md", "crontab.example"):
        text = (ROOT / path).read_text(encoding="utf-8")
        mentioned = {int(n) for n in re.findall(r"\bexit(?:s| code)? (\d+)\b", text)}
        assert mentioned <= real, (path, mentioned - real)
