"""The docs keep up with the code: every command has help, the runbook covers every state,
every quarantine reason and every command, the README keeps its two commands."""

from __future__ import annotations

import re
from pathlib import Path

import click

from iipub.cli import cli
from iipub.model.states import QUARANTINE_REASONS, Reason, State

ROOT = Path(__file__).resolve().parents[2]


def _commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    out: dict[str, click.Command] = {}
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None and cmd.name == name, (name, cmd)
        full = f"{prefix}{name}"
        out[full] = cmd
        if isinstance(cmd, click.Group):
            out.update(_commands(cmd, full + " "))
    return out


def test_every_command_and_option_has_help() -> None:
    for name, cmd in _commands(cli).items():
        assert (cmd.help or "").strip(), f"`iipub {name}` has no help text"
        for param in cmd.params:
            if isinstance(param, click.Option) and param.name != "help":
                assert (param.help or "").strip(), f"`iipub {name}` option {param.opts} has no help"


def test_runbook_covers_every_state_reason_and_command() -> None:
    text = (ROOT / "runbook.md").read_text()
    for state in State:
        assert f"`{state.value}`" in text, state
    for reason in QUARANTINE_REASONS:
        assert f"`{reason}`" in text, reason
    for name, cmd in _commands(cli).items():
        if isinstance(cmd, click.Group):
            continue
        assert f"iipub {name}" in text, f"runbook does not mention `iipub {name}`"


def test_runbook_explains_every_journal_reason() -> None:
    text = (ROOT / "runbook.md").read_text()
    missing = [r.value for r in Reason if f"`{r.value}`" not in text]
    assert not missing, f"runbook.md does not explain the journal reasons {missing}"


def test_readme_keeps_the_two_fresh_machine_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert "pip install . && .venv/bin/iipub demo" in text
    assert "pip install '.[test]' && .venv/bin/python -m pytest" in text


def test_crontab_runs_both_cron_commands_under_timeout() -> None:
    text = (ROOT / "crontab.example").read_text()
    for needle in ("timeout", "\"$IIPUB\" reconcile", "\"$IIPUB\" relay", "status --check"):
        assert needle in text


GLOSSARY_WORDS = ("slot", "job", "track", "custody", "fence", "ledger", "parked", "quarantine", "remedy", "settle",
                  "stranded", "dwell", "cutover", "wake-up", "drift", "backfill", "tick", "sweep", "run", "orphan",
                  "outbox", "delivery", "sink", "webhook")


def test_the_glossary_defines_each_domain_word_once_and_is_linked() -> None:
    text = (ROOT / "docs" / "glossary.md").read_text()
    defined = re.findall(r"^- \*\*([^*]+)\*\*:", text, re.MULTILINE)
    assert sorted(w for w in defined if defined.count(w) > 1) == []
    assert [w for w in GLOSSARY_WORDS if w not in defined] == []
    assert "docs/glossary.md" in (ROOT / "README.md").read_text()
    assert "(glossary.md)" in (ROOT / "docs" / "architecture.md").read_text()
