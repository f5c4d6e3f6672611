"""The slot table: per host, capacity and the reservations over time, answering the scheduler's queries.

Each host's usage is a step function (`HostTimeline`, from the table's core: the compiled `core.pyx`,
or for tests the naive reference under tests/reference/): times become integer keys at this module's
boundary (`keys.time_key`), datetimes go in and come out. Usage vectors are shared by value across the
table (`shared_usage.SharedUsage`, which gives each an integer code): a plan has a few hundred distinct
ones. Every host's state at the scheduler's query times is kept valid incrementally (`hoststates.HostStates`).

Nothing is rebuilt from scratch per query (the reference rebuilt an availability window over
reservations x changepoints x nodes on every call).

Every query takes `excluding`: reservations to treat as gone (`excluding`), which answers "what if these
leases were preempted" without touching the table.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from datetime import datetime
from types import MappingProxyType
from types import ModuleType
from typing import Protocol, cast

import numpy as np
from sortedcontainers import SortedKeyList

from orchestrator.model.errors import InconsistentSchedule, InvalidRequest
from orchestrator.model.reservations import Reservation
from orchestrator.model.resources import NOTHING, Resources, fits, sub
from orchestrator.model.timeutil import FOREVER
from orchestrator.model.tolerance import EPSILON
from orchestrator.planning.slottable.excluding import Excluded, excluded_amount, exclusion_keys, relevant_exclusions
from orchestrator.planning.slottable.hoststates import HostStates
from orchestrator.planning.slottable import core as compiled_core
from orchestrator.planning.slottable.core import HostTimeline, time_key
from orchestrator.planning.slottable.keys import AFTER_ALL, AT_START, BEFORE_ALL
from orchestrator.planning.slottable.shared_usage import SharedUsage

# Imported by name from here by the mapper and the tests (the table's public vocabulary): `FOREVER` is what
# `latest_fit` answers for a request that fits for ever; `time_key`, `BEFORE_ALL` and `AFTER_ALL` are the
# keys `unchanged_until` and `HostTimeline.scan` speak in.
__all__ = ["AFTER_ALL", "BEFORE_ALL", "FOREVER", "HostTimeline", "SharedUsage", "SlotTable", "time_key"]


class TableListener(Protocol):
    """What hears of every change to a slot table: whatever is derived from the table's contents (the host
    states, the scheduler's memos) learns of a change this way and no other."""

    def reservation_changed(self, hosts: Collection[str], rows: list[int], ks: int, ke: int, added: bool) -> None:
        """A reservation over the keys [ks, ke) was put on these hosts (`added`) or taken off them (`rows`:
        their rows, the order of `SlotTable.timeline_rows`, read only)."""

    def hosts_added(self, timelines: list[HostTimeline]) -> None: ...

    def host_removed(self, name: str) -> None: ...


#: the core a table runs on unless told otherwise: the compiled one (tests/reference/ holds a plain one)
DEFAULT_CORE: ModuleType = compiled_core

#: reservation ids stay below this (the table hands them out one by one)
_ID_SPAN = 1 << 40


def _end_order(rr: Reservation) -> int:
    """The by-end index's key: (end, id) as one integer. Its comparisons touch no datetime or tuple, and
    a big table's index stays small enough for the CPU caches to matter less."""
    return time_key(rr.end) * _ID_SPAN + rr.id


def _after_ends_at(t: datetime) -> int:
    """Above the key of every reservation ending at or before t, below that of any ending after it."""
    return time_key(t) * _ID_SPAN + _ID_SPAN - 1


class SlotTable:
    """All hosts' timelines plus indexes over the reservations (by id, by lease, by end time)."""

    def __init__(self, hosts: Mapping[str, Resources] | Iterable[tuple[str, Resources]] = (), *,
                 core: ModuleType | None = None):
        #: what the table runs on: the module of its host timelines (`HostTimeline`), of the loops over
        #: many of them (`add_on_hosts`, `remove_on_hosts`, `refresh_rows`, `room_later`, ...) and of the
        #: mapper's walk of alike nodes (`alike_walk`, `steady_head`): `DEFAULT_CORE` unless a test gives another
        self.core = core = core if core is not None else DEFAULT_CORE
        self._hosts: dict[str, HostTimeline] = {}
        self._names: tuple[str, ...] = ()   # (the hosts in order, made again when they change)
        #: every host's timeline in the hosts' order (the rows of `state_arrays`), read only
        self.timeline_rows: tuple[HostTimeline, ...] = ()
        #: every host's timeline by name, read only (`timeline(host)` without its checks)
        self.timelines: Mapping[str, HostTimeline] = MappingProxyType(self._hosts)
        self._reservations: dict[int, Reservation] = {}
        #: lease id -> its reservation, or {id: reservation} when it has several (most have one)
        self._by_lease: dict[int, Reservation | dict[int, Reservation]] = {}
        self._shared = SharedUsage()
        self._by_end: SortedKeyList = SortedKeyList(key=_end_order)
        self._next_id = 1
        self._largest: Resources | None = None
        #: nodes of a request -> why they could not run even on the empty table (None: they could)
        self._misfits: dict[tuple[Resources, ...], str | None] = {}
        self._vectors = self._shared.vectors
        #: what hears of every change (`listen`): the two host-state snapshots below first
        self._listeners: list[TableListener] = []
        #: every host's usage at the mapper's query times, kept valid incrementally; two snapshots so
        #: queries "now" and queries at a future AR's start do not keep invalidating each other
        self._snapshots = (HostStates(self._vectors, core), HostStates(self._vectors, core))
        for snapshot in self._snapshots:
            self.listen(snapshot)
        self._states_key: tuple[datetime | None, int] = (None, 0)
        #: the last (time, key) converted for an interval's start and end: the mapper asks `fits` for
        #: host after host with the same two datetimes (one tuple each, so a reader never mixes two)
        self._keys: list[tuple] = [(None, 0), (None, 0)]   # the last (start, key) and (end, key) asked
        #: the last list of excluded reservations asked about, its length, and its reservations by host
        self._exclusions: tuple[Collection[Reservation], int, dict[str, list[Reservation]]] | None = None
        #: the time most queries are about (set by the scheduler as time goes on)
        self.present: datetime | None = None
        #: ids of the leases whose reservations went in or out since the owner last emptied it (None: not
        #: kept); a store that writes back only what changed reads it instead of comparing every lease
        self.changed_leases: set[int] | None = None
        self.add_hosts(hosts.items() if isinstance(hosts, Mapping) else hosts)

    def listen(self, listener: TableListener) -> None:
        """Tell `listener` of every change from now on (hosts added or removed, reservations put in or
        taken out: a zero-length one changes no host's usage and is not told)."""
        self._listeners.append(listener)

    # -- hosts -----------------------------------------------------------------------------------------
    def add_host(self, name: str, capacity: Resources) -> None:
        self.add_hosts([(name, capacity)])

    def add_hosts(self, hosts: Iterable[tuple[str, Resources]]) -> None:
        """Add hosts (name, capacity) all at once: what is derived from the hosts is rebuilt once."""
        items = list(hosts)
        seen: set[str] = set()
        for name, capacity in items:
            if name in self._hosts or name in seen:
                raise InvalidRequest("host", f"{name!r} is already in the slot table")
            seen.add(name)
            capacity.validate(f"host {name}")
        added = [self.core.HostTimeline(name, capacity, self._shared) for name, capacity in items]
        if not added:
            return
        for timeline in added:
            self._hosts[timeline.name] = timeline
        self._names = tuple(self._hosts)
        self._renumber()
        self._largest = None
        self._misfits.clear()
        for listener in self._listeners:
            listener.hosts_added(added)

    def _renumber(self) -> None:
        """The hosts' timelines in order, each told its row (the core answers a change's rows by them)."""
        self.timeline_rows = tuple(self._hosts.values())
        for i, timeline in enumerate(self.timeline_rows):
            timeline.row = i

    def remove_host(self, name: str) -> None:
        timeline = self._timeline(name)
        if len(timeline):
            raise InvalidRequest("host", f"{name!r} still has reservations")
        del self._hosts[name]
        self._names = tuple(self._hosts)
        self._renumber()
        timeline.detach()
        self._largest = None
        self._misfits.clear()
        for listener in self._listeners:
            listener.host_removed(name)

    @property
    def hosts(self) -> list[str]:
        return list(self._hosts)

    @property
    def host_names(self) -> tuple[str, ...]:
        """The hosts in order, as one tuple kept until they change (`hosts` makes a list each time: the
        mapper asks for every placement)."""
        return self._names

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

    def misfit(self, nodes: tuple[Resources, ...]) -> str | None:
        """Why these nodes could not all run even with nothing else planned (a node larger than any host,
        or no room for all of them, first fit, hosts in order), naming the field; None when they could."""
        if nodes not in self._misfits:
            self._misfits[nodes] = self._misfit(nodes)
        return self._misfits[nodes]

    def _misfit(self, nodes: tuple[Resources, ...]) -> str | None:
        largest = self.largest_capacity()
        for i, node in enumerate(nodes):
            for field, asked, most in zip(Resources._fields, node, largest):
                if asked > most + EPSILON:
                    return f"nodes[{i}].{field}: {asked:g} is more than any host has ({most:g})"
        placed = 0
        for timeline in self._hosts.values():
            free = timeline.capacity
            for node in nodes[placed:]:
                if not fits(NOTHING, node, free):
                    break
                free = sub(free, node)
                placed += 1
            if placed == len(nodes):
                return None
        return f"nodes: {len(nodes)} nodes do not fit on the site even when it is empty"

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
        if not rr.resources.keys() <= self._hosts.keys():
            for host in rr.resources:
                self._timeline(host)   # (names the unknown host)
        if not rr.id:   # a reservation taken out and put back keeps its id
            rr.id = self._next_id
            self._next_id += 1
        else:           # never hand that id out again (e.g. an id this table did not issue)
            if not 0 < rr.id < _ID_SPAN:
                raise InvalidRequest("id", f"reservation id {rr.id} is outside 1..{_ID_SPAN - 1}")
            self._next_id = max(self._next_id, rr.id + 1)
        self._insert(rr)
        return rr

    def _insert(self, rr: Reservation) -> None:
        if self.changed_leases is not None:
            self.changed_leases.add(rr.lease_id)
        start, end = rr.start, rr.end
        if end > start:
            ks, ke = time_key(start), time_key(end)
            rows = self.core.add_on_hosts(self._hosts, rr.resources, ks, ke, start, end)
            for listener in self._listeners:
                listener.reservation_changed(rr.resources, rows, ks, ke, True)
        self._reservations[rr.id] = rr
        by_lease = self._by_lease
        held = by_lease.get(rr.lease_id)
        if held is None:
            by_lease[rr.lease_id] = rr
        elif isinstance(held, dict):
            held[rr.id] = rr
        else:
            by_lease[rr.lease_id] = {held.id: held, rr.id: rr}
        self._by_end.add(rr)

    def remove(self, rr: Reservation) -> None:
        if self._reservations.get(rr.id) is not rr:
            raise InconsistentSchedule(f"reservation {rr!r} is not in the slot table")
        if self.changed_leases is not None:
            self.changed_leases.add(rr.lease_id)
        self._by_end.remove(rr)
        if rr.end > rr.start:
            ks, ke = time_key(rr.start), time_key(rr.end)
            rows = self.core.remove_on_hosts(self._hosts, rr.resources, ks, ke)
            for listener in self._listeners:
                listener.reservation_changed(rr.resources, rows, ks, ke, False)
        del self._reservations[rr.id]
        held = self._by_lease[rr.lease_id]
        if not isinstance(held, dict):
            del self._by_lease[rr.lease_id]
        else:
            del held[rr.id]
            if len(held) == 1:
                self._by_lease[rr.lease_id] = next(iter(held.values()))

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
        held = self._by_lease.get(lease_id)
        if held is None:
            return []
        if not isinstance(held, dict):
            return [held]
        return sorted(held.values(), key=lambda r: (r.start, r.id))

    def reservations_ending_after(self, t: datetime, until: datetime | None = None) -> list[Reservation]:
        """Reservations ending after t (and, with `until`, at or before it), by end time."""
        i = self._by_end.bisect_key_right(_after_ends_at(t))
        if until is None:
            return list(self._by_end.islice(i))
        j = self._by_end.bisect_key_right(_after_ends_at(until))
        return list(self._by_end.islice(i, j))

    def iter_ending_after(self, t: datetime) -> Iterator[Reservation]:
        """Reservations ending after t, by end time, lazily."""
        return self._by_end.irange_key(min_key=_after_ends_at(t), inclusive=(False, True))

    def reservations_overlapping(self, t1: datetime, t2: datetime,
                                 hosts: Collection[str] | None = None) -> list[Reservation]:
        """Reservations with some time in [t1, t2) (on the given hosts)."""
        out = []
        wanted = None if hosts is None or len(hosts) >= len(self._hosts) and set(hosts) >= self._hosts.keys() \
            else frozenset(hosts)   # (every host: no need to ask)
        for r in self.reservations_ending_after(t1):
            if r.start < t2 and r.end > r.start and (wanted is None or not wanted.isdisjoint(r.resources)):
                out.append(r)
        return out

    # -- point and interval queries -------------------------------------------------------------------------
    def usage_at(self, host: str, t: datetime, excluding: Collection[Reservation] = ()) -> Resources:
        try:
            timeline = self._hosts[host]
        except KeyError:
            raise InvalidRequest("host", f"unknown host {host!r}") from None
        k = time_key(t)
        used = timeline.usage_key(k)
        if excluding:
            relevant = relevant_exclusions(excluding, host, t, None, self._reservations)
            if relevant:
                used = sub(used, excluded_amount(exclusion_keys(relevant, host), k))
        return used

    def free_at(self, host: str, t: datetime, excluding: Collection[Reservation] = ()) -> Resources:
        return sub(self._timeline(host).capacity, self.usage_at(host, t, excluding))

    def reservation_count_at(self, host: str, t: datetime) -> int:
        return self._timeline(host).state_key(time_key(t))[1]

    def fits(self, host: str, request: Resources, t1: datetime, t2: datetime,
             excluding: Collection[Reservation] = ()) -> bool:
        """Whether `request` fits on `host` during all of [t1, t2) (at t1 if the interval is empty)."""
        if t2 < t1:
            raise InvalidRequest("end", f"interval ends ({t2}) before it starts ({t1})")
        # (an empty interval is the point t1: what is in force there, whenever it started)
        tl, relevant = self._scan_setup(host, t1, t2 if t2 > t1 else None, excluding)
        return tl.scan(self._key(t1, 0), self._key(t2, 1), request, relevant) is None

    def latest_fit(self, host: str, request: Resources, t1: datetime, t2: datetime | None = None,
                   excluding: Collection[Reservation] = ()) -> datetime | None:
        """How long from t1 the request fits: None if not even at t1; else the first time it stops
        fitting, capped at `t2` (returned when it fits through). With no `t2`, a request that fits
        for ever returns `FOREVER` (model.timeutil's, the one the schedulers use as "no end")."""
        if t2 is not None and t2 < t1:
            raise InvalidRequest("end", f"interval ends ({t2}) before it starts ({t1})")
        tl, relevant = self._scan_setup(host, t1, t2 if t2 is None or t2 > t1 else None, excluding)
        stop = tl.scan(self._key(t1, 0), None if t2 is None else self._key(t2, 1), request, relevant)
        if stop is None:
            return t2 if t2 is not None else FOREVER
        return None if stop is AT_START else cast(datetime, stop)

    def _scan_setup(self, host: str, t1: datetime, t2: datetime | None,
                    excluding: Collection[Reservation]) -> tuple[HostTimeline, list[Excluded] | None]:
        """The host's timeline, and the excluded reservations that matter over [t1, t2) (by key)."""
        try:
            tl = self._hosts[host]
        except KeyError:
            raise InvalidRequest("host", f"unknown host {host!r}") from None
        if excluding:
            relevant = relevant_exclusions(self._excluded_on(excluding, host), host, t1, t2, self._reservations)
            if relevant:
                return tl, exclusion_keys(relevant, host)
        return tl, None

    def _excluded_on(self, excluding: Collection[Reservation], host: str) -> Collection[Reservation]:
        """Those of `excluding` that hold `host`. A preemption asks about host after host with one list of
        excluded reservations (hundreds, when many small leases give way): they are sorted by host once
        per list (a list is not changed while it is asked about; one of another length is another list)."""
        if len(excluding) < 16:
            return excluding
        cached = self._exclusions
        if cached is None or cached[0] is not excluding or cached[1] != len(excluding):
            by_host: dict[str, list[Reservation]] = {}
            for r in excluding:
                for h in r.resources:
                    by_host.setdefault(h, []).append(r)
            cached = self._exclusions = (excluding, len(excluding), by_host)
        return cached[2].get(host, ())

    # the mapper asks host after host about the same interval: its two keys are remembered
    def _key(self, t: datetime, slot: int) -> int:
        asked, k = self._keys[slot]
        if asked is t:
            return k
        k = time_key(t)
        self._keys[slot] = (t, k)
        return k

    def _states(self, t: datetime) -> HostStates:
        """The snapshot for t, brought to t. Queries at `present` (the scheduler's next schedulable time)
        use one snapshot, which moves forward with time and stays almost valid; others (an AR's start,
        backfilling points) use the second, so they never disturb the first. When the present one is
        closer to t, the second starts from a copy of it: fewer hosts to bring up to date."""
        present, elsewhere = self._snapshots
        asked, k = self._states_key
        if asked is not t:   # (the same time object comes again and again: the present, a point)
            k = time_key(t)
            self._states_key = (t, k)
        if t == self.present:
            snapshot = present
        else:
            snapshot = elsewhere
            if present.last is not None and (elsewhere.last is None
                                             or abs(k - present.last) < abs(k - elsewhere.last)):
                elsewhere.copy_from(present)
        snapshot.bring_to(k)
        return snapshot

    def state_arrays(self, t: datetime) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, tuple]:
        """(host names, usage rows, capacity rows, reservation counts, version) of every host at t;
        equal versions mean equal contents."""
        snapshot = self._states(t)
        return snapshot.names, snapshot.used, snapshot.capacity, snapshot.count, (id(snapshot), snapshot.version)

    def states_at(self, t: datetime) -> HostStates:
        """The host states behind `state_arrays`, brought to t: with them, per node size, how many such
        nodes each host can take, and whether any CPU is free (`HostStates.room`, `site_full`). Read only."""
        return self._states(t)

    def room_total(self, node: Resources, t: datetime, hosts: Collection[str] | None = None, *,
                   in_passing: bool = False) -> int:
        """How many nodes of this size fit at the instant t over all hosts (or `hosts`): the instant
        check the queue and the mapper make at the present, when a suspended lease's images could have
        moved, at backfilling points. After the present it is worked out from the present's snapshot
        and the hosts whose usage changes in between, so these checks do not drag the second snapshot
        back and forth (it stays where the mappings at other times need it). When many hosts change by
        t, the second snapshot is brought there instead (a mapping at t usually follows), unless the
        look is `in_passing`: one no mapping at t follows."""
        present = self.present
        if present is not None and t > present:
            snapshot = self._states(present)
            rows = None if hosts is None else [snapshot.row(h) for h in hosts]
            total = snapshot.room_at(node, time_key(t), rows, always=in_passing)
            if total is not None:
                return total
        snapshot = self._states(t)
        room = snapshot.room(node)
        if hosts is None:
            return room.total
        return sum(room.per_row[snapshot.row(h)] for h in hosts)

    def unchanged_until(self, t: datetime) -> np.ndarray:
        """Per host (rows as in `state_arrays`), the key (`time_key`) of its first breakpoint after t: its
        usage stays what `state_arrays(t)` says until then. Read only."""
        return self._states(t).valid_until

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
        k = time_key(t)
        for h in hosts:
            tl = timelines[h]
            used, count = tl.state_key(k)
            if excluding:
                relevant = relevant_exclusions(excluding, h, t, None, self._reservations)
                if relevant:
                    used = sub(used, excluded_amount(exclusion_keys(relevant, h), k))
            out.append((h, used, tl.capacity, count))
        return out

    def changepoints_after(self, t: datetime, until: datetime | None = None,
                           hosts: Iterable[str] | None = None) -> list[datetime]:
        """Sorted times after `t` (and before `until`) at which some reservation starts or ends on the
        hosts (usage may stay the same there, e.g. between back-to-back equal reservations)."""
        timelines = list(self._hosts.values()) if hosts is None else [self._timeline(h) for h in hosts]
        k1, k2 = time_key(t), None if until is None else time_key(until)
        if len(timelines) == 1:
            return timelines[0].breakpoint_list(k1, k2)
        points: dict[int, datetime] = {}
        for tl in timelines:
            tl.collect(k1, k2, points)
        return [points[k] for k in sorted(points)]

    # -- whole-table checks -----------------------------------------------------------------------------------
    def overcommitted(self) -> list[tuple[str, datetime, Resources]]:
        """Every (host, segment start, usage) where usage exceeds capacity: empty in a healthy plan."""
        bad = []
        for tl in self._hosts.values():
            for t, used in tl.items():
                if not fits(used, NOTHING, tl.capacity):
                    bad.append((tl.name, t, used))
        return bad

