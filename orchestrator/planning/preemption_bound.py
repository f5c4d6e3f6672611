"""A bound on what a preemption can free: whether a lease could fit over [start, end) on the hosts it may
use, were a set of reservations gone. The mapper's preemption asks it before each placement it would try.

Preemption adds victims one at a time, the most preemptable first, and tries the placement after each;
then it gives back, one at a time, the victims the placement did not need. A placement walks every
candidate host, and a large lease on a busy site may need hundreds of victims, so most of those trials
are of victim sets that could not possibly hold the lease. The bound rules them out with arithmetic: per
host, the peak usage over the interval less the excluded reservations (kept up to date as victims come
and go), and from it how many of the lease's smallest nodes fit there through the whole interval (at most
one for a spread lease; for an exclusive one, one if the host is empty throughout). The lease fits only if
those add up to its nodes and the free capacity to its total: any placement puts on each host nodes that
fit next to that host's peak. So a set the bound turns down is one the placement would turn down too, and
skipping it changes no answer. (For alike nodes on a packing policy the count is also what the placement
achieves, so then the first set the bound lets through is the one that fits.)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from math import floor

import numpy as np

from orchestrator.model.reservations import Reservation
from orchestrator.model.resources import Resources
from orchestrator.model.tolerance import EPSILON
from orchestrator.planning.slottable.table import SlotTable, time_key

#: the sums here are of floats, in another order than the table's walks: a host is allowed this much more
#: room than exact (a looser bound is still a necessary condition; a tighter one could rule out a fit)
_SLACK = 1e-6


class PreemptionBound:
    """The peak usage of each allowed host over [start, end), less the reservations excluded so far, and
    what it leaves: per host, how many of the lease's nodes fit there throughout (`room`), added up.
    Only the resources the lease asks for are followed (another one cannot stop it fitting but on an
    overcommitted host, and leaving that out only loosens the bound). Worked out for every host at once
    (numpy), then host by host in plain Python as reservations are excluded or restored (a victim holds a
    few hosts: arrays that small cost more than they save)."""

    def __init__(self, table: SlotTable, hosts: Sequence[str], start: datetime, end: datetime,
                 nodes: tuple[Resources, ...], *, spread: bool = False, exclusive: bool = False):
        self.table = table
        self.hosts = hosts
        self.k1, self.k2 = k1, k2 = time_key(start), time_key(end)
        self.index = {host: i for i, host in enumerate(hosts)}
        self.numnodes = len(nodes)
        self.spread, self.exclusive = spread, exclusive
        smallest = np.array([min(n[f] for n in nodes) for f in range(5)], dtype=float)
        total = np.sum(np.array(nodes, dtype=float).reshape(len(nodes), 5), axis=0)
        #: the resources followed: those the lease asks for (an exclusive lease: every one, as its hosts
        #: must be empty)
        fields = list(range(5)) if exclusive else [f for f in range(5) if total[f] > 0]
        self.fields = fields
        rows = np.array([table.row(h) for h in hosts], dtype=np.int64)
        _, used, cap, _, _ = table.state_arrays(start)
        capacity = np.array(cap[rows][:, fields], dtype=float).reshape(len(hosts), len(fields))
        peak = np.array(used[rows][:, fields], dtype=float).reshape(len(hosts), len(fields))
        #: the hosts whose usage changes inside the interval (by index); their steps are read when needed
        changing = (table.unchanged_until(start)[rows] < k2).nonzero()[0].tolist() if hosts else []
        self.changing = set(changing)
        if changing:
            peaks = [table.timeline(hosts[i]).peak_key(k1, k2) for i in changing]
            peak[changing] = np.array(peaks, dtype=float)[:, fields]
        self.steps: dict[int, tuple[list[int], list[list[float]]]] = {}
        slack = EPSILON + _SLACK * np.maximum(1.0, capacity)
        limit = capacity + slack
        self.smallest = smallest[fields].tolist()
        self.total = total[fields].tolist()
        #: per host, capacity plus slack (`limit`), the peak and the most an exclusive node's host may use
        #: (what the exclusions have changed so far is in `touched`, as lists)
        self.limit, self.peak, self.empty = limit, peak, slack
        self.touched: dict[int, tuple[list[float], list[float], list[float]]] = {}
        self.room = self._rooms(peak, limit, slack)
        self.room_total = int(self.room.sum())
        self.free_total: list[float] = (limit - peak).sum(axis=0).tolist()

    def exclude(self, reservations: Iterable[Reservation]) -> None:
        """Count these reservations as gone."""
        self._change(reservations, -1.0)

    def restore(self, reservations: Iterable[Reservation]) -> None:
        """Count these (excluded) reservations as there again."""
        self._change(reservations, 1.0)

    def could_hold(self) -> bool:
        """Whether the lease could fit, as far as the peaks tell (False: no placement can)."""
        if self.room_total < self.numnodes:
            return False
        return self.exclusive or all(free >= need for free, need in zip(self.free_total, self.total))

    def _change(self, reservations: Iterable[Reservation], sign: float) -> None:
        k1, k2, index, table, changing = self.k1, self.k2, self.index, self.table, self.changing
        fields = self.fields
        changed: dict[int, list[float]] = {}   # index -> its peak before
        for r in reservations:
            rks, rke = time_key(r.start), time_key(r.end)
            if rke <= k1 or rks >= k2 or rke <= rks or r not in table:
                continue
            for host, amount in r.resources.items():
                i = index.get(host)
                if i is None:
                    continue
                host_state = self._touched(i)
                if i not in changed:
                    changed[i] = host_state[0]
                delta = [sign * amount[f] for f in fields]
                if i not in changing:   # (no change inside: it holds at the start, if anywhere inside)
                    if rks <= k1:
                        self.touched[i] = ([p + d for p, d in zip(host_state[0], delta)], *host_state[1:])
                    continue
                keys, usages = self._steps(i)
                for m, k in enumerate(keys):
                    if rks <= k < rke:
                        usages[m] = [u + d for u, d in zip(usages[m], delta)]
                self.touched[i] = ([max(column) for column in zip(*usages)], *host_state[1:])
        free_total, room_of = self.free_total, self.room
        for i, before in changed.items():
            free_total = [f - (p - b) for f, p, b in zip(free_total, self.touched[i][0], before)]
            room = self._room(i)
            self.room_total += room - int(room_of[i])
            room_of[i] = room
        self.free_total = free_total

    def _touched(self, i: int) -> tuple[list[float], list[float], list[float]]:
        """Host i's (peak, limit, most an exclusive node's host may use), as lists: the host's peak is
        changed there from now on."""
        state = self.touched.get(i)
        if state is None:
            state = self.touched[i] = (self.peak[i].tolist(), self.limit[i].tolist(), self.empty[i].tolist())
        return state

    def _steps(self, i: int) -> tuple[list[int], list[list[float]]]:
        """The host's step function over the interval (the followed resources), which the exclusions are
        applied to."""
        step = self.steps.get(i)
        if step is None:
            keys, usages = self.table.timeline(self.hosts[i]).steps_key(self.k1, self.k2)
            fields = self.fields
            step = self.steps[i] = (keys, [[float(usage[f]) for f in fields] for usage in usages])
        return step

    def _rooms(self, peak: np.ndarray, limit: np.ndarray, empty: np.ndarray) -> np.ndarray:
        """`_room` of every host at once."""
        if self.exclusive:
            fits_empty = (np.array(self.smallest) <= limit).all(axis=1)
            return ((peak <= empty).all(axis=1) & fits_empty).astype(int)
        smallest = np.array(self.smallest)
        wanted = smallest > 0
        if not wanted.any():
            return np.full(len(peak), self.numnodes, dtype=int)
        room = np.floor((limit[:, wanted] - peak[:, wanted]) / smallest[wanted]).min(axis=1)
        return np.clip(room, 0, 1 if self.spread else self.numnodes).astype(int)

    def _room(self, i: int) -> int:
        """How many of the lease's nodes could fit on host i throughout: of the smallest size (at most one
        for a spread lease), or for an exclusive lease one if the host is empty."""
        peak, limit, empty_at = self.touched[i]
        smallest = self.smallest
        if self.exclusive:
            empty = all(p <= e for p, e in zip(peak, empty_at))
            return int(empty and all(s <= c for s, c in zip(smallest, limit)))
        room = self.numnodes
        for p, c, s in zip(peak, limit, smallest):
            if s > 0:
                room = min(room, floor((c - p) / s))
        room = max(room, 0)
        return min(room, 1) if self.spread else room
