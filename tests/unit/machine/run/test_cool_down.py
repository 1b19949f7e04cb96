"""One kind of provider call's cool-down in this process: its seconds, its cap, a run-long hold."""

from __future__ import annotations

import time

from iipub.machine.run.cool_down import CoolDown

# -- a cool-down's clock -----------------------------------------------------------------------


def test_a_cool_down_holds_for_its_seconds_and_a_longer_one_already_running_stays() -> None:
    cool = CoolDown()
    assert not cool.cooling()
    cool.hold(0.2)
    cool.hold(0.01)  # shorter: the running one stays
    time.sleep(0.05)
    assert cool.cooling()
    time.sleep(0.2)
    assert not cool.cooling()


def test_a_capped_cool_down_never_holds_past_its_cap() -> None:
    reads = CoolDown(cap=0.05)
    reads.hold(3600)  # a hint of an hour: honoured up to the cap
    assert reads.cooling()
    time.sleep(0.08)
    assert not reads.cooling()
    reads.hold(-5)  # a hint in the past holds nothing
    assert not reads.cooling()


def test_a_cool_down_that_lasts_the_run_holds_to_its_end_whatever_the_hint() -> None:
    creates = CoolDown(lasts_until=time.monotonic() + 0.15)
    assert not creates.cooling()  # nothing started yet
    creates.hold(0.01)
    time.sleep(0.05)
    assert creates.cooling()  # the hint has passed; the run's creates still wait
    time.sleep(0.12)
    assert not creates.cooling()
