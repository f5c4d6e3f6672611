"""Waiting no longer than a deadline for calls that may hang.

A libvirt connect to a host that silently drops packets can take minutes, and libvirt has no timeout of
its own for it. Each call runs in a daemon thread; whoever asked moves on when the time is up and the
thread is left to finish (or not) on its own. Daemon threads rather than a ThreadPoolExecutor: the
interpreter waits for an executor's threads at exit, so one hung connect would hang the command that
already gave up on it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Generic, TypeVar

T = TypeVar("T")
K = TypeVar("K")


@dataclass(frozen=True)
class Answer(Generic[T]):
    """What one call came to by the deadline: its value, the exception it raised, or nothing yet."""

    value: T | None = None
    error: Exception | None = None
    timed_out: bool = False


def _answer_of(call: Callable[[], T]) -> Answer[T]:
    """What `call()` came to: its value, or the exception it raised (the caller reads it as its answer)."""
    try:
        return Answer(value=call())
    except Exception as exc:
        return Answer(error=exc)


def answers_within(calls: Mapping[str, Callable[[], T]], timeout_s: float) -> dict[str, Answer[T]]:
    """Run every call at once, each in its own daemon thread, and collect what each answered within
    `timeout_s` seconds overall (name -> `Answer`, in the order of `calls`)."""
    answers: dict[str, Answer[T]] = {}
    lock = threading.Lock()

    def run(name: str, call: Callable[[], T]) -> None:
        answer = _answer_of(call)
        with lock:
            answers[name] = answer

    threads = [threading.Thread(target=run, args=(name, call), name=f"leasewise-within-{name}", daemon=True)
               for name, call in calls.items()]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    with lock:
        return {name: answers.get(name, Answer(timed_out=True)) for name in calls}


def answer_within(call: Callable[[], T], timeout_s: float) -> Answer[T]:
    """`answers_within` for one call."""
    return answers_within({"call": call}, timeout_s)["call"]


class Workers:
    """Daemon threads kept for calls that may hang, reused from call to call: starting a thread for each
    call costs more than most calls to a host that answers. A call runs on an idle worker, or on a new one
    when none is idle (so a call never waits behind one that hangs); the one who asked waits for it no
    longer than its deadline (`run_all`)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._workers = 0
        self._busy = 0

    def run_all(self, calls: Mapping[K, Callable[[], T]], timeout_s: float,
                on_late: Callable[[K, Answer[T]], None] | None = None) -> dict[K, Answer[T]]:
        """Every call at once, each on a worker, all waited for `timeout_s` at most: their `Answer`s, in
        the order of `calls`. Calls still running at the deadline go on; `on_late(name, answer)` gets the
        answer of each when it comes."""
        answers: dict[K, Answer[T]] = {}
        changed = threading.Condition()
        state = {"over": False}

        def task(name: K, call: Callable[[], T]) -> None:
            answer = _answer_of(call)
            with changed:
                late = state["over"]
                if not late:
                    answers[name] = answer
                    changed.notify()
            if late and on_late is not None:
                on_late(name, answer)

        for name, call in calls.items():
            self.start(partial(task, name, call))
        deadline = time.monotonic() + timeout_s
        with changed:
            while len(answers) < len(calls) and (left := deadline - time.monotonic()) > 0:
                changed.wait(left)
            state["over"] = True
            return {name: answers.get(name, Answer(timed_out=True)) for name in calls}

    def start(self, task: Callable[[], None]) -> None:
        """`task()` on an idle worker, or on a new one; not waited for."""
        with self._lock:
            if self._workers == self._busy:
                self._workers += 1
                threading.Thread(target=self._work_on, name=self._name, daemon=True).start()
            self._busy += 1   # (counted here, not when picked up: the next task must not count on it)
        self._work.put(task)

    def _work_on(self) -> None:
        while True:
            task = self._work.get()
            try:
                task()
            finally:
                with self._lock:
                    self._busy -= 1
