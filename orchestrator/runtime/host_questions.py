"""Asking every host the same question at once, and waiting for the answers no longer than a deadline.

A host that drops every packet (cut off, or powered off behind a router) holds a libvirt call for minutes,
and the daemon's look asks every host once a poll interval: asked one after another, that one host would
hold up the look at all the others, and with it every start and stop the step makes. So the hosts are asked
at once, each by a worker thread; a host that has not answered by the deadline counts as silent for this
look (`HostUnreachable`), and its question stays open in its worker. Until it is answered the host is not
asked again: at most one question per host is ever open, so a dead host holds at most one thread.

Every question gets a worker at once (`drivers.deadline.Workers`: one kept idle from an earlier look, or a
new one): a cap would queue the questions to hosts that answer behind those to hosts that never will. So
there are at most as many workers as hosts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from drivers.deadline import Workers
from drivers.errors import HostUnreachable

T = TypeVar("T")


@dataclass
class _Round(Generic[T]):
    """One `ask`: the answers that came in time. After the deadline, late answers are not kept."""

    answers: dict[str, T | Exception] = field(default_factory=dict)
    waiting: int = 0
    over: bool = False
    changed: threading.Condition = field(default_factory=threading.Condition)


class HostQuestions:
    """The worker threads that ask hosts, and the questions still open (host -> when it was asked)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, float] = {}
        self._workers = Workers("leasewise-host-question")

    def ask(self, hosts: Sequence[str], question: Callable[[str], T], timeout_s: float) -> dict[str, T | Exception]:
        """Each host's answer to `question(host)`, or the exception it raised, or `HostUnreachable` when it
        did not answer within `timeout_s` (or has not answered an earlier question yet), in host order."""
        started = time.monotonic()
        round_: _Round[T] = _Round()
        asked = []
        with self._lock:
            for host in hosts:
                since = self._open.get(host)
                if since is not None:
                    round_.answers[host] = HostUnreachable(
                        f"no answer yet to the question asked {started - since:.0f} s ago")
                else:
                    self._open[host] = started
                    asked.append(host)
            round_.waiting = len(asked)
        for host in asked:
            self._workers.start(lambda host=host: self._answer(host, question, round_))
        deadline = started + timeout_s
        with round_.changed:
            while round_.waiting and (left := deadline - time.monotonic()) > 0:
                round_.changed.wait(left)
            round_.over = True
            answers = dict(round_.answers)
        return {host: answers[host] if host in answers else
                HostUnreachable(f"no answer within {timeout_s:g} s") for host in hosts}

    def open_questions(self) -> dict[str, float]:
        """The hosts whose question is still open, and when it was asked (`time.monotonic()`)."""
        with self._lock:
            return dict(self._open)

    def _answer(self, host: str, question: Callable[[str], T], round_: _Round[T]) -> None:
        try:
            answer: T | Exception = question(host)
        except Exception as exc:   # (the host's answer: the caller reads it as such)
            answer = exc
        with self._lock:
            self._open.pop(host, None)
        with round_.changed:
            if not round_.over:
                round_.answers[host] = answer
                round_.waiting -= 1
                round_.changed.notify()
