"""The restore fence's pure decisions: what the spend ledger proves about a restored job."""

from __future__ import annotations

from dataclasses import replace

import pytest

from iipub.core.errors import OperatorRefused
from iipub.machine import decisions
from iipub.model.states import Reason, State
from iipub.money.spend import SlotSpend
from iipub.operate import remedies
from iipub.provider.openai import codes
from iipub.provider.outcomes import Missing
from tests.unit.machine.test_decisions import job

SLOT = "daily-brief/2026-11-29"
LIVE = {"en": "a" * 64}


def spend(**kw: object) -> SlotSpend:
    s = SlotSpend(SLOT, charged=1, response_id="resp_1", response_attempt=1)
    s.job_ids.append(job().id)
    for k, v in kw.items():
        setattr(s, k, v)
    return s


def test_a_create_left_in_flight_adopts_the_response_the_ledger_recorded_for_that_attempt() -> None:
    in_flight = job(State.CREATE_IN_FLIGHT, generation_attempts=1)
    d = decisions.in_flight_on_ledger(in_flight, spend())
    assert d is not None and (d.to, d.reason) == (State.ACCEPTED, Reason.RESTORED_ADOPTED)
    assert d.changes["response_id"] == "resp_1" and d.detail["attempts_added"] == 0
    assert decisions.in_flight_on_ledger(replace(in_flight, generation_attempts=2), spend()) is None  # another attempt
    assert decisions.in_flight_on_ledger(in_flight, spend(response_id=None)) is None  # no outcome recorded
    assert decisions.in_flight_on_ledger(in_flight, None) is None


def test_a_restored_job_is_closed_only_on_the_live_sites_proof_and_a_gone_response() -> None:
    parked = job(State.QUARANTINED, quarantine_reason="restored_behind_ledger")
    s = spend(published=1, published_editions=LIVE)
    d = decisions.adopt_published(parked, s, LIVE, Missing("404"))
    assert d is not None and (d.to, d.reason) == (State.DELETED, Reason.RESTORED_PUBLISHED)
    assert d.changes["generation_attempts"] == 1 and d.detail["attempts_added"] == 1 and d.detail["ledger_ack"]
    assert decisions.adopt_published(parked, s, None, Missing("404")) is None  # the page is not live
    running = codes.observed("resp_1", "in_progress")
    assert decisions.adopt_published(parked, s, LIVE, running) is None  # still at the provider: adopt that


def test_verified_lost_on_a_restored_job_charges_the_ledger_or_refuses() -> None:
    parked = job(State.QUARANTINED, quarantine_reason="restored_behind_ledger", generation_attempts=0)
    d = remedies.release_verified_lost(parked, 3, "al", "gone", spend(charged=2))
    assert d.changes["generation_attempts"] == 2 and d.detail["charged_from_ledger"] == 2
    with pytest.raises(OperatorRefused, match="spend ledger records 3 paid creates"):
        remedies.release_verified_lost(parked, 3, "al", "gone", spend(charged=3))
    with pytest.raises(OperatorRefused, match="live site still serves"):
        remedies.release_verified_lost(parked, 3, "al", "gone", spend(), LIVE)
