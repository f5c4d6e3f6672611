"""The daemon's long loops outside the lock let other threads take the GIL as they go."""

from __future__ import annotations

import sys
import threading

import pytest

from drivers.gil_sharing import sharing_the_gil


@pytest.fixture
def long_switch_interval():
    """A switch interval of a second: within the loops below nothing but their own pauses hands the GIL on."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _woken_during(loop_over) -> bool:
    """Whether a thread woken as a pure-Python loop begins runs before the loop ends."""
    order: list[str] = []
    wake = threading.Event()
    waiter = threading.Thread(target=lambda: (wake.wait(), order.append("waiter")))
    waiter.start()
    total = 0
    for index in loop_over(range(20_000)):
        if index == 1:
            wake.set()
        total += sum(range(20))   # (a little Python work per item, no waits)
    order.append("loop")
    waiter.join()
    return order[0] == "waiter"


def test_the_items_come_as_they_are():
    assert list(sharing_the_gil(iter("abcdefg"), 3)) == list("abcdefg")


def test_a_thread_woken_meanwhile_runs_before_the_loop_ends(long_switch_interval):
    assert _woken_during(lambda items: sharing_the_gil(items, 10))
    assert not _woken_during(lambda items: items)   # (without the pauses it waits for the loop's end)
