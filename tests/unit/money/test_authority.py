"""The payment authority's rule (pure): each kind of evidence refuses with one line naming it
and a remedy that pays nothing; a pay-again overrides what it may; nothing overrides "nothing
to buy" or a drifted configuration."""

from __future__ import annotations

import pytest

from iipub.money.authority import Evidence, Facts, Route, may_pay
from iipub.money.spend import SlotSpend

BASE = Facts(job_id="j1", slot="p/2026-01-01", languages=("en", "es"))


@pytest.mark.parametrize(("facts", "evidence", "words"), [
    (Facts(**{**BASE.__dict__, "payload_sha256": "ab" * 32}), Evidence.CUSTODY, "iipub revalidate j1"),
    (Facts(**{**BASE.__dict__, "track_payloads": {"es": "cd" * 32}}), Evidence.CUSTODY, "--lang L"),
    (Facts(**{**BASE.__dict__, "ledger": SlotSpend("p/2026-01-01", custody_response_id="resp_1"),
              "ledger_ahead": ("custody",)}), Evidence.LEDGER, "iipub orphans adopt resp_1 j1"),
    (Facts(**{**BASE.__dict__, "legacy": ("create",)}), Evidence.LEGACY, "iipub adopt FILE"),
    (Facts(**{**BASE.__dict__, "live": ("en", "es")}), Evidence.LIVE, "iipub jobs import-payload j1"),
])
def test_each_evidence_refuses_in_one_line_with_a_free_remedy_and_pay_again_overrides_it(
        facts: Facts, evidence: Evidence, words: str) -> None:
    ruling = may_pay(facts, Route.RELEASE)
    assert not ruling.allowed and ruling.evidence == evidence
    assert "\n" not in ruling.line() and words in ruling.line() and "--pay-again" in ruling.line()
    again = may_pay(Facts(**{**facts.__dict__, "pay_again": "on purpose"}), Route.RELEASE)
    assert again.allowed and again.overridden == (evidence.value,)


def test_nothing_to_buy_and_a_drifted_config_are_never_overridden() -> None:
    done = Facts(**{**BASE.__dict__, "saved": ("en", "es"), "pay_again": "please"})
    assert may_pay(done, Route.REGENERATE).evidence == Evidence.LANGUAGES
    drifted = Facts(**{**BASE.__dict__, "drift": ("a" * 64, "b" * 64), "pay_again": "please"})
    assert may_pay(drifted, Route.SWEEP).evidence == Evidence.CONFIG
    assert may_pay(drifted, Route.RELEASE).allowed  # the release records the deployed config


def test_regenerate_replaces_the_output_the_operator_declared_bad_but_sees_the_rest() -> None:
    held = Facts(**{**BASE.__dict__, "payload_sha256": "ab" * 32})
    assert may_pay(held, Route.REGENERATE).allowed
    assert may_pay(Facts(**{**held.__dict__, "legacy": ("publish",)}), Route.REGENERATE).evidence == Evidence.LEGACY


def test_a_live_page_for_only_some_languages_still_leaves_something_to_buy() -> None:
    assert may_pay(Facts(**{**BASE.__dict__, "live": ("en",)}), Route.SWEEP).allowed
    assert may_pay(Facts(**{**BASE.__dict__, "saved": ("en",), "live": ("es",)}), Route.SWEEP).evidence \
        == Evidence.LIVE


def test_an_operator_path_on_a_job_behind_the_ledger_is_left_to_the_restore_fence() -> None:
    behind = Facts(**{**BASE.__dict__, "live": ("en", "es"), "fence_pending": True})
    assert may_pay(behind, Route.REGENERATE).allowed  # the sweep's fence adopts it first, paying nothing
    assert not may_pay(behind, Route.SWEEP).allowed


def test_a_paid_correction_buys_the_languages_it_replaces_only_on_the_operators_word() -> None:
    published = Facts(**{**BASE.__dict__, "saved": ("en", "es"), "live": ("en", "es"), "payload_sha256": "ab" * 32})
    assert may_pay(published, Route.CORRECT).evidence == Evidence.LANGUAGES  # nothing named: nothing to buy
    named = Facts(**{**published.__dict__, "replacing": ("en",)})
    refused = may_pay(named, Route.CORRECT)  # the site serves it: only a pay-again buys it again
    assert not refused.allowed and refused.evidence == Evidence.LIVE and "--pay-again" in refused.line()
    again = may_pay(Facts(**{**named.__dict__, "pay_again": "a wrong figure"}), Route.CORRECT)
    assert again.allowed and again.overridden == ("live",)  # the output it replaces is not evidence
    assert may_pay(Facts(**{**named.__dict__, "pay_again": "x"}), Route.RELEASE).overridden == ("custody", "live")
