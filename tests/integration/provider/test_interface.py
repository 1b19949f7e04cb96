"""The parity suite: the same provider cases against the in-memory fake (`provider.fake`) and the
OpenAI adapter over real HTTP to the simulator (`provider/openai/`), each asserting what iipub
sees in its own words (`outcomes`): how a response stands, ends and goes, how a create is
refused, what a delete needs, what a deadline cuts. A case that holds on one provider and not on
the other is a provider that does not keep `provider/interface.py`'s rules."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from iipub.core.errors import InvariantViolation
from iipub.edition import validate
from iipub.provider.fake import FakeProvider
from iipub.provider.interface import Provider, create_metadata
from iipub.provider.openai.adapter import OpenAIAdapter
from iipub.provider.openai.simulator import faults as sim_faults
from iipub.provider.outcomes import (
    Accepted,
    CreateOutcome,
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
)
from iipub.settings.config import Product, ProviderSettings
from tests.support.simulator import MINUTE, simulator

PRODUCT = Product(name="daily-brief", prompt="Write the brief.", items=3, languages=("en", "es"))
REQ = CreateRequest("job-1", PRODUCT, dt.date(2026, 12, 1), 1, "f" * 64, installation="inst-1")
FLEX = CreateRequest("job-2", PRODUCT, dt.date(2026, 12, 1), 1, "f" * 64, installation="inst-1", tier="flex")

# How a response ends, and the simulator fault bound to its create that ends it so.
ENDINGS = {"complete": None, "cut_at_cap": sim_faults.INCOMPLETE, "failed": sim_faults.FAIL,
           "failed_refused": sim_faults.FAIL_REFUSED}
# A refused create by kind, and the simulator fault that refuses it.
REFUSALS = {RefusalKind.QUOTA: sim_faults.QUOTA_EXHAUSTED, RefusalKind.RATE: sim_faults.RATE_LIMIT,
            RefusalKind.CAPACITY: sim_faults.FLEX_UNAVAILABLE}


@dataclass
class Subject:
    """One provider under test and the hands that make it answer each case."""

    name: str
    provider: Provider
    create_ending: Callable[[CreateRequest, str], CreateOutcome]  # a create that will end that way
    finish: Callable[[], None]  # let every live response end as its create said
    refuse_next: Callable[[RefusalKind], None]  # the next create is refused for that kind
    deletes_sent: Callable[[], int]
    elsewhere: str  # a scope of another account of the same provider
    endings: dict[str, str] = field(default_factory=dict)


def _fake() -> Iterator[Subject]:
    fake = FakeProvider()
    subject: Subject

    def create_ending(req: CreateRequest, ending: str) -> CreateOutcome:
        outcome = fake.create(req)
        if isinstance(outcome, Accepted):
            subject.endings[outcome.response_id] = ending
        return outcome

    def finish() -> None:
        for rid, ending in subject.endings.items():
            if fake.status_of(rid) in ("waiting", "running"):
                refused = ending == "failed_refused"
                fake.finish(rid, ending="failed" if refused else ending,
                            failure=FailureCause.REFUSAL if refused else FailureCause.PROVIDER_FAULT)

    def refuse_next(kind: RefusalKind) -> None:
        fake.script_create(Refused(None, f"refused: {kind}", kind=kind))

    subject = Subject("fake", fake, create_ending, finish, refuse_next, lambda: fake.count("delete"),
                      FakeProvider(scope="another account").scope)
    yield subject


def _over_http() -> Iterator[Subject]:
    # Responses stay live until the test lets them finish (the simulator's clock is advanced).
    with simulator(**MINUTE) as sim, OpenAIAdapter(ProviderSettings(base_url=sim.url), "sk-test") as adapter:
        def create_ending(req: CreateRequest, ending: str) -> CreateOutcome:
            fault = ENDINGS[ending]
            if fault is not None:
                sim.add_faults([{"op": "create", "fault": fault, "times": 1}])
            return adapter.create(req)

        def refuse_next(kind: RefusalKind) -> None:
            sim.add_faults([{"op": "create", "fault": REFUSALS[kind], "times": 1}])

        def finish() -> None:
            sim.advance(120)  # past the lifecycle: every response has ended

        yield Subject("http", adapter, create_ending, finish, refuse_next,
                      lambda: int(sim.stats()["requests"]["delete"]),
                      OpenAIAdapter(ProviderSettings(base_url=sim.url), "sk-another-key").scope)


@pytest.fixture(params=["fake", "http"])
def subject(request: pytest.FixtureRequest) -> Iterator[Subject]:
    yield from (_fake() if request.param == "fake" else _over_http())


def _accepted(outcome: CreateOutcome) -> str:
    assert isinstance(outcome, Accepted), outcome
    return outcome.response_id


def test_a_create_is_held_live_then_finished_with_a_valid_edition(subject: Subject) -> None:
    p = subject.provider
    created = subject.create_ending(REQ, "complete")
    rid = _accepted(created)
    assert isinstance(created, Accepted) and created.tier == "default"
    live = p.retrieve(rid)
    assert isinstance(live, Observed) and live.live and live.output_text is None
    assert live.metadata == create_metadata(REQ)  # every read answers the create's metadata
    assert p.stage_of(live.status) is live.stage  # its own word for it means what the read said
    subject.finish()
    done = p.retrieve(rid)
    assert isinstance(done, Observed) and done.stage is Stage.FINISHED and not done.at_cap
    assert done.failure is None and done.refusal is None and done.usage is not None
    assert validate.validate(done.output_text or "", PRODUCT).ok
    assert p.stage_of(done.status) is Stage.FINISHED


@pytest.mark.parametrize(("ending", "stage", "at_cap", "failure"), [
    ("cut_at_cap", Stage.FINISHED, True, None),
    ("failed", Stage.GONE, False, FailureCause.PROVIDER_FAULT),
    ("failed_refused", Stage.GONE, False, FailureCause.REFUSAL),
])
def test_a_response_ends_every_way_iipub_tells_apart(subject: Subject, ending: str, stage: Stage, at_cap: bool,
                                                     failure: FailureCause | None) -> None:
    rid = _accepted(subject.create_ending(REQ, ending))
    subject.finish()
    read = subject.provider.retrieve(rid)
    assert isinstance(read, Observed)
    assert (read.stage, read.at_cap, read.failure) == (stage, at_cap, failure)
    assert (read.output_text is not None) is (stage is Stage.FINISHED)
    assert subject.provider.stage_of(read.status) is stage


def test_a_cancel_ends_a_live_response_and_a_finished_one_is_rejected(subject: Subject) -> None:
    p = subject.provider
    running = _accepted(subject.create_ending(REQ, "complete"))
    cancelled = p.cancel(running)
    assert isinstance(cancelled, Observed) and cancelled.gone and cancelled.failure is None
    again = p.cancel(running)
    assert isinstance(again, Observed) and again.gone
    done = _accepted(subject.create_ending(REQ, "complete"))
    subject.finish()
    assert isinstance(p.cancel(done), Rejected) and p.cancel(done).status == 400  # type: ignore[union-attr]
    read = p.retrieve(done)
    assert isinstance(read, Observed) and read.finished  # the cancel changed nothing


def test_a_delete_needs_custody_or_a_kill_and_a_deleted_response_is_missing(subject: Subject) -> None:
    p = subject.provider
    rid = _accepted(subject.create_ending(REQ, "complete"))
    subject.finish()
    with pytest.raises(InvariantViolation):
        p.delete(rid, has_custody=False)
    assert subject.deletes_sent() == 0  # refused before anything was sent
    assert p.delete(rid, has_custody=True) == Deleted(rid)
    assert isinstance(p.retrieve(rid), Missing)
    assert isinstance(p.delete(rid, has_custody=True), Missing)  # gone already
    assert subject.deletes_sent() == 2


def test_an_unknown_id_is_missing_and_a_malformed_one_is_a_callers_bug(subject: Subject) -> None:
    p = subject.provider
    assert isinstance(p.retrieve("resp_unknown"), Missing)
    assert isinstance(p.cancel("resp_unknown"), Missing)
    for call in (p.retrieve, p.cancel):
        with pytest.raises(ValueError, match="malformed response id"):
            call("resp/../x")


def test_a_view_past_its_deadline_sends_no_read_but_a_create_goes(subject: Subject) -> None:
    late = subject.provider.until(time.monotonic() - 1)
    assert late.retrieve("resp_unknown") == Transient(None, "not sent: the request budget is spent")
    assert late.delete("resp_unknown", has_custody=True) == Transient(None, "not sent: the request budget is spent")
    assert isinstance(subject.create_ending(REQ, "complete"), Accepted)  # a create is never cut short
    late.close()  # a view's close leaves the provider open
    assert isinstance(subject.provider.retrieve("resp_unknown"), Missing)


def test_a_scope_is_opaque_and_reaches_itself(subject: Subject) -> None:
    p = subject.provider
    assert p.scope and "sk-" not in p.scope  # never the key
    assert p.reaches(p.scope)
    assert not p.reaches(subject.elsewhere)


@pytest.mark.parametrize("kind", list(REFUSALS))
def test_a_refused_create_says_why_in_iipubs_words(subject: Subject, kind: RefusalKind) -> None:
    subject.refuse_next(kind)
    outcome = subject.provider.create(FLEX if kind is RefusalKind.CAPACITY else REQ)
    assert isinstance(outcome, Refused) and outcome.kind is kind
    assert outcome.capacity is (kind is RefusalKind.CAPACITY)
    assert isinstance(subject.create_ending(REQ, "complete"), Accepted)  # only that create was refused
