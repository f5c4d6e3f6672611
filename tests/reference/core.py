"""The slot table's core written plainly: what `orchestrator/planning/slottable/core.pyx` computes, with the
same interface, for the tests to hold the compiled core against (`SlotTable(core=...)`, see `CORES`).

Deliberately naive: a host's breakpoints are one Python list searched from the front, every usage change
is looked up afresh in the table's shared vectors (`SharedUsage.step`, no memo carried across hosts), and
the loops over many hosts are plain loops over the per-host methods. The usage codes come from the same
steps in the same order as the compiled core takes them, so both give the same shared vectors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

import numpy as np

from orchestrator.model.resources import NOTHING, Resources, fits, scale, sub
from orchestrator.model.tolerance import EPSILON
from orchestrator.planning.slottable.excluding import Excluded, excluded_amount
from orchestrator.planning.slottable.keys import AFTER_ALL, AT_START, BEFORE_ALL, NOTHING_CODE, time_key
from orchestrator.planning.slottable.shared_usage import SharedUsage


class _Point:
    """One breakpoint: its key and time, the usage code and the reservations in force from there on, and
    how many reservations start or end there."""

    __slots__ = ("key", "time", "code", "count", "refs")

    def __init__(self, key: int, time: datetime, code: int, count: int) -> None:
        self.key, self.time, self.code, self.count, self.refs = key, time, code, count, 0


class HostTimeline:
    """One host's usage over time as a step function: its breakpoints in key order."""

    def __init__(self, name: str, capacity: Resources, shared: SharedUsage | None = None) -> None:
        self.name = name
        self.capacity = capacity
        self._shared = shared if shared is not None else SharedUsage()
        self._shared.timelines.append(self)
        self._points: list[_Point] = []
        self.row = -1   # (its row among the table's hosts, set by the table)

    def detach(self) -> None:
        self._shared.timelines.remove(self)

    # -- changes ------------------------------------------------------------------------------------------
    def _at_or_before(self, k: int) -> _Point | None:
        """The last breakpoint at or before key k."""
        found = None
        for point in self._points:
            if point.key > k:
                break
            found = point
        return found

    def _point(self, k: int, t: datetime) -> _Point:
        """The breakpoint at key k, made (with the usage in force there) if there is none."""
        i = 0
        while i < len(self._points) and self._points[i].key < k:
            i += 1
        if i < len(self._points) and self._points[i].key == k:
            return self._points[i]
        before = self._points[i - 1] if i else None
        point = _Point(k, t, before.code if before else NOTHING_CODE, before.count if before else 0)
        self._points.insert(i, point)
        return point

    def _change(self, ks: int, ke: int, amount: Resources, adding: bool) -> None:
        for point in self._points:
            if ks <= point.key < ke:
                point.code = self._shared.step(point.code, amount, adding)[1]
                point.count += 1 if adding else -1

    def add(self, start: datetime, end: datetime, amount: Resources) -> None:
        self.add_keys(time_key(start), time_key(end), amount, start, end)

    def add_keys(self, ks: int, ke: int, amount: Resources, start: datetime, end: datetime) -> None:
        self._point(ke, end).refs += 1
        self._point(ks, start).refs += 1
        self._change(ks, ke, amount, True)

    def remove(self, start: datetime, end: datetime, amount: Resources) -> None:
        self.remove_keys(time_key(start), time_key(end), amount)

    def remove_keys(self, ks: int, ke: int, amount: Resources) -> None:
        keys = [point.key for point in self._points]
        if ks not in keys or ke not in keys:
            raise ValueError(f"no reservation from key {ks} to {ke} on {self.name}")
        self._change(ks, ke, amount, False)
        for k in (ke, ks):
            point = self._points[keys.index(k)]
            point.refs -= 1
        self._points = [point for point in self._points if point.refs]

    def collect_codes(self, into: set[int]) -> None:
        into.update(point.code for point in self._points)

    # -- queries (by key) ---------------------------------------------------------------------------------
    def usage_key(self, k: int) -> Resources:
        point = self._at_or_before(k)
        return self._shared.vectors[point.code] if point else NOTHING

    def state_key(self, k: int) -> tuple[Resources, int]:
        point = self._at_or_before(k)
        return (self._shared.vectors[point.code], point.count) if point else (NOTHING, 0)

    def _window(self, k: int) -> tuple[int, int, int, int]:
        """(usage code, count) at key k and the keys of the breakpoints around it."""
        point = self._at_or_before(k)
        following = next((p.key for p in self._points if p.key > k), AFTER_ALL)
        if point is None:
            return NOTHING_CODE, 0, BEFORE_ALL, following
        return point.code, point.count, point.key, following

    def window_key(self, k: int) -> tuple[Resources, int, int, int]:
        code, count, since, until = self._window(k)
        return self._shared.vectors[code], count, since, until

    def scan(self, k1: int, k2: int | None, request: Resources,
             relevant: list[Excluded] | None = None) -> datetime | object | None:
        """None if `request` fits over [k1, k2) (k2 None: for ever), `AT_START` if not even at k1, else
        the time of the first breakpoint where it does not."""
        used = self.usage_key(k1)
        if relevant:
            used = sub(used, excluded_amount(relevant, k1))
        if not fits(used, request, self.capacity):
            return AT_START
        for point in self._points:
            if point.key <= k1:
                continue
            if k2 is not None and point.key >= k2:
                return None
            used = self._shared.vectors[point.code]
            if relevant:
                used = sub(used, excluded_amount(relevant, point.key))
            if not fits(used, request, self.capacity):
                return point.time
        return None

    def _inside(self, k1: int, k2: int | None) -> list[_Point]:
        return [p for p in self._points if p.key > k1 and (k2 is None or p.key < k2)]

    def breakpoint_list(self, k1: int, k2: int | None) -> list[datetime]:
        return [p.time for p in self._inside(k1, k2)]

    def collect(self, k1: int, k2: int | None, into: dict[int, datetime]) -> None:
        into.update((p.key, p.time) for p in self._inside(k1, k2))

    def steps_key(self, k1: int, k2: int | None) -> tuple[list[int], list[Resources]]:
        inside = self._inside(k1, k2)
        return [k1, *(p.key for p in inside)], [self.usage_key(k1), *(self._shared.vectors[p.code] for p in inside)]

    def peak_key(self, k1: int, k2: int | None) -> tuple[float, float, float, float, float]:
        usages = self.steps_key(k1, k2)[1]
        return tuple(float(max(u[f] for u in usages)) for f in range(5))  # type: ignore[return-value]

    # -- queries (by datetime) ----------------------------------------------------------------------------
    def window(self, t: datetime) -> tuple[Resources, int, datetime | None, datetime | None]:
        k = time_key(t)
        point = self._at_or_before(k)
        following = next((p.time for p in self._points if p.key > k), None)
        if point is None:
            return NOTHING, 0, None, following
        return self._shared.vectors[point.code], point.count, point.time, following

    def usage_at(self, t: datetime) -> Resources:
        return self.usage_key(time_key(t))

    def state_at(self, t: datetime) -> tuple[Resources, int]:
        return self.state_key(time_key(t))

    def count_at(self, t: datetime) -> int:
        return self.state_key(time_key(t))[1]

    def last_breakpoint(self) -> datetime | None:
        return self._points[-1].time if self._points else None

    def segments(self, t1: datetime, t2: datetime | None) -> Iterator[tuple[datetime, Resources]]:
        k1 = time_key(t1)
        inside = self._inside(k1, None if t2 is None else time_key(t2))
        return iter([(t1, self.usage_key(k1)), *((p.time, self._shared.vectors[p.code]) for p in inside)])

    def breakpoints(self, t1: datetime, t2: datetime | None = None) -> Iterator[datetime]:
        return iter(self.breakpoint_list(time_key(t1), None if t2 is None else time_key(t2)))

    def items(self) -> Iterator[tuple[datetime, Resources]]:
        return iter([(p.time, self._shared.vectors[p.code]) for p in self._points])

    def __len__(self) -> int:
        return len(self._points)


def add_on_hosts(timelines: dict[str, HostTimeline], held: dict[str, Resources], ks: int, ke: int,
                 start: datetime, end: datetime) -> list[int]:
    for timeline, amount in [(timelines[host], amount) for host, amount in held.items()]:
        timeline.add_keys(ks, ke, amount, start, end)
    return [timelines[host].row for host in held]


def remove_on_hosts(timelines: dict[str, HostTimeline], held: dict[str, Resources], ks: int, ke: int) -> list[int]:
    for timeline, amount in [(timelines[host], amount) for host, amount in held.items()]:
        timeline.remove_keys(ks, ke, amount)
    return [timelines[host].row for host in held]


def mark_rows(rows: list[int], marked: bytearray, into: list[int]) -> None:
    for i in rows:
        if not marked[i]:
            marked[i] = 1
            into.append(i)


def unmark_rows(rows: list[int], marked: bytearray) -> None:
    for i in rows:
        marked[i] = 0


def narrow_windows(rows: list[int], bound: np.ndarray, k: int, later: bool) -> None:
    for i in rows:
        if later:
            bound[i] = min(bound[i], k)
        else:
            bound[i] = max(bound[i], k)


def refresh_rows(timelines: list[HostTimeline], rows: list[int], k: int, vectors: dict[int, Resources],
                 used: list[Resources], code: list[int], count: list[int], ids: list[int], by_code: dict[int, int],
                 new_code: Callable[[int, Resources], int], capacities: list[Resources], cpu_free: list[bool],
                 since: np.ndarray, until: np.ndarray) -> tuple[int, int, int]:
    """Each of `rows` read afresh at key k into the host states' lists and windows; returns (the change in
    the number of rows with free CPU, the latest `since`, the earliest `until`)."""
    freed = 0
    most, least = BEFORE_ALL, AFTER_ALL
    for i in rows:
        c, n, lo, hi = timelines[i]._window(k)
        v = used[i] = vectors[c]
        code[i], count[i] = c, n
        ids[i] = by_code[c] if c in by_code else new_code(c, v)
        free = capacities[i][0] - v[0] > EPSILON
        if free != cpu_free[i]:
            freed += 1 if free else -1
            cpu_free[i] = free
        since[i], until[i] = lo, hi
        most, least = max(most, lo), min(least, hi)
    return freed, most, least


def alike_walk(packing: Any, ranked: list[int], hosts: Any, potential: int, held: list[str]) -> Any:
    """The mapper's walk of alike nodes (`mapper._AlikePacking`): host by host along the ranking, each
    taking as many nodes as fit in each packing still being built (the one that holds to the end, and the
    one that may end early); the strict one is given up when the hosts left cannot make up the difference."""
    ask, node = packing.ask, packing.node
    n, start, end = len(ask.vnodes), ask.start, ask.end
    floor = start if ask.floor is None else ask.floor   # each host holds its nodes at least until then
    strict = ask.strict_end or ask.strict_first
    loose = not ask.strict_end
    early, early_end = list(held), (end if held else None)
    fit_end = None
    for row in ranked:
        host = hosts.names[row]
        k = int(hosts.room[row])
        steady = packing.steady is not None and packing.steady[row] >= packing.end_key
        potential -= k
        early_take = None   # (not tried on this host)
        if loose and len(early) < n:
            take = min(k, n - len(early))
            fit_end = end if steady else packing._latest_fit(host, scale(node, take))
            while (fit_end is None or fit_end <= start or fit_end < floor) and take > 1:
                take -= 1
                fit_end = packing._latest_fit(host, scale(node, take))
            if fit_end is None or fit_end <= start or fit_end < floor:
                take = 0
            early_take = take
            if take:
                early += [host] * take
                early_end = fit_end if early_end is None else min(early_end, fit_end)
        if strict:
            take = min(k, n - len(held))
            if not steady:
                if early_take == 0:
                    take = 0
                elif early_take == take and fit_end is not None:
                    if fit_end < end:
                        take = 0 if take == 1 else packing._most_that_fit(host, take - 1)
                else:
                    take = packing._most_that_fit(host, take)
            held += [host] * take
            if len(held) == n:
                return packing._mapping(held, end)
            if len(held) + potential < n:
                if not loose:
                    return None
                strict = False
        if loose and len(early) == n and not strict:
            break
    if loose and len(early) == n and early_end is not None:
        return packing._mapping(early, early_end)
    return None


def rows_alike(rows: list[int], ids: list[int], counts: list[int], groups: list[int]) -> bool:
    return len({(ids[i], counts[i], groups[i]) for i in rows}) == 1


def recount_rows(rows: Iterable[int], code: list[int], groups: list[int], known: list[dict[int, int]],
                 per_row: list[int], array: np.ndarray, learn: Callable[[int, int, Resources, Resources], int],
                 used: list[Resources], capacities: list[Resources]) -> int:
    """Each of `rows` (a row may come more than once) counted afresh (from the memo of its capacity group, else
    `learn`); the change in their sum."""
    rows = set(rows)
    before = sum(per_row[i] for i in rows)
    for i in rows:
        fit = known[groups[i]][code[i]] if code[i] in known[groups[i]] else learn(groups[i], code[i], used[i],
                                                                                  capacities[i])
        per_row[i] = fit
        array[i] = fit
    return sum(per_row[i] for i in rows) - before


def room_later(timelines: list[HostTimeline], until: np.ndarray, k: int, rows: list[int] | None, most: int,
               per_row: list[int], groups: list[int], known: list[dict[int, int]],
               learn: Callable[[int, int, Resources, Resources], int], vectors: dict[int, Resources],
               capacities: list[Resources]) -> int | None:
    """The change by key k of the rows' counts (rows whose window ends by k read again); None past `most`."""
    changed = [i for i in (range(len(until)) if rows is None else rows) if until[i] <= k]
    if 0 <= most < len(changed):
        return None
    change = 0
    for i in changed:
        code = timelines[i]._window(k)[0]
        fit = known[groups[i]][code] if code in known[groups[i]] else learn(groups[i], code, vectors[code],
                                                                            capacities[i])
        change += fit - per_row[i]
    return change


def steady_head(ranked: list[int], names: list[str], per_row: list[int], steady: np.ndarray, end_key: int, n: int,
                held: list[str]) -> int:
    """The hosts at the head of the ranking steady until `end_key` each take all they have room for (to n)."""
    taken = got = 0
    for row in ranked:
        if steady[row] < end_key:
            break
        take = min(per_row[row], n - got)
        held += [names[row]] * take
        got += take
        taken += 1
        if got == n:
            break
    return taken
