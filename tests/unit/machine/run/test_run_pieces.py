"""The pure pieces of a run's context, each on its own: the deadline, a cool-down's clock, the
first-create rule and the counters (no database, no provider)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from iipub.machine.run.cool_down import CoolDown
from iipub.machine.run.counters import Counters, TickReport
from iipub.machine.run.deadline import STOP, Deadline
from iipub.machine.run.first_creates import FirstCreates
from iipub.model.states import State
from iipub.provider.outcomes import Transient

# -- the deadline ------------------------------------------------------------------------------


def test_a_deadline_passes_at_its_moment() -> None:
    ends = Deadline(time.monotonic() + 0.05)
    assert not ends.passed()
    time.sleep(0.06)
    assert ends.passed()


def test_sigterm_passes_every_deadline_at_once() -> None:
    ends = Deadline(time.monotonic() + 3600)
    STOP.set()
    try:
        assert ends.passed()
    finally:
        STOP.clear()
    assert not ends.passed()


def test_the_create_window_counts_from_the_runs_start() -> None:
    now = time.monotonic()
    assert Deadline(now + 50, started=now - 20).too_late_for(18)  # 20 s in, the window was 18 s
    assert not Deadline(now + 50, started=now - 10).too_late_for(18)
    assert not Deadline(now + 50, started=now - 10_000).too_late_for(None)  # no wrapper: no window


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


# -- the first-create rule ---------------------------------------------------------------------


def test_a_requests_creates_go_one_at_a_time_until_one_is_accepted_then_all_at_once() -> None:
    first = FirstCreates()
    inside, most = 0, 0
    lock = threading.Lock()

    def create(request: str) -> None:
        nonlocal inside, most
        with first.one_at_a_time(request):
            with lock:
                inside += 1
                most = max(most, inside)
            time.sleep(0.02)
            with lock:
                inside -= 1

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(create, ["req-a"] * 4))
    assert most == 1  # never proven: one at a time
    first.proven("req-a")
    barrier = threading.Barrier(4, timeout=5)

    def proven_create(request: str) -> None:
        with first.one_at_a_time(request):
            barrier.wait()  # all four inside together, or this times out

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(proven_create, ["req-a"] * 4))


def test_another_requests_creates_do_not_wait_for_an_unproven_one() -> None:
    first = FirstCreates()
    done = threading.Event()

    def other_request() -> None:
        with first.one_at_a_time("req-b"):
            done.set()

    with first.one_at_a_time("req-a"):  # an unproven create of req-a is out
        t = threading.Thread(target=other_request)
        t.start()
        assert done.wait(2)
        t.join()


# -- the counters ------------------------------------------------------------------------------


def test_the_counters_sum_every_threads_counts_into_the_report_summary() -> None:
    counters = Counters(TickReport(worker="w"))

    def work(_: int) -> None:
        counters.count("leased")
        counters.entered(State.ACCEPTED)
        counters.track_entered(State.SAVED_NOT_PUBLIC)
        counters.called(object())

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(400)))
    counters.count("taken", 3)
    summary = counters.report.summary()
    assert summary["leased"] == 400 and summary["taken"] == 3 and summary["provider_calls"] == 400
    assert summary["transitions"] == {"ACCEPTED": 400}
    assert summary["track_transitions"] == {"SAVED_NOT_PUBLIC": 400}
    assert summary["provider_unreachable"] is False and summary["stopped_at_deadline"] is False
    counters.stopped_at_deadline()
    assert counters.report.summary()["stopped_at_deadline"] is True


def test_a_refused_create_is_reported_refused_not_as_a_create() -> None:
    counters = Counters(TickReport(worker="w"))
    counters.count("creates", 2)
    counters.create_refused()
    assert (counters.report.creates, counters.report.refused) == (1, 1)


def test_a_run_whose_every_provider_call_failed_to_connect_reports_the_provider_unreachable() -> None:
    counters = Counters(TickReport(worker="w"))
    assert not counters.report.provider_unreachable  # no call at all: not unreachable
    counters.called(Transient(None, "connect failed", unreachable=True))
    assert counters.report.provider_unreachable
    counters.called(Transient(None, "read timeout"))
    assert not counters.report.provider_unreachable and counters.report.unreachable == 1
