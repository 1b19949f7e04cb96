"""The spend ledger's lines folded per slot, pure: a create is charged at its intent and refunded
only on a provable refusal, an intent without an outcome stays open, the chain's links are
counted, another installation's lines are left out, and a torn line is counted, never fatal."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any

from iipub.model.jobs import Job, slot_row
from iipub.money import spend
from iipub.money.spend import Fold, SlotSpend

SLOT = spend.slot_of("daily-brief", "2026-11-30")
NOW = dt.datetime(2026, 11, 30, 5, 0)


def line(kind: str, attempt: int = 1, **fields: Any) -> str:
    return json.dumps({"t": kind, "slot": SLOT, "attempt": attempt, "job_id": "job-1", **fields})


def test_a_slot_is_named_product_slash_date() -> None:
    assert SLOT == "daily-brief/2026-11-30"


def test_a_line_that_cannot_be_read_is_none() -> None:
    assert spend.parse(line("intent"))["attempt"] == 1  # type: ignore[index]
    for bad in ('{"t": "intent"', "[]", json.dumps({"t": "bribe", "slot": SLOT, "attempt": 1}),
                json.dumps({"t": "intent", "slot": SLOT, "attempt": "one"}),
                json.dumps({"t": "saved", "slot": SLOT, "attempt": 1, "editions": ["en"]}),
                json.dumps({"t": "open"})):
        assert spend.parse(bad) is None, bad


def test_an_accepted_create_is_charged_and_a_refused_one_is_refunded() -> None:
    slots, bad = spend.summarize([line("intent", fingerprint="fp"), line("outcome", outcome="refused"),
                                  line("intent", 2), line("outcome", 2, outcome="accepted", response_id="resp_2")])
    s = slots[SLOT]
    assert (s.charged, s.last_attempt, s.response_id, s.response_attempt, s.open_intent, bad) == (
        1, 2, "resp_2", 2, False, 0)
    assert s.fingerprint == "fp" and s.uncertain == set()


def test_an_intent_without_an_outcome_stays_open_and_uncertain() -> None:
    slots, _ = spend.summarize([line("intent"), line("outcome", outcome="unknown")])
    assert slots[SLOT].charged == 1 and "1" in slots[SLOT].uncertain
    slots, _ = spend.summarize([line("intent")])
    assert slots[SLOT].open_intent


def test_the_chain_is_counted_and_a_torn_line_is_counted_apart() -> None:
    lines = [line("intent"), line("outcome", outcome="accepted", response_id="r1"),
             line("custody", response_id="r1", payload_sha256="a" * 64), '{"t": "saved", "sl',
             line("saved", editions={"en": "b" * 64}), line("published", response_id="r1", editions={"en": "b" * 64})]
    slots, bad = spend.summarize(lines)
    s = slots[SLOT]
    assert bad == 1
    assert s.counts() == {"custody": 1, "saved": 1, "published": 1}
    assert (s.custody_sha256, s.custody_ids, s.published_editions) == ("a" * 64, ["r1"], {"en": "b" * 64})
    assert spend.has_chain(s) and not spend.has_chain(SlotSpend(SLOT)) and not spend.has_chain(None)
    assert s.evidence()["custody_lines"] == 1


def test_only_this_installations_lines_count_and_old_lines_only_when_claimed() -> None:
    mine = line("intent", installation="inst_a")
    theirs = line("intent", installation="inst_b")
    old = line("intent")  # written before lines named their installation
    fold = Fold("inst_a", legacy_is_ours=lambda job_id, responses: False)
    fold.feed([old, mine, theirs])
    assert (fold.slots[SLOT].charged, fold.foreign, fold.foreign_legacy) == (1, 1, 1)
    claimed = Fold("inst_a", legacy_is_ours=lambda job_id, responses: job_id == "job-1")
    claimed.feed([old, mine])
    assert claimed.slots[SLOT].charged == 2
    everything = Fold()
    everything.feed([old, mine, theirs])
    assert everything.slots[SLOT].charged == 3


def test_a_job_is_behind_when_the_ledger_knows_more_paid_creates() -> None:
    job = Job.from_row(slot_row(job_id="job-1", product="daily-brief", day=dt.date(2026, 11, 30), priority=0,
                                opens_at=NOW, now=NOW))
    assert not spend.behind(job, None)
    assert spend.behind(job, SlotSpend(SLOT, charged=1))
    assert not spend.behind(dataclasses.replace(job, generation_attempts=1), SlotSpend(SLOT, charged=1))


def test_composed_editions_of_a_damaged_column_are_empty() -> None:
    assert spend.composed_editions(None) == {}
    assert spend.composed_editions("not json") == {}
    assert spend.composed_editions("[1, 2]") == {}
