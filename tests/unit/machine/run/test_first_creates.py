"""The first-create rule: a request's creates one at a time until one is accepted."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from iipub.machine.run.first_creates import FirstCreates

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
