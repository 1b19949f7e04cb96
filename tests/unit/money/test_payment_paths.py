"""Every CLI command that can lead to a paid create reaches the payment authority (issue 37):
the click group is walked, and each command must be classified here; a new command fails the
test until someone says which it is. The classes are proven, not just listed:

- ASKS_FIRST: the command sends a job back to CREATE_ELIGIBLE; its operator path asks
  `paying.ruling` before anything is written (the remedies that return CREATE_ELIGIBLE are
  exactly the ones `actions` wraps in `_authorized`; tests/integration/money/test_paying.py
  drives their refusals through the CLI);
- THROUGH_THE_SWEEP: the create it may lead to is the sweep's, and the sweep's create step asks
  the authority before its only `provider.create` call (the only create call in the package);
- NEVER_PAYS: it neither charges `generation_attempts` towards a create nor creates.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from pathlib import Path

import click

import iipub
from iipub.cli import cli
from iipub.machine import steps
from iipub.operate import executor, remedies

ASKS_FIRST = {"quarantine release", "regenerate"}
THROUGH_THE_SWEEP = {
    "reconcile",  # the sweep itself
    "demo",  # reconcile ticks
    "schedule", "backfill",  # new NO_JOB slots: created by the next sweep
    "resume", "unpause",  # a job or the gate let go: created by the next sweep
    "budget override",  # a ceiling raised: created by the next sweep
    "adopt",  # charges the legacy system's attempts, never creates; a later loss is recreated by the sweep
    "ledger acknowledge",  # creates held by a ledger problem resume: the sweep's
}
NEVER_PAYS = {
    "budget show", "cancel", "check", "db migrate", "db status", "export", "jobs import-payload", "jobs list",
    "jobs show", "kill", "ledger show", "orphans adopt", "orphans discard", "orphans list", "orphans show",
    "outbox list", "outbox requeue", "pause", "quarantine list", "relay", "republish", "revalidate", "simulator",
    "status", "suspend", "webhook prune",
    "report",  # reads only: a page of the last days
    "webhook serve",  # a delivery never creates (`run_context.for_delivery`: no create pieces)
    "webhook test-delivery",
    "quarantine show", "config show", "config accept", "init",
    "doctor",  # the free models endpoint only (`Provider.look_up`); sizes creates without sending one
    "withdraw", "correct",  # compensating events through the outbox; `correct` takes the operator's file only
}


def _commands(group: click.Group, ctx: click.Context, prefix: tuple[str, ...] = ()) -> set[str]:
    found: set[str] = set()
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        if isinstance(cmd, click.Group):
            found |= _commands(cmd, ctx, (*prefix, name))
        else:
            found.add(" ".join((*prefix, name)))
    return found


def test_every_command_is_classified_by_how_it_may_lead_to_a_create() -> None:
    commands = _commands(cli, click.Context(cli))
    classified = ASKS_FIRST | THROUGH_THE_SWEEP | NEVER_PAYS
    assert not (ASKS_FIRST & THROUGH_THE_SWEEP) and not (ASKS_FIRST & NEVER_PAYS)
    assert not (THROUGH_THE_SWEEP & NEVER_PAYS)
    assert commands - classified == set(), "classify the new command(s) here"
    assert classified - commands == set(), "a command listed here no longer exists"


def _calls(fn: Callable[..., object]) -> set[str]:
    """The names `fn` calls (functions and methods)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    return {n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
            for n in ast.walk(tree) if isinstance(n, ast.Call)}


def test_the_remedies_that_lead_to_a_create_are_the_ones_actions_asks_the_authority_about() -> None:
    tree = ast.parse(Path(inspect.getfile(remedies)).read_text())
    eligible = {fn.name for fn in tree.body if isinstance(fn, ast.FunctionDef)
                and any(isinstance(n, ast.Attribute) and n.attr == "CREATE_ELIGIBLE"
                        and isinstance(n.value, ast.Name) and n.value.id == "State" for n in ast.walk(fn))}
    assert eligible == {"release_verified_lost", "regenerate"}
    assert "_authorized" in _calls(executor.Operator._verified_lost)
    assert "_authorized" in _calls(executor.Operator.regenerate)
    assert "ruling" in _calls(executor.Operator._authorized)
    # `--all` and `--dry-run` go through the single-job path.
    assert {"release", "_release_decision"} <= _calls(executor.Operator.release_all)
    assert "_verified_lost" in _calls(executor.Operator.release)


def test_the_sweeps_create_step_asks_the_authority_and_is_the_only_create_call() -> None:
    root = Path(inspect.getfile(iipub)).parent
    # The provider double (simulator/) answers creates; it sends none.
    creates = [path.name for path in sorted(root.rglob("*.py")) if "simulator" not in path.parts
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "create"
               and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "provider"]
    assert creates == ["steps.py"]
    # The step asks the authority before it hands the job to `_create`, the one place that sends.
    src = inspect.getsource(steps.step_create_eligible)
    assert src.index("paying.ruling(") < src.index("_create(ctx, creates, job")
    assert "ctx.provider.create(" in inspect.getsource(steps._create)
    assert "ctx.provider.create(" not in src
