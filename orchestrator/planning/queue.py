"""The best-effort queue: leases waiting for room, in submit order (lease id on equal submit times).

Kept sorted as leases come in, so that a pass over it (`LeaseScheduler`) reads it in order and puts back
the ones it could not place without sorting again.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from datetime import datetime

from orchestrator.model.lease import Lease

#: a waiting lease under its place in the queue
Entry = tuple[datetime, int, Lease]


class LeaseQueue:
    def __init__(self) -> None:
        self._entries: list[Entry] = []

    def add(self, lease: Lease) -> None:
        bisect.insort(self._entries, (lease.submit_time, lease.id, lease))

    def remove(self, lease: Lease) -> bool:
        """Take the lease out; False if it was not waiting."""
        entries = self._entries
        i = bisect.bisect_left(entries, (lease.submit_time, lease.id))
        if i < len(entries) and entries[i][2] is lease:
            del entries[i]
            return True
        return False

    def take(self) -> list[Entry]:
        """Every entry in order, the queue left empty (for a pass over it)."""
        entries, self._entries = self._entries, []
        return entries

    def put_back(self, kept: list[Entry]) -> None:
        """After a pass: the entries it kept (in order), merged with any lease added during the pass."""
        if self._entries:
            for entry in kept:
                bisect.insort(self._entries, entry)
        else:
            self._entries = kept

    def __contains__(self, lease: object) -> bool:
        return any(entry[2] is lease for entry in self._entries)

    def __iter__(self) -> Iterator[Lease]:
        return (entry[2] for entry in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __bool__(self) -> bool:
        return bool(self._entries)
