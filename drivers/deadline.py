"""Waiting no longer than a deadline for calls that may hang.

A libvirt connect to a host that silently drops packets can take minutes, and libvirt has no timeout of
its own for it. Each call runs in a daemon thread; whoever asked moves on when the time is up and the
thread is left to finish (or not) on its own. Daemon threads rather than a ThreadPoolExecutor: the
interpreter waits for an executor's threads at exit, so one hung connect would hang the command that
already gave up on it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Answer(Generic[T]):
    """What one call came to by the deadline: its value, the exception it raised, or nothing yet."""

    value: T | None = None
    error: Exception | None = None
    timed_out: bool = False


def answers_within(calls: Mapping[str, Callable[[], T]], timeout_s: float) -> dict[str, Answer[T]]:
    """Run every call at once, each in its own daemon thread, and collect what each answered within
    `timeout_s` seconds overall (name -> `Answer`, in the order of `calls`)."""
    answers: dict[str, Answer[T]] = {}
    lock = threading.Lock()

    def run(name: str, call: Callable[[], T]) -> None:
        try:
            answer: Answer[T] = Answer(value=call())
        except Exception as exc:   # the caller reads it as that call's answer
            answer = Answer(error=exc)
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
