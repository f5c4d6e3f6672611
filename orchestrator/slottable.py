"""The slot table: per host, capacity and the reservations over time, answering the scheduler's queries.

Structure, and why: each host keeps its usage as a *step function* — a sorted list of breakpoints
(`sortedcontainers.SortedList`, a B+-tree-like list of lists with O(log n) insert, remove and bisect) and,
per breakpoint, the usage in force until the next one. A breakpoint exists while at least one reservation
starts or ends there (reference counted), so the table never holds more than 2 breakpoints per reservation.

- point query (usage at t): one bisect, O(log n);
- add / remove a reservation: two O(log n) breakpoint updates plus one O(1) vector update per breakpoint
  *inside* the interval; that count is bounded by the reservations overlapping it, which a host's capacity
  keeps small, so the cost stays O(log n) as the table grows (benchmarks/slottable.py shows it);
- interval queries (fits, latest fit) walk only the breakpoints inside the interval.

Nothing is rebuilt from scratch per query (the reference rebuilt an availability window over
reservations x changepoints x nodes on every call). Numpy arrays were the alternative: fast scans but
O(n) inserts; the scheduler inserts as often as it queries, so the sorted structure wins.

Every query takes `excluding`: reservations to treat as gone, which answers "what if these leases were
preempted" without touching the table.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Collection, Iterable, Iterator, Mapping
from datetime import datetime

from sortedcontainers import SortedKeyList, SortedList

from .errors import InconsistentSchedule, InvalidRequest
from .hoststates import HostStates
from .reservations import Reservation
from .resources import NOTHING, Resources, add, fits, sub
from .timeutil import UTC

#: what `latest_fit` answers for a request that fits for ever
FOREVER = datetime.max.replace(tzinfo=UTC)


class HostTimeline:
    """Usage of one host as a step function over time."""

    __slots__ = ("name", "capacity", "_times", "_usage", "_count", "_refs")

    def __init__(self, name: str, capacity: Resources):
        self.name = name
        self.capacity = capacity
        self._times: SortedList = SortedList()
        self._usage: dict[datetime, Resources] = {}   # usage in [breakpoint, next breakpoint)
        self._count: dict[datetime, int] = {}         # reservations in force in that segment
        self._refs: dict[datetime, int] = {}          # reservations starting or ending there

    # -- structure ------------------------------------------------------------------------------------
    def _split(self, t: datetime) -> None:
        refs = self._refs
        if t in refs:
            refs[t] += 1
            return
        times = self._times
        i = times.bisect_right(t)
        if i:
            prev = times[i - 1]
            self._usage[t] = self._usage[prev]
            self._count[t] = self._count[prev]
        else:
            self._usage[t] = NOTHING
            self._count[t] = 0
        times.add(t)
        refs[t] = 1

    def _unsplit(self, t: datetime) -> None:
        n = self._refs[t] - 1
        if n:
            self._refs[t] = n
            return
        del self._refs[t]
        self._times.remove(t)
        del self._usage[t]
        del self._count[t]

    def add(self, start: datetime, end: datetime, amount: Resources) -> None:
        self._split(start)
        self._split(end)
        usage, count = self._usage, self._count
        for t in self._times.irange(start, end, inclusive=(True, False)):
            usage[t] = add(usage[t], amount)
            count[t] += 1

    def remove(self, start: datetime, end: datetime, amount: Resources) -> None:
        usage, count = self._usage, self._count
        for t in self._times.irange(start, end, inclusive=(True, False)):
            usage[t] = sub(usage[t], amount)
            count[t] -= 1
        self._unsplit(start)
        self._unsplit(end)

    # -- queries --------------------------------------------------------------------------------------
    def _floor(self, t: datetime) -> datetime | None:
        """The last breakpoint at or before t. This is the hottest call of a simulation, so it bisects
        SortedList's two levels (`_maxes`, `_lists`: documented, stable internals of sortedcontainers)
        directly instead of going through `bisect_right` + positional indexing, which costs 3x more."""
        times = self._times
        maxes = times._maxes
        if not maxes:
            return None
        pos = bisect_right(maxes, t)
        if pos == len(maxes):
            return maxes[-1]
        sub = times._lists[pos]
        i = bisect_right(sub, t)
        if i:
            return sub[i - 1]
        return maxes[pos - 1] if pos else None

    def window(self, t: datetime) -> tuple[Resources, int, datetime | None, datetime | None]:
        """(usage, reservation count) at t and the breakpoints around t between which they hold;
        one two-level bisect, as `_floor`."""
        times = self._times
        maxes = times._maxes
        if not maxes:
            return NOTHING, 0, None, None
        pos = bisect_right(maxes, t)
        if pos == len(maxes):
            bp = maxes[-1]
            return self._usage[bp], self._count[bp], bp, None
        sub = times._lists[pos]
        i = bisect_right(sub, t)
        following = sub[i]   # t < maxes[pos] == sub[-1], so i < len(sub)
        if i:
            bp = sub[i - 1]
        elif pos:
            bp = maxes[pos - 1]
        else:
            return NOTHING, 0, None, following
        return self._usage[bp], self._count[bp], bp, following

    def usage_at(self, t: datetime) -> Resources:
        bp = self._floor(t)
        return NOTHING if bp is None else self._usage[bp]

    def state_at(self, t: datetime) -> tuple[Resources, int]:
        """(usage, number of reservations) at t, with one bisect."""
        bp = self._floor(t)
        if bp is None:
            return NOTHING, 0
        return self._usage[bp], self._count[bp]

    def count_at(self, t: datetime) -> int:
        bp = self._floor(t)
        return 0 if bp is None else self._count[bp]

    def last_breakpoint(self) -> datetime | None:
        """After this time the host is empty."""
        return self._times[-1] if self._times else None

    def segments(self, t1: datetime, t2: datetime | None) -> Iterator[tuple[datetime, Resources]]:
        """(segment start, usage) for every segment meeting [t1, t2); the first starts at t1."""
        yield t1, self.usage_at(t1)
        usage = self._usage
        for t in self._times.irange(t1, t2, inclusive=(False, False)):
            yield t, usage[t]

    def breakpoints(self, t1: datetime, t2: datetime | None = None) -> Iterator[datetime]:
        return self._times.irange(t1, t2, inclusive=(False, False))

    def __len__(self) -> int:
        return len(self._times)


def _relevant(excluding: Collection[Reservation], host: str, t1: datetime, t2: datetime | None,
              present: dict[int, Reservation]) -> list[Reservation]:
    """The excluded reservations that matter on `host` in [t1, t2), each once; one that is not in the
    table (never added, or already removed) is gone already and must not be subtracted again."""
    out: dict[int, Reservation] = {}
    for r in excluding:
        if (host in r.resources and r.end > t1 and (t2 is None or r.start < t2)
                and present.get(r.id) is r):
            out[r.id] = r
    return list(out.values())


def _excluded_amount(relevant: list[Reservation], host: str, t: datetime) -> Resources:
    total = NOTHING
    for r in relevant:
        if r.start <= t < r.end:
            total = add(total, r.resources[host])
    return total


class SlotTable:
    """All hosts' timelines plus indexes over the reservations (by id, by lease, by end time)."""

    def __init__(self, hosts: Mapping[str, Resources] | Iterable[tuple[str, Resources]] = ()):
        self._hosts: dict[str, HostTimeline] = {}
        self._reservations: dict[int, Reservation] = {}
        self._by_lease: dict[int, dict[int, Reservation]] = {}
        self._by_end: SortedKeyList = SortedKeyList(key=lambda r: (r.end, r.id))
        self._next_id = 1
        self._largest: Resources | None = None
        #: every host's usage at the mapper's query times, kept valid incrementally; two snapshots so
        #: queries "now" and queries at a future AR's start do not keep invalidating each other
        self._snapshots = (HostStates(), HostStates())
        #: the time most queries are about (set by the scheduler as time goes on)
        self.present: datetime | None = None
        items = hosts.items() if isinstance(hosts, Mapping) else hosts
        for name, capacity in items:
            self.add_host(name, capacity)

    # -- hosts -----------------------------------------------------------------------------------------
    def add_host(self, name: str, capacity: Resources) -> None:
        if name in self._hosts:
            raise InvalidRequest("host", f"{name!r} is already in the slot table")
        capacity.validate(f"host {name}")
        self._hosts[name] = HostTimeline(name, capacity)
        self._largest = None
        for snapshot in self._snapshots:
            snapshot.add_host(self._hosts[name])

    def remove_host(self, name: str) -> None:
        timeline = self._timeline(name)
        if len(timeline):
            raise InvalidRequest("host", f"{name!r} still has reservations")
        del self._hosts[name]
        self._largest = None
        for snapshot in self._snapshots:
            snapshot.remove_host(name)

    @property
    def hosts(self) -> list[str]:
        return list(self._hosts)

    def capacity(self, host: str) -> Resources:
        return self._timeline(host).capacity

    def timeline(self, host: str) -> HostTimeline:
        return self._timeline(host)

    def _timeline(self, host: str) -> HostTimeline:
        try:
            return self._hosts[host]
        except KeyError:
            raise InvalidRequest("host", f"unknown host {host!r}") from None

    def largest_capacity(self) -> Resources:
        """Per resource, the largest single-host capacity: a node asking more can never be placed."""
        if self._largest is None:
            caps = [t.capacity for t in self._hosts.values()]
            self._largest = Resources(*(max(c[i] for c in caps) for i in range(5))) if caps else NOTHING
        return self._largest

    # -- reservations ------------------------------------------------------------------------------------
    def skip_ids(self, upto: int) -> None:
        """Hand out reservation ids above `upto` from now on (ids already used by a stored plan)."""
        self._next_id = max(self._next_id, upto + 1)

    def add(self, rr: Reservation) -> Reservation:
        """Put a reservation in the table (assigning an id if it has none); refuses an inverted interval."""
        if rr.end < rr.start:
            raise InvalidRequest("end", f"reservation ends ({rr.end}) before it starts ({rr.start})")
        if rr.id and rr.id in self._reservations:
            raise InconsistentSchedule(f"reservation {rr.id} is already in the slot table")
        for host in rr.resources:
            self._timeline(host)
        if not rr.id:   # a reservation taken out and put back keeps its id
            rr.id = self._next_id
            self._next_id += 1
        else:           # never hand that id out again (e.g. an id this table did not issue)
            self._next_id = max(self._next_id, rr.id + 1)
        self._insert(rr)
        return rr

    def _insert(self, rr: Reservation) -> None:
        if rr.end > rr.start:
            for host, amount in rr.resources.items():
                self._hosts[host].add(rr.start, rr.end, amount)
                for snapshot in self._snapshots:
                    snapshot.invalidate(host)
        self._reservations[rr.id] = rr
        self._by_lease.setdefault(rr.lease_id, {})[rr.id] = rr
        self._by_end.add(rr)

    def remove(self, rr: Reservation) -> None:
        if self._reservations.get(rr.id) is not rr:
            raise InconsistentSchedule(f"reservation {rr!r} is not in the slot table")
        self._by_end.remove(rr)
        if rr.end > rr.start:
            for host, amount in rr.resources.items():
                self._hosts[host].remove(rr.start, rr.end, amount)
                for snapshot in self._snapshots:
                    snapshot.invalidate(host)
        del self._reservations[rr.id]
        lease_rrs = self._by_lease[rr.lease_id]
        del lease_rrs[rr.id]
        if not lease_rrs:
            del self._by_lease[rr.lease_id]

    def update(self, rr: Reservation, start: datetime, end: datetime,
               resources: dict[str, Resources] | None = None) -> None:
        """Move a reservation in time (and optionally change what it holds) keeping its id."""
        if end < start:
            raise InvalidRequest("end", f"reservation ends ({end}) before it starts ({start})")
        for host in (resources if resources is not None else ()):
            self._timeline(host)   # refuse an unknown host before taking the reservation out
        self.remove(rr)
        rr.start, rr.end = start, end
        if resources is not None:
            rr.resources = resources
        self._insert(rr)

    def __contains__(self, rr: Reservation) -> bool:
        return self._reservations.get(rr.id) is rr

    def __len__(self) -> int:
        return len(self._reservations)

    def reservations(self) -> list[Reservation]:
        return list(self._reservations.values())

    def reservations_of(self, lease_id: int) -> list[Reservation]:
        return sorted(self._by_lease.get(lease_id, {}).values(), key=lambda r: (r.start, r.id))

    def reservations_ending_after(self, t: datetime, until: datetime | None = None) -> list[Reservation]:
        """Reservations ending after t (and, with `until`, at or before it), by end time."""
        i = self._by_end.bisect_key_right((t, float("inf")))
        if until is None:
            return list(self._by_end.islice(i))
        j = self._by_end.bisect_key_right((until, float("inf")))
        return list(self._by_end.islice(i, j))

    def iter_ending_after(self, t: datetime) -> Iterator[Reservation]:
        """Reservations ending after t, by end time, lazily."""
        return self._by_end.irange_key(min_key=(t, float("inf")), inclusive=(False, True))

    def reservations_overlapping(self, t1: datetime, t2: datetime,
                                 hosts: Collection[str] | None = None) -> list[Reservation]:
        """Reservations with some time in [t1, t2) (on the given hosts)."""
        out = []
        for r in self.reservations_ending_after(t1):
            if r.start < t2 and r.end > r.start and (hosts is None or any(h in r.resources for h in hosts)):
                out.append(r)
        return out

    # -- point and interval queries -------------------------------------------------------------------------
    def usage_at(self, host: str, t: datetime, excluding: Collection[Reservation] = ()) -> Resources:
        tl = self._timeline(host)
        used = tl.usage_at(t)
        if excluding:
            used = sub(used, _excluded_amount(_relevant(excluding, host, t, None, self._reservations), host, t))
        return used

    def free_at(self, host: str, t: datetime, excluding: Collection[Reservation] = ()) -> Resources:
        return sub(self._timeline(host).capacity, self.usage_at(host, t, excluding))

    def reservation_count_at(self, host: str, t: datetime) -> int:
        return self._timeline(host).count_at(t)

    def fits(self, host: str, request: Resources, t1: datetime, t2: datetime,
             excluding: Collection[Reservation] = ()) -> bool:
        """Whether `request` fits on `host` during all of [t1, t2)."""
        if t2 <= t1:
            if t2 < t1:
                raise InvalidRequest("end", f"interval ends ({t2}) before it starts ({t1})")
            return fits(self.usage_at(host, t1, excluding), request, self._timeline(host).capacity)
        tl = self._timeline(host)
        cap = tl.capacity
        relevant = _relevant(excluding, host, t1, t2, self._reservations) if excluding else None
        for seg_start, used in tl.segments(t1, t2):
            if relevant:
                used = sub(used, _excluded_amount(relevant, host, seg_start))
            if not fits(used, request, cap):
                return False
        return True

    def latest_fit(self, host: str, request: Resources, t1: datetime, t2: datetime | None = None,
                   excluding: Collection[Reservation] = ()) -> datetime | None:
        """How long from t1 the request fits: None if not even at t1; else the first time it stops
        fitting, capped at `t2` (returned when it fits through). With no `t2`, a request that fits
        forever returns `datetime.max` in UTC."""
        if t2 is not None and t2 < t1:
            raise InvalidRequest("end", f"interval ends ({t2}) before it starts ({t1})")
        tl = self._timeline(host)
        cap = tl.capacity
        relevant = _relevant(excluding, host, t1, t2, self._reservations) if excluding else None
        first = True
        for seg_start, used in tl.segments(t1, t2):
            if relevant:
                used = sub(used, _excluded_amount(relevant, host, seg_start))
            if not fits(used, request, cap):
                return None if first else seg_start
            first = False
        return t2 if t2 is not None else FOREVER

    def state_arrays(self, t: datetime) -> tuple[list[str], "np.ndarray", "np.ndarray", "np.ndarray", tuple]:
        """(host names, usage rows, capacity rows, reservation counts, version) of every host at t,
        equal versions mean equal contents. Queries at `present` (the scheduler's next schedulable time)
        use one snapshot, which moves forward with time and stays almost valid; others (an AR's start,
        backfilling points) use the second, so they never disturb the first."""
        present, elsewhere = self._snapshots
        snapshot = present if t == self.present else elsewhere
        used, count = snapshot.at(t)
        return snapshot.names, used, snapshot.capacity, count, (id(snapshot), snapshot.version)

    def row(self, host: str) -> int:
        """The host's row in the arrays `state_arrays` returns."""
        try:
            return self._snapshots[0].row(host)
        except KeyError:
            raise InvalidRequest("host", f"unknown host {host!r}") from None

    def members(self, reservations: Iterable[Reservation]) -> list[Reservation]:
        """Those of `reservations` that are in the table, each once."""
        seen: dict[int, Reservation] = {}
        for r in reservations:
            if self._reservations.get(r.id) is r:
                seen[r.id] = r
        return list(seen.values())

    def host_states(self, hosts: Iterable[str], t: datetime,
                    excluding: Collection[Reservation] = ()) -> list[tuple[str, Resources, Resources, int]]:
        """(host, usage, capacity, reservation count) at t for each host: what the mapper filters and
        the host-selection policies score, gathered with one bisect per host."""
        out = []
        timelines = self._hosts
        for h in hosts:
            tl = timelines[h]
            used, count = tl.state_at(t)
            if excluding:
                used = sub(used, _excluded_amount(_relevant(excluding, h, t, None, self._reservations), h, t))
            out.append((h, used, tl.capacity, count))
        return out

    def changepoints_after(self, t: datetime, until: datetime | None = None,
                           hosts: Iterable[str] | None = None) -> list[datetime]:
        """Sorted times after `t` (and before `until`) at which some reservation starts or ends on the
        hosts (usage may stay the same there, e.g. between back-to-back equal reservations)."""
        names = self._hosts if hosts is None else hosts
        points: set[datetime] = set()
        for name in names:
            points.update(self._timeline(name).breakpoints(t, until))
        return sorted(points)

    # -- whole-table checks -----------------------------------------------------------------------------------
    def overcommitted(self) -> list[tuple[str, datetime, Resources]]:
        """Every (host, segment start, usage) where usage exceeds capacity: empty in a healthy plan."""
        bad = []
        for tl in self._hosts.values():
            for t in tl._times:
                used = tl._usage[t]
                if not fits(used, NOTHING, tl.capacity):
                    bad.append((tl.name, t, used))
        return bad

