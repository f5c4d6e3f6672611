"""Free slots: the earliest time a lease fits as an advance reservation, and the windows in which it would.

A start is *feasible* when the placement an advance reservation gets (`place`: the mapper's, preempting
what the preemption policy lets the lease preempt) holds the whole lease for its whole duration. Only the
slot table's changepoints (and the first time asked about) need trying: between two changepoints the hosts
hold the same reservations, so a start later in such a stretch sees at its start what an earlier one sees,
and over the rest of its run nothing an earlier start does not also see or has passed; whatever fits at the
later start fits at the earlier one. The answer is the first feasible one of these, in time order: what
trying the placement at every changepoint would answer.

Trying the placement at every changepoint of a big plan would take long, so a cheap necessary condition
rules most of them out first (`_Profile`): the hosts' usage by the reservations that cannot give way (the
leases the policy does not let this one preempt, drained and lost hosts' holds), summed into how many of the
lease's nodes the site could take at each changepoint (for nodes of several sizes, the smallest node's count
and the free capacity per resource). A start is tried only if that count suffices at every changepoint of
its run; the placement decides the rest, so a constraint the mapper applies (fewer hosts allowed, one node
per host) can only turn more candidates down, never make the condition wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

from orchestrator.model.lease import Lease
from orchestrator.model.resources import Resources
from orchestrator.model.tolerance import EPSILON
from orchestrator.planning.mapper import Mapping
from orchestrator.planning.slottable.keys import AFTER_ALL, KEY_ORIGIN, KEY_UNIT
from orchestrator.planning.slottable.table import SlotTable, time_key

#: (lease, start, end) -> the placement an advance reservation gets over [start, end), or None
Place = Callable[[Lease, datetime, datetime], "Mapping | None"]
#: the lease being placed -> (a lease id -> whether that lease's reservations may give way to it)
Yields = Callable[[Lease], Callable[[int], bool]]

#: the profile's sums are of floats: a count is allowed this much more than exact (a looser condition is
#: still a necessary one; a tighter one could rule out a start the placement takes)
_SLACK = 1e-6


@dataclass(frozen=True)
class Window:
    """A time the lease would fit: from `start`, on `hosts`, for as long as until `latest_end` (None: nothing
    planned ends it). It may start at any time up to `latest_end` minus its duration."""

    start: datetime
    latest_end: datetime | None
    hosts: list[str]
    mapping: Mapping


class FreeSlots:
    def __init__(self, table: SlotTable, place: Place, yields: Yields):
        self.table = table
        self.place = place
        self.yields = yields

    def earliest(self, lease: Lease, not_before: datetime, not_after: datetime | None,
                 duration: timedelta) -> tuple[datetime, Mapping] | None:
        """The earliest feasible start at or after `not_before` for a run of `duration` ending by
        `not_after` (None: no limit), and its placement; None when there is none."""
        if not_after is not None and not_before + duration > not_after:
            return None
        # (the first time first: it is often the answer, and then no profile is needed)
        mapping = self.place(lease, not_before, not_before + duration)
        if mapping is not None:
            return not_before, mapping
        profile = self._profile(lease, not_before, not_after, duration)
        feasible = self._feasible(lease, profile, duration, lambda t: t > not_before) if profile is not None else ()
        return next(iter(feasible), None)

    def windows(self, lease: Lease, not_before: datetime, not_after: datetime | None, duration: timedelta,
                count: int) -> list[Window]:
        """The next `count` windows (or fewer) in which the lease fits: each starts at the earliest feasible
        start after the latest start of the one before."""
        out: list[Window] = []
        profile = self._profile(lease, not_before, not_after, duration)
        if profile is None:
            return out
        skip_until: datetime | None = None
        for start, mapping in self._feasible(lease, profile, duration, lambda t: skip_until is None or t > skip_until):
            latest = profile.latest_end(mapping.per_host(lease), start)
            if not_after is not None and (latest is None or latest > not_after):
                latest = not_after
            out.append(Window(start, latest, sorted(set(mapping.nodes.values())), mapping))
            if len(out) == count or latest is None:
                break
            skip_until = latest - duration
        return out

    # -- the search ---------------------------------------------------------------------------------------
    def _profile(self, lease: Lease, not_before: datetime, not_after: datetime | None,
                 duration: timedelta) -> _Profile | None:
        """The profile of the usage that stays, from `not_before` on (None: no start ends by `not_after`)."""
        last_start = None if not_after is None else not_after - duration
        if last_start is not None and last_start < not_before:
            return None
        return _Profile(self.table, lease, not_before, last_start, duration, self.yields(lease))

    def _feasible(self, lease: Lease, profile: _Profile, duration: timedelta,
                  wanted: Callable[[datetime], bool] = lambda t: True) -> Iterator[tuple[datetime, Mapping]]:
        """Every feasible start (with its placement) in time order, among the first time and the
        changepoints the profile does not rule out (and `wanted` asks about)."""
        for start in profile.candidates():
            if not wanted(start):
                continue
            mapping = self.place(lease, start, start + duration)
            if mapping is not None:
                yield start, mapping


class _Profile:
    """The usage that cannot give way to the lease, from the first time asked about on, as steps per host
    (numpy arrays sorted by host row, then time key), and what the lease's nodes need of it."""

    def __init__(self, table: SlotTable, lease: Lease, first: datetime, last_start: datetime | None,
                 duration: timedelta, gives_way: Callable[[int], bool]):
        self.table = table
        self.first, self.k0 = first, time_key(first)
        self.last_start = last_start
        self.span = time_key(first + duration) - self.k0
        horizon = None if last_start is None else last_start + duration
        self._read(table, horizon, gives_way)
        self._need(lease)

    def _read(self, table: SlotTable, horizon: datetime | None, gives_way: Callable[[int], bool]) -> None:
        """The steps of the usage that stays, and every changepoint after the first time (by key)."""
        k0 = self.k0
        k_end = None if horizon is None else time_key(horizon)
        rows: list[int] = []
        starts: list[int] = []
        ends: list[int] = []
        amounts: list[Resources] = []
        row_of = {host: table.row(host) for host in table.hosts}
        verdict: dict[int, bool] = {}
        for rr in table.reservations_ending_after(self.first):
            stays = verdict.get(rr.lease_id)
            if stays is None:
                stays = verdict[rr.lease_id] = not gives_way(rr.lease_id)
            held = rr.resources
            if not stays or not held:
                continue
            ks, ke = time_key(rr.start), time_key(rr.end)
            if ke <= ks or (k_end is not None and ks >= k_end):
                continue
            rows.extend(map(row_of.__getitem__, held))
            amounts.extend(held.values())
            starts.extend([ks if ks > k0 else k0] * len(held))
            ends.extend([ke] * len(held))
        # every changepoint after the first time and before the horizon (the timelines', compiled)
        self.times: dict[int, datetime] = {}
        for timeline in table.timelines.values():
            timeline.collect(k0, k_end, self.times)
        names, _, capacity, _, _ = table.state_arrays(self.first)
        self.names, self.capacity = names, np.asarray(capacity, dtype=float)
        n = len(rows)
        row = np.array(rows + rows, dtype=np.int64)
        key = np.array(starts + ends, dtype=np.int64)
        amount = np.array(amounts, dtype=float).reshape(n, 5)
        change = np.concatenate([amount, -amount]) if n else np.zeros((0, 5))
        order = np.lexsort((key, row))
        self.row, self.key = row[order], key[order]
        # each host's usage from each of its steps on: a running sum restarted per host
        running = np.cumsum(change[order], axis=0)
        first_of_row = np.ones(len(order), dtype=bool)
        first_of_row[1:] = self.row[1:] != self.row[:-1]
        group = np.cumsum(first_of_row) - 1
        base = np.concatenate([np.zeros((1, 5)), running[:-1]])[first_of_row] if len(order) else np.zeros((0, 5))
        self.used = running - base[group]
        # (several steps of a host at one key: the last one says what holds from there)
        self.last = np.ones(len(order), dtype=bool)
        self.last[:-1] = (self.row[1:] != self.row[:-1]) | (self.key[1:] != self.key[:-1])

    def _need(self, lease: Lease) -> None:
        """How many nodes the site could take at each step (of the smallest node size) and whether the
        free capacity covers the lease's total: `bad_from`/`bad_until`, the stretches where it could not."""
        nodes = lease.request.nodes
        smallest = np.array([min(n[i] for n in nodes) for i in range(5)], dtype=float)
        total = np.array(lease.request.total, dtype=float)
        cap = self.capacity
        empty_room = self._room(np.zeros_like(cap), cap, smallest)
        last = self.last
        row, key, used = self.row[last], self.key[last], self.used[last]
        room = self._room(used, cap[row], smallest)
        # the room before each step: the host's step before it, or the empty host's
        before = np.empty_like(room)
        if len(row):
            before[0] = empty_room[row[0]]
            same = row[1:] == row[:-1]
            before[1:] = np.where(same, room[:-1], empty_room[row[1:]])
        used_before = np.zeros_like(used)
        if len(row):
            used_before[1:] = np.where(same[:, None], used[:-1], 0.0)
        order = np.argsort(key, kind="stable")
        key = key[order]
        count = empty_room.sum() + np.cumsum((room - before)[order])
        free = cap.sum(axis=0) - np.cumsum((used - used_before)[order], axis=0)
        at = np.ones(len(key), dtype=bool)   # the last change at each key
        at[:-1] = key[1:] != key[:-1]
        keys, count, free = key[at], count[at], free[at]
        k0 = self.k0
        if not len(keys) or keys[0] > k0:   # (nothing in force at the first time: the empty site's)
            keys = np.concatenate([[k0], keys])
            count = np.concatenate([[empty_room.sum()], count])
            free = np.concatenate([cap.sum(axis=0)[None, :], free])
        slack = _SLACK * np.maximum(1.0, np.abs(total))
        short = (count + _SLACK < lease.numnodes) | np.any(free + slack < total, axis=1)
        until = np.concatenate([keys[1:], [AFTER_ALL]])
        self.bad_from, self.bad_until = keys[short], until[short]

    @staticmethod
    def _room(used: np.ndarray, cap: np.ndarray, node: np.ndarray) -> np.ndarray:
        """Per row, how many nodes of this size fit next to `used` (as `hoststates.room_of`, a little looser)."""
        wanted = node > 0
        if not wanted.any():
            return np.full(len(used), float(1 << 40))
        spare = cap[:, wanted] - used[:, wanted] + EPSILON + _SLACK * np.maximum(1.0, cap[:, wanted])
        return np.maximum(np.floor(spare / node[wanted]).min(axis=1), 0)

    def candidates(self) -> Iterator[datetime]:
        """The first time and the changepoints up to the last start, in order, less those whose run meets a
        stretch where the usage that stays leaves too little room."""
        k0, last = self.k0, AFTER_ALL if self.last_start is None else time_key(self.last_start)
        keys = np.array(sorted(k for k in self.times if k0 < k <= last), dtype=np.int64)
        keys = np.concatenate([[k0], keys])
        hit = np.searchsorted(self.bad_until, keys, side="right")   # the first stretch ending after each
        inside = hit < len(self.bad_from)
        clear = ~inside
        clear[inside] = self.bad_from[hit[inside]] >= keys[inside] + self.span
        for k in keys[clear].tolist():
            yield self.first if k == k0 else self.times[k]

    def latest_end(self, held: dict[str, Resources], start: datetime) -> datetime | None:
        """Until when these amounts fit on their hosts from `start` on, next to the usage that stays (None:
        for ever)."""
        k = time_key(start)
        ends: list[int] = []
        for host, amount in held.items():
            row = self.table.row(host)
            lo, hi = np.searchsorted(self.row, [row, row + 1])
            mine = slice(lo, hi)
            keys, used, last = self.key[mine], self.used[mine], self.last[mine]
            later = last & (keys > k)
            over = np.any(used[later] + np.array(amount) > self.capacity[row] + EPSILON, axis=1)
            if over.any():
                ends.append(int(keys[later][over][0]))
        if not ends:
            return None
        return KEY_ORIGIN + min(ends) * KEY_UNIT
