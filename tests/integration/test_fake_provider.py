"""The in-memory provider answers what the OpenAI adapter answers over real HTTP (against the
simulator) for the same calls: the same outcome types, statuses, metadata and refusals, so a
step tested on the fake (tests/integration/machine/test_steps.py) meets what it meets in production."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from iipub.core.errors import InvariantViolation
from iipub.edition import validate
from iipub.provider.fake import FakeProvider, Outcome
from iipub.provider.interface import Provider, create_metadata
from iipub.provider.openai.adapter import OpenAIAdapter
from iipub.provider.openai.simulator import Simulator
from iipub.provider.outcomes import Accepted, CreateRequest, Observed, Stage
from iipub.settings.config import Product, ProviderSettings

PRODUCT = Product(name="daily-brief", prompt="Write the brief.", items=3, languages=("en", "es"))
REQ = CreateRequest("job-1", PRODUCT, dt.date(2026, 12, 1), 1, "f" * 64, installation="inst-1")


def shape(outcome: Outcome) -> tuple[Any, ...]:
    """What a step decides from: the outcome's type and the fields decisions read (not the ids,
    texts and times, which differ between any two providers)."""
    if isinstance(outcome, Observed):
        stage = "live" if outcome.live else outcome.stage
        output = None if outcome.output_text is None else validate.validate(outcome.output_text, PRODUCT).ok
        return ("Observed", stage, output, outcome.usage is not None, outcome.metadata, outcome.tier,
                outcome.at_cap, outcome.failure, outcome.refusal)
    if isinstance(outcome, Accepted):  # its status is the provider's own word
        return ("Accepted", outcome.tier)
    return (type(outcome).__name__, getattr(outcome, "status", None), getattr(outcome, "retry_after", None))


def script(provider: Provider, finish: Callable[[], object]) -> list[tuple[Any, ...]]:
    """The same calls on either provider; `finish` lets the provider's running responses finish."""
    answers: list[tuple[Any, ...]] = []
    running = provider.create(REQ)
    assert isinstance(running, Accepted)
    answers += [shape(running), shape(provider.retrieve(running.response_id))]
    answers += [shape(provider.cancel(running.response_id)), shape(provider.cancel(running.response_id))]
    done = provider.create(REQ)
    assert isinstance(done, Accepted)
    finish()
    answers += [shape(provider.retrieve(done.response_id)), shape(provider.cancel(done.response_id))]
    with pytest.raises(InvariantViolation):
        provider.delete(done.response_id, has_custody=False)
    answers += [shape(provider.delete(done.response_id, has_custody=True)),
                shape(provider.retrieve(done.response_id)),
                shape(provider.delete(done.response_id, has_custody=True)),
                shape(provider.retrieve("resp_unknown")), shape(provider.cancel("resp_unknown"))]
    with pytest.raises(ValueError, match="malformed response id"):
        provider.retrieve("resp/../x")
    answers.append(shape(provider.until(time.monotonic() - 1).retrieve(done.response_id)))
    return answers


@pytest.fixture
def adapter(sim: Simulator) -> Iterator[OpenAIAdapter]:
    with OpenAIAdapter(ProviderSettings(base_url=sim.url), "sk-test") as p:
        yield p


def test_the_fake_answers_every_call_as_the_adapter_does_over_http(sim: Simulator, adapter: OpenAIAdapter) -> None:
    over_http = script(adapter, lambda: sim.advance(5))
    fake = FakeProvider()
    in_memory = script(fake, fake.finish)
    assert in_memory == over_http
    meta = create_metadata(REQ)
    assert over_http[1] == ("Observed", "live", None, False, meta, "default", False, None, None)
    assert over_http[4] == ("Observed", Stage.FINISHED, True, True, meta, "default", False, None, None)
    assert [a[0] for a in over_http[5:]] == ["Rejected", "Deleted", "Missing", "Missing", "Missing", "Missing",
                                             "Transient"]
    # Both received the two custody deletes and nothing of the refused one.
    assert sim.stats()["requests"]["delete"] == fake.count("delete") == 2
