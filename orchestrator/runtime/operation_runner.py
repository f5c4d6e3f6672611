"""Runs the hosts' operations off the store's lock: in order on each host, side by side across hosts.

The daemon plans under the lock and hands each operation (start, stop, save, move, migrate, clean up) to
the runner with the hosts it touches. An operation waits for the operations handed in before it that
touch one of its hosts (so a host's stop comes before the start that needs its room, and a lease's save,
move and restore keep their order), and otherwise runs at once on a worker thread: a host whose
shutdown takes 30 s holds up only what comes after it on that host. Outcomes are queued for the daemon
to take under the lock (`take_outcomes`); the runner itself never touches the store.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Job:
    """One operation: what to call, on which hosts, for which lease; `tag` is the caller's (its intent)."""

    run: Callable[[], Any]
    hosts: frozenset[str]
    lease_id: int | None = None
    tag: Any = None
    id: int = 0
    waiting_on: int = 0
    followers: list["Job"] = field(default_factory=list)


@dataclass(frozen=True)
class Outcome:
    job: Job
    error: BaseException | None
    result: Any = None


class OperationRunner:
    """A pool of `workers` threads over per-host queues (see the module docstring).

    `on_finish` is called on the worker thread after each job (to wake the daemon's loop)."""

    def __init__(self, workers: int = 8, on_finish: Callable[[], None] | None = None):
        if workers < 1:
            raise ValueError(f"workers must be at least 1 (got {workers})")
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="leasewise-op")
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._last: dict[str, Job] = {}          # host -> the last job handed in that touches it, unfinished
        self._unfinished: set[Job] = set()
        self._outcomes: deque[Outcome] = deque()
        self._ids = itertools.count(1)
        self._on_finish = on_finish
        self._closed = False

    def submit(self, job: Job) -> Job:
        with self._lock:
            if self._closed:
                raise RuntimeError("the operation runner is closed")
            job.id = next(self._ids)
            before = {self._last[h] for h in job.hosts if h in self._last}
            job.waiting_on = len(before)
            for other in before:
                other.followers.append(job)
            for host in job.hosts:
                self._last[host] = job
            self._unfinished.add(job)
            ready = job.waiting_on == 0
        if ready:
            self._pool.submit(self._run, job)
        return job

    def submit_all(self, jobs: Iterable[Job]) -> list[Job]:
        return [self.submit(job) for job in jobs]

    def _run(self, job: Job) -> None:
        error: BaseException | None = None
        result = None
        try:
            result = job.run()
        except BaseException as exc:   # handed to the daemon, which decides what a failure means
            error = exc
        ready: list[Job] = []
        with self._lock:
            self._unfinished.discard(job)
            for host in job.hosts:
                if self._last.get(host) is job:
                    del self._last[host]
            for follower in job.followers:
                follower.waiting_on -= 1
                if follower.waiting_on == 0:
                    ready.append(follower)
            job.followers = []
            self._outcomes.append(Outcome(job, error, result))
            self._idle.notify_all()
        for follower in ready:
            self._pool.submit(self._run, follower)
        if self._on_finish is not None:
            try:
                self._on_finish()
            except Exception:
                log.exception("operation runner: on_finish failed")

    def take_outcomes(self) -> list[Outcome]:
        """The outcomes of the jobs finished since the last call, in the order they finished."""
        with self._lock:
            out = list(self._outcomes)
            self._outcomes.clear()
        return out

    def pending(self) -> list[Job]:
        """Jobs handed in and not finished (running or waiting for their hosts)."""
        with self._lock:
            return sorted(self._unfinished, key=lambda j: j.id)

    def busy_leases(self) -> set[int]:
        """Leases with an operation not finished: what the hosts show of them may be about to change."""
        with self._lock:
            return {j.lease_id for j in self._unfinished if j.lease_id is not None}

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every job handed in has finished; False if `timeout` passed first."""
        with self._lock:
            return self._idle.wait_for(lambda: not self._unfinished, timeout)

    def close(self, wait: bool = True) -> None:
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=wait, cancel_futures=not wait)
