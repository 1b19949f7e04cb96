"""The provider interface (`iipub.provider.interface.Provider`) is what the rest of iipub calls,
and both providers implement it: the OpenAI adapter and the in-memory fake. mypy checks their
structure (the annotated assignments below fail `mypy tests` when a method is missing or its
signature differs); at run time each exposes every method of the interface with the same
parameters. Then the fake's own answers, without a database or a network (that they are the
adapter's answers over HTTP: tests/integration/test_fake_provider.py)."""

from __future__ import annotations

import ast
import datetime as dt
import inspect
import json
import time
from pathlib import Path

import pytest

import iipub
from iipub.core.errors import ConfigError, InvariantViolation
from iipub.edition import validate
from iipub.provider.fake import Call, FakeProvider, Held
from iipub.provider.interface import Provider, create_metadata
from iipub.provider.openai.adapter import OpenAIAdapter
from iipub.provider.outcomes import (
    Accepted,
    Ambiguous,
    CreateRequest,
    Deleted,
    FailureCause,
    Missing,
    Observed,
    RefusalKind,
    Refused,
    Rejected,
    Stage,
    Transient,
    Usage,
)
from iipub.settings.config import Product, ProviderSettings

PRODUCT = Product(name="daily-brief", prompt="Write the brief.", items=3, languages=("en", "es"))
REQ = CreateRequest("job-1", PRODUCT, dt.date(2026, 12, 1), 1, "f" * 64, installation="inst-1")
INTERFACE = {"create", "retrieve", "cancel", "delete", "until", "ready", "close", "reaches", "stage_of", "look_up",
             "requested_tokens"}

# The structural check: mypy accepts these only if each class implements the whole interface.
ADAPTER_IS_A_PROVIDER: type[Provider] = OpenAIAdapter
FAKE_IS_A_PROVIDER: type[Provider] = FakeProvider


def _views(adapter: OpenAIAdapter, fake: FakeProvider) -> tuple[Provider, Provider]:
    """A view made by `until` is a provider too (mypy)."""
    return adapter.until(0.0), fake.until(0.0)


def _interface() -> dict[str, inspect.Signature]:
    return {name: inspect.signature(fn) for name, fn in vars(Provider).items()
            if inspect.isfunction(fn) and not name.startswith("_")}


def _parameters(sig: inspect.Signature) -> list[tuple[str, object, object, object]]:
    return [(p.name, p.kind, p.default, p.annotation) for p in sig.parameters.values()]


def test_the_interface_is_exactly_the_provider_calls_the_rest_of_iipub_makes() -> None:
    assert set(_interface()) == INTERFACE
    root = Path(inspect.getfile(iipub)).parent
    called: set[str] = set()
    for path in root.rglob("*.py"):
        if path.relative_to(root).parts[0] == "provider":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                holder = node.func.value
                name = holder.attr if isinstance(holder, ast.Attribute) else getattr(holder, "id", None)
                if name in ("provider", "_provider"):
                    called.add(node.func.attr)
    assert called == INTERFACE


@pytest.mark.parametrize("cls", [OpenAIAdapter, FakeProvider])
def test_each_provider_has_every_method_of_the_interface_with_its_parameters(cls: type[object]) -> None:
    for name, sig in _interface().items():
        method = getattr(cls, name, None)
        assert callable(method), f"{cls.__name__} has no {name}"
        assert _parameters(inspect.signature(method)) == _parameters(sig), f"{cls.__name__}.{name}"


def test_both_providers_and_their_views_are_providers_at_run_time() -> None:
    adapter = OpenAIAdapter(ProviderSettings(base_url="http://127.0.0.1:9/v1"), "sk-test")  # never called
    fake = FakeProvider()
    try:
        for provider in (adapter, fake, *_views(adapter, fake)):
            assert isinstance(provider, Provider)
    finally:
        adapter.close()
        fake.close()


# -- the fake's answers ------------------------------------------------------------------------------


def test_a_create_is_accepted_held_waiting_and_read_back_with_its_metadata() -> None:
    fake = FakeProvider()
    created = fake.create(REQ)
    assert isinstance(created, Accepted) and created.status == "waiting" and created.tier == "default"
    read = fake.retrieve(created.response_id)
    assert isinstance(read, Observed) and read.stage is Stage.WAITING
    assert read.output_text is None and read.usage is None
    assert read.metadata == create_metadata(REQ) and read.metadata["iipub_installation"] == "inst-1"
    assert fake.held_ids == [created.response_id] and fake.creates == [REQ] and fake.accepted == 1
    assert [(c.op, c.response_id) for c in fake.calls] == [("create", None), ("retrieve", created.response_id)]


def test_a_finished_response_holds_a_valid_edition_and_its_usage() -> None:
    fake = FakeProvider()
    created = fake.create(REQ)
    assert isinstance(created, Accepted)
    fake.start()
    assert fake.status_of(created.response_id) == "running"
    fake.finish()
    read = fake.retrieve(created.response_id)
    assert isinstance(read, Observed) and read.finished and read.status == "complete"
    assert validate.validate(read.output_text, PRODUCT).ok
    assert len(json.loads(read.output_text or "")["es"]["items"]) == 3
    assert isinstance(read.usage, Usage)
    assert read.usage.total_tokens == read.usage.input_tokens + read.usage.output_tokens
    assert read.completed_at is not None and read.created_at is not None and read.completed_at >= read.created_at


@pytest.mark.parametrize(("status", "check"), [
    ("cut_at_cap", lambda o: o.at_cap and o.output_text and o.finished),
    ("failed", lambda o: o.failure is FailureCause.PROVIDER_FAULT and o.output_text is None and o.gone),
    ("cancelled", lambda o: o.output_text is None and o.gone and o.failure is None),
])
def test_a_response_can_end_every_way_a_response_ends(status: str, check: object) -> None:
    fake = FakeProvider()
    created = fake.create(REQ)
    assert isinstance(created, Accepted)
    fake.finish(created.response_id, ending=status)
    read = fake.retrieve(created.response_id)
    assert isinstance(read, Observed) and read.status == status and callable(check) and check(read)


def test_bent_output_and_a_refusal_are_the_models_own() -> None:
    fake = FakeProvider()
    bent, refused = fake.create(REQ), fake.create(REQ)
    assert isinstance(bent, Accepted) and isinstance(refused, Accepted)
    fake.finish(bent.response_id, faults=["schema_break"])
    fake.finish(refused.response_id, refusal="I can't help with that.")
    read = fake.retrieve(bent.response_id)
    assert isinstance(read, Observed) and not validate.validate(read.output_text, PRODUCT).ok
    read = fake.retrieve(refused.response_id)
    assert isinstance(read, Observed) and read.refusal == "I can't help with that." and read.output_text == ""


def test_unknown_ids_are_missing_and_malformed_ones_are_caller_bugs_never_sent() -> None:
    fake = FakeProvider()
    assert isinstance(fake.retrieve("resp_unknown"), Missing)
    assert isinstance(fake.cancel("resp_unknown"), Missing)
    assert isinstance(fake.delete("resp_unknown", has_custody=True), Missing)
    for bad in ("", "resp/../x", "resp x"):
        with pytest.raises(ValueError, match="malformed response id"):
            fake.retrieve(bad)
        with pytest.raises(ValueError, match="malformed response id"):
            fake.delete(bad, has_custody=True)
    assert [c.op for c in fake.calls] == ["retrieve", "cancel", "delete"]


def test_a_delete_without_custody_or_a_kill_raises_and_reaches_nothing() -> None:
    fake = FakeProvider()
    created = fake.create(REQ)
    assert isinstance(created, Accepted)
    with pytest.raises(InvariantViolation):
        fake.delete(created.response_id, has_custody=False)
    assert fake.count("delete") == 0 and fake.held_ids == [created.response_id]
    assert fake.delete(created.response_id, has_custody=False, kill_requested=True) == Deleted(created.response_id)
    (delete,) = fake.calls_of("delete")
    assert (delete.has_custody, delete.kill_requested) == (False, True)
    assert isinstance(fake.retrieve(created.response_id), Missing)
    assert isinstance(fake.delete(created.response_id, has_custody=True), Missing)  # gone already


def test_a_cancel_stops_a_running_response_and_a_finished_one_is_rejected() -> None:
    fake = FakeProvider()
    running, done = fake.create(REQ), fake.create(REQ)
    assert isinstance(running, Accepted) and isinstance(done, Accepted)
    fake.finish(done.response_id)
    cancelled = fake.cancel(running.response_id)
    assert isinstance(cancelled, Observed) and cancelled.status == "cancelled"
    again = fake.cancel(running.response_id)
    assert isinstance(again, Observed) and again.status == "cancelled"
    refused = fake.cancel(done.response_id)
    assert isinstance(refused, Rejected) and refused.status == 400 and "complete" in refused.why
    assert fake.status_of(done.response_id) == "complete"


def test_scripted_outcomes_answer_in_order_for_their_response_first_then_the_defaults() -> None:
    fake = FakeProvider()
    fake.script_create(Refused(2.0, "HTTP 429: slow down", "rate_limit_exceeded", kind=RefusalKind.RATE),
                       Ambiguous("HTTP 500"), Accepted("resp_scripted", "running", "flex"))
    outcomes = [fake.create(REQ) for _ in range(4)]
    assert [type(o) for o in outcomes] == [Refused, Ambiguous, Accepted, Accepted]
    assert fake.accepted == 2 and fake.status_of("resp_scripted") == "running"  # an accepted one is held
    read = fake.retrieve("resp_scripted")
    assert isinstance(read, Observed) and read.tier == "flex"
    fake.script_retrieve(Transient(None, "HTTP 500"))
    fake.script_retrieve(Missing("HTTP 404"), response_id="resp_scripted")
    assert isinstance(fake.retrieve("resp_scripted"), Missing)  # its own script first
    assert isinstance(fake.retrieve("resp_scripted"), Transient)  # then the one for any response
    assert isinstance(fake.retrieve("resp_scripted"), Observed)  # then what the provider holds
    fake.script_delete(Transient(None, "refused", unreachable=True))
    assert isinstance(fake.delete("resp_scripted", has_custody=True), Transient)
    assert fake.held_ids.count("resp_scripted") == 1
    assert [type(c.outcome).__name__ for c in fake.calls_of("delete")] == ["Transient"]


def test_a_script_a_call_cannot_answer_is_a_tests_bug() -> None:
    fake = FakeProvider()
    fake.script_retrieve(Deleted("resp_1"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a retrieve cannot answer"):
        fake.retrieve("resp_1")


def test_a_view_with_its_time_spent_sends_no_read_but_still_creates() -> None:
    fake = FakeProvider()
    late = fake.until(time.monotonic() - 1)
    assert late.retrieve("resp_1") == Transient(None, "not sent: the request budget is spent")
    assert late.delete("resp_1", has_custody=True) == Transient(None, "not sent: the request budget is spent")
    assert isinstance(late.create(REQ), Accepted)  # a create is never cut short
    in_time = fake.until(time.monotonic() + 60)
    assert isinstance(in_time.retrieve("resp_1"), Missing)
    assert [c.op for c in fake.calls] == ["create", "retrieve"]  # the views share one record
    late.close()  # a view's close leaves the provider open
    assert isinstance(fake.retrieve("resp_1"), Missing)


def test_a_closed_provider_sends_nothing() -> None:
    fake = FakeProvider()
    fake.close()
    assert fake.create(REQ) == Refused(None, "not sent: RuntimeError: the provider was closed", kind=RefusalKind.UNSENT)
    with pytest.raises(RuntimeError, match="closed"):
        fake.retrieve("resp_1")
    with pytest.raises(ConfigError, match="the provider was closed"):
        fake.ready()
    assert fake.calls == []


def test_ready_says_why_it_cannot_be_set_up() -> None:
    FakeProvider().ready()
    with pytest.raises(ConfigError, match="no CA bundle"):
        FakeProvider(ready_error="no CA bundle").ready()


def test_on_call_sees_each_call_before_it_is_answered() -> None:
    seen: list[tuple[Call, list[str]]] = []
    fake = FakeProvider(on_call=lambda call: seen.append((call, fake.held_ids)))
    created = fake.create(REQ)
    assert isinstance(created, Accepted)
    fake.delete(created.response_id, has_custody=True)
    assert [(c.op, c.outcome, held) for c, held in seen] == [
        ("create", None, []), ("delete", None, [created.response_id])]
    assert [c.outcome for c in fake.calls] == [created, Deleted(created.response_id)]


def test_the_provider_holds_what_it_is_given_and_forgets_it() -> None:
    fake = FakeProvider()
    fake.hold(Held("resp_legacy", "complete", metadata={"iipub_job_id": "job-9"}, output_text="{}"))
    read = fake.retrieve("resp_legacy")
    assert isinstance(read, Observed) and read.metadata == {"iipub_job_id": "job-9"} and read.output_text == "{}"
    fake.forget("resp_legacy")
    assert isinstance(fake.retrieve("resp_legacy"), Missing) and fake.held_ids == []


def test_under_a_lifecycle_a_response_moves_on_by_itself_and_completes_with_its_edition() -> None:
    fake = FakeProvider(lifecycle=(0.2, 60.0))
    created = fake.create(REQ)
    assert isinstance(created, Accepted)
    first = fake.retrieve(created.response_id)
    assert isinstance(first, Observed) and first.stage is Stage.WAITING
    time.sleep(0.25)
    running = fake.retrieve(created.response_id)
    assert isinstance(running, Observed) and running.stage is Stage.RUNNING
    quick = FakeProvider(lifecycle=(0.0, 0.0))
    made = quick.create(REQ)
    assert isinstance(made, Accepted)
    done = quick.retrieve(made.response_id)
    assert isinstance(done, Observed) and done.finished and validate.validate(done.output_text or "", PRODUCT).ok
