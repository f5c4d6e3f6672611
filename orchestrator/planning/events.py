"""The plan's events: each reservation's start and end (and, in a simulation, a VM reservation's early end),
in time order. At one instant: early ends, then ends, then the starts that free hosts (shutdown and
suspension: their VMs must be gone before others start there), then every other start; within each kind,
in the order the reservations were put in the plan. An event whose reservation has left the table, or no
longer starts or ends then, is passed over (nothing is taken out of the heap when a plan changes).
"""

from __future__ import annotations

import heapq
from datetime import datetime

from orchestrator.model.reservations import Reservation, ReservationKind, ReservationState
from orchestrator.planning.slottable.table import SlotTable

EARLY_END, END, FREEING_START, START = 0, 1, 2, 3
_FREEING = (ReservationKind.SHUTDOWN, ReservationKind.SUSPEND)


class PlanEvents:
    def __init__(self, table: SlotTable) -> None:
        self._table = table
        self._heap: list[tuple[datetime, int, int, Reservation]] = []
        self._seq = 0

    def add(self, rr: Reservation) -> None:
        """The reservation's events (it has just been put in the table)."""
        self._push(rr.start, FREEING_START if rr.kind in _FREEING else START, rr)
        self._push(rr.end, END, rr)
        if rr.premature_end is not None:
            self._push(rr.premature_end, EARLY_END, rr)

    def _push(self, t: datetime, kind: int, rr: Reservation) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, kind, self._seq, rr))

    def _due(self, t: datetime, kind: int, rr: Reservation) -> bool:
        if rr not in self._table:
            return False
        if kind >= FREEING_START:
            return rr.state is ReservationState.SCHEDULED and rr.start == t
        if kind == END:
            return rr.state is ReservationState.ACTIVE and rr.end == t
        return rr.state is ReservationState.ACTIVE and rr.premature_end == t and rr.kind is ReservationKind.VM

    def next_time(self) -> datetime | None:
        """When the next event may be due (None: none is planned)."""
        heap, table = self._heap, self._table
        while heap:
            t, kind, _, rr = heap[0]
            if self._due(t, kind, rr) or (kind < FREEING_START and rr in table
                                          and rr.state is ReservationState.SCHEDULED):
                return t
            heapq.heappop(heap)
        return None

    def pop_due(self, now: datetime) -> tuple[int, Reservation] | None:
        """The next event due at or before `now` (its kind and reservation), taken out; None when none is."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            t, kind, _, rr = heapq.heappop(heap)
            if self._due(t, kind, rr):
                return kind, rr
        return None
