"""The run's counters: every thread's counts summed into the report and its summary."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from iipub.machine.run.counters import Counters, SweepReport
from iipub.model.states import State
from iipub.provider.outcomes import Transient

# -- the counters ------------------------------------------------------------------------------


def test_the_counters_sum_every_threads_counts_into_the_report_summary() -> None:
    counters = Counters(SweepReport(worker="w"))

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
    counters = Counters(SweepReport(worker="w"))
    counters.count("creates", 2)
    counters.create_refused()
    assert (counters.report.creates, counters.report.refused) == (1, 1)


def test_a_run_whose_every_provider_call_failed_to_connect_reports_the_provider_unreachable() -> None:
    counters = Counters(SweepReport(worker="w"))
    assert not counters.report.provider_unreachable  # no call at all: not unreachable
    counters.called(Transient(None, "connect failed", unreachable=True))
    assert counters.report.provider_unreachable
    counters.called(Transient(None, "read timeout"))
    assert not counters.report.provider_unreachable and counters.report.unreachable == 1
