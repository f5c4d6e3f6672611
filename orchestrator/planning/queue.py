"""The best-effort queue: leases waiting for room, in submit order (lease id on equal submit times), and
what a pass over it remembers of the leases that did not fit (`FailureMemo`).

Kept sorted as leases come in, so that a pass over it (`LeaseScheduler`) reads it in order and puts back
the ones it could not place without sorting again.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

from orchestrator.model.errors import Unschedulable
from orchestrator.model.lease import Lease
from orchestrator.model.resources import Resources
from orchestrator.model.states import LeaseState as S

#: a waiting lease under its place in the queue
Entry = tuple[datetime, int, Lease]


class LeaseQueue:
    """The waiting leases in order, and how many of them resume (suspended: `resuming`), counted as they
    come and go rather than looked for after every pass. A lease's state does not change while it waits
    (it leaves the queue first), so the count taken when it comes in holds until it leaves."""

    def __init__(self) -> None:
        self._entries: list[Entry] = []
        self._resuming = 0

    @property
    def resuming(self) -> int:
        """How many waiting leases are suspended ones, to be resumed."""
        return self._resuming

    def add(self, lease: Lease) -> None:
        bisect.insort(self._entries, (lease.submit_time, lease.id, lease))
        if lease.state is S.SUSPENDED_QUEUED:
            self._resuming += 1

    def remove(self, lease: Lease) -> bool:
        """Take the lease out; False if it was not waiting."""
        entries = self._entries
        i = bisect.bisect_left(entries, (lease.submit_time, lease.id))
        if i < len(entries) and entries[i][2] is lease:
            del entries[i]
            if lease.state is S.SUSPENDED_QUEUED:
                self._resuming -= 1
            return True
        return False

    def take(self) -> tuple[list[Entry], int]:
        """Every entry in order, and how many of them resume, the queue left empty (for a pass over it)."""
        entries, self._entries = self._entries, []
        resuming, self._resuming = self._resuming, 0
        return entries, resuming

    def put_back(self, kept: list[Entry], resuming: int) -> None:
        """After a pass: the entries it kept (in order, `resuming` of them suspended ones), merged with any
        lease added during the pass."""
        if self._entries:
            for entry in kept:
                bisect.insort(self._entries, entry)
        else:
            self._entries = kept
        self._resuming += resuming

    def __contains__(self, lease: object) -> bool:
        return any(entry[2] is lease for entry in self._entries)

    def __iter__(self) -> Iterator[Lease]:
        return (entry[2] for entry in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __bool__(self) -> bool:
        return bool(self._entries)


class FailureMemo:
    """Within one pass over the queue, skip leases that cannot fit now because a smaller one did not.

    Exact for leases whose nodes are all alike, that are not resuming (those carry host restrictions
    and extra overheads) and that ask for no placement (constraints, spread, pack, exclusive). Each is
    compared by the shortest run a placement of it must last now (`VMScheduler.shortest_run`: its whole
    run, or its scheduling threshold when it may be suspended and that is shorter). If n nodes of size r have no placement lasting e ("strict" or "short": the mapper is
    told that shortest run and, for alike nodes, finds a placement lasting that long whenever one
    exists), then n' >= n nodes of size r' >= r have none lasting e' >= e either: any n of its nodes
    would be one. If they do not even fit at the instant ("instant"), no larger lease does, whatever its
    run. Placing a lease during the pass only adds usage, so every entry holds until the pass ends.
    """

    def __init__(self, shortest_run: Callable[[Lease], timedelta]):
        self._shortest_run = shortest_run
        self._failed: dict[Resources, list[tuple[int, timedelta, Unschedulable]]] = {}

    def _shape(self, lease: Lease) -> tuple[int, Resources, timedelta] | None:
        node = lease.request.uniform
        # (a lease restricted to some hosts, or spread, is no measure of the others, nor they of it)
        if node is None or lease.state is not S.QUEUED or lease.request.placement is not None:
            return None
        return lease.numnodes, node, self._shortest_run(lease)

    def record(self, lease: Lease, kind: Unschedulable | None) -> None:
        shape = self._shape(lease)
        if shape is None or kind is None:
            return
        n, r, d = shape
        entries = self._failed.setdefault(r, [])
        # keep only the smallest failures: an entry the new one rules out is redundant
        entries[:] = [(fn, fd, fk) for fn, fd, fk in entries
                      if not (fn >= n and (kind is Unschedulable.INSTANT
                                           or (fk is not Unschedulable.INSTANT and fd >= d)))]
        entries.append((n, d, kind))

    def rules_out(self, lease: Lease) -> bool:
        if not self._failed:
            return False
        shape = self._shape(lease)
        if shape is None:
            return False
        n, r, d = shape
        for fr, entries in self._failed.items():
            if fr != r and not all(a >= b for a, b in zip(r, fr)):
                continue
            for fn, fd, kind in entries:
                if n >= fn and (kind is Unschedulable.INSTANT or d >= fd):
                    return True
        return False
