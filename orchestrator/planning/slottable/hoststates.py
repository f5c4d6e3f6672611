"""Every host's usage at one query time, as numpy arrays kept valid incrementally.

The mapper's filter and score stages look at all hosts at the lease's start time, thousands of times per
simulated hour. Recomputing each host's usage (a bisect per host) made that the hottest loop. Here each
host's entry remembers the window [lo, hi) of times over which it is valid (between two breakpoints of
its timeline, as the slot table's integer time keys); a query at a new time recomputes only the hosts
whose window it leaves, and a change to a host's reservations recomputes that host only if it changes
the usage at the snapshot's time (otherwise it may only narrow the window). Filtering and ranking then
run as vector operations. Rows are read from the slot table as usage *codes* (its shared vectors'
numbers), so the memos here are keyed by integers.

The question asked most ("how many nodes of this size could start at t, over all hosts": the queue's
instant check, for every queued lease at every event) is kept the same way: per node size asked about,
the count per host and its total, brought up to date for the rows that changed when next asked (all at
once, vectorised, after a jump that changed many), so the answer is a lookup; for a later time it is
the lookup plus the hosts whose window ends by then (`room_at`). The Python rows are the
truth; the numpy copies the mapper ranks with catch up when read, gathered from a palette of the
distinct usage vectors (converting tuples row by row was the slow part).
"""

from __future__ import annotations

from collections.abc import Iterable
from math import floor

import numpy as np

from orchestrator.model.resources import NOTHING, Resources
from orchestrator.planning.slottable.keys import AFTER_ALL, BEFORE_ALL
from orchestrator.planning.slottable.timeline import HostTimeline

# an entry with lo = _NEVER_LO (after every key), hi = _NEVER_HI (before every key) is valid at no time
_NEVER_LO = AFTER_ALL
_NEVER_HI = BEFORE_ALL

#: node sizes whose room is kept up to date (a workload has a handful; beyond this, the oldest goes)
_MAX_SIZES = 32
#: `room_at` works out at most this many rows (or a quarter of the site) itself
_MAX_DELTA_ROWS = 64


def nodes_that_fit(used: Resources, capacity: Resources, node: Resources) -> int:
    """How many copies of `node` fit next to `used` within `capacity` (the float tolerance as in
    `resources.fits`, the arithmetic as in `room_of`, so both agree)."""
    most = None
    for u, c, n in zip(used, capacity, node):
        if n > 0:
            k = floor((c - u + 1e-9) / n)
            if most is None or k < most:
                most = k
    return max(most, 0) if most is not None else 0


def room_of(node: Resources, used: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Per row, how many copies of `node` fit (vectorised `nodes_that_fit`)."""
    need = np.array(node, dtype=float)
    wanted = need > 0
    return np.maximum(np.floor((capacity[:, wanted] - used[:, wanted] + 1e-9) / need[wanted]).min(axis=1), 0)


class _Room:
    """Per host, how many nodes of one size fit at the states' time, and the sum."""

    __slots__ = ("node", "per_row", "total", "array", "known", "stale")

    def __init__(self, node: Resources, array: np.ndarray, groups: int) -> None:
        self.node = node
        self.array = array               # per row, as numpy (the mapper's filter) ...
        self.per_row = array.astype(int).tolist()   # ... and as Python ints (row by row)
        self.total = sum(self.per_row)
        self.stale: set[int] = set()   # rows changed since: brought up to date when next asked
        # per capacity group, usage code -> count: a plan has few distinct usage vectors (the slot table
        # shares them), so the count is worked out once per vector
        self.known: list[dict[int, int]] = [{} for _ in range(groups)]

    def learn(self, group: int, code: int, used: Resources, capacity: Resources) -> int:
        """How many nodes fit next to usage `used` (code `code`) on a host of this capacity group, remembered."""
        memo = self.known[group]
        if len(memo) > 4096:
            memo.clear()
        fit = memo[code] = nodes_that_fit(used, capacity, self.node)
        return fit

    def copy(self) -> "_Room":
        room = _Room.__new__(_Room)
        room.node, room.per_row, room.total = self.node, list(self.per_row), self.total
        room.array, room.known = self.array.copy(), self.known   # (the memo of counts is shared)
        room.stale = set(self.stale)
        return room


class HostStates:
    """Every host's state at one time (`bring_to`), its rows in the order hosts were added. `vectors` is
    the slot table's code -> usage vector (`SharedUsage`: a code names one vector for as long as it
    exists, so the memos here are keyed by it, an integer)."""

    def __init__(self, vectors: dict[int, Resources]) -> None:
        self._vectors = vectors
        self.names: list[str] = []
        self._index: dict[str, int] = {}
        self._timelines: list[HostTimeline] = []
        self._capacities: list[Resources] = []
        self._groups: list[int] = []           # per row, its capacity's index in `_distinct`
        self._distinct: dict[Resources, int] = {}
        self.capacity = np.zeros((0, 5))
        # the states per row: Python lists are the truth, kept up to date row by row; the numpy
        # copies (`used`, `count`) catch up with the rows in `_pending` when they are read
        self._used_rows: list[Resources] = []
        self._count_rows: list[int] = []
        self._used = np.zeros((0, 5))
        self._count = np.zeros(0, dtype=np.int64)
        self._pending: set[int] = set()
        self._lo = np.zeros(0, dtype=np.int64)
        self._hi = np.zeros(0, dtype=np.int64)
        # a bound on the windows (at least every lo, at most every hi): a time between them is inside
        # every row's window, so a move there needs no look at the arrays
        self._max_lo = _NEVER_LO
        self._min_hi = _NEVER_HI
        self.last: int | None = None   # the time last asked about (slot-table key)
        self.version = 0    # bumped whenever an entry changes: keys caches built on these arrays
        self._clean = False  # every entry valid at `last`
        # rows invalidated since the last `bring_to`: a query at the same time recomputes just these, without
        # comparing every row's window (the common case: the scheduler commits, then asks again)
        self._dirty: set[int] = set()
        self._rooms: dict[Resources, _Room] = {}
        self._cpu_free: list[bool] = []   # per row: some CPU free
        self._cpu_free_rows = 0
        # the distinct usage vectors seen, numbered, with their numpy rows (`_palette`): the numpy copy of
        # the usage is then one gather (`_palette[ids]`) instead of converting tuples
        self._vector_ids: dict[Resources, int] = {}
        self._palette = np.zeros((64, 5))
        self._ids: list[int] = []
        self._code_rows: list[int] = []        # per row, the code of its usage
        self._code_ids: dict[int, int] = {}    # code -> its vector's id in the palette

    def add_host(self, timeline: HostTimeline) -> None:
        self._index[timeline.name] = len(self.names)
        self.names.append(timeline.name)
        self._timelines.append(timeline)
        self._capacities.append(timeline.capacity)
        self.capacity = np.vstack([self.capacity, np.array(timeline.capacity, dtype=float)])
        self._changed()

    def remove_host(self, name: str) -> None:
        i = self._index.pop(name)
        del self.names[i], self._timelines[i], self._capacities[i]
        self.capacity = np.delete(self.capacity, i, axis=0)
        self._index = {n: k for k, n in enumerate(self.names)}
        self._changed()

    def _changed(self) -> None:
        # the rows themselves changed: every row is recomputed at the next `bring_to`, and what is kept per
        # row (room per node size, free CPU) starts again from there
        n = len(self.names)
        self._clean = False
        self.last = None
        self.version += 1
        self._dirty.clear()
        self._distinct = {}
        self._groups = [self._distinct.setdefault(c, len(self._distinct)) for c in self._capacities]
        self._used_rows = [Resources()] * n
        self._count_rows = [0] * n
        self._code_rows = [-1] * n   # (no code: every row is recomputed before it is read)
        self._code_ids = {}
        self._vector_ids = {}
        self._ids = [self._vector_id(Resources())] * n
        self._used = np.zeros((n, 5))
        self._count = np.zeros(n, dtype=np.int64)
        self._pending = set()
        self._lo = np.full(n, _NEVER_LO, dtype=np.int64)
        self._hi = np.full(n, _NEVER_HI, dtype=np.int64)
        self._max_lo, self._min_hi = _NEVER_LO, _NEVER_HI
        self._rooms.clear()
        self._cpu_free = [False] * n
        self._cpu_free_rows = 0

    def copy_from(self, other: "HostStates") -> None:
        """Take over the states of another snapshot of the same hosts (rows in the same order)."""
        self.version += 1
        self._used_rows = list(other._used_rows)
        self._count_rows = list(other._count_rows)
        self._code_rows = list(other._code_rows)
        self._code_ids = dict(other._code_ids)
        self._vector_ids = dict(other._vector_ids)
        self._palette = other._palette.copy()
        self._ids = list(other._ids)
        self._used = other._used.copy()
        self._count = other._count.copy()
        self._pending = set(other._pending)
        self._lo = other._lo.copy()
        self._hi = other._hi.copy()
        self._max_lo, self._min_hi = other._max_lo, other._min_hi
        self.last = other.last
        self._clean = other._clean
        self._dirty = set(other._dirty)
        # the counts per node size come along when there are few (a workload's handful of sizes);
        # otherwise they are recounted, vectorised, when first asked about
        self._rooms = {node: room.copy() for node, room in other._rooms.items()} if len(other._rooms) <= 4 else {}
        self._cpu_free = list(other._cpu_free)
        self._cpu_free_rows = other._cpu_free_rows

    def row(self, host: str) -> int:
        return self._index[host]

    @property
    def used(self) -> np.ndarray:
        """Usage per host x resource at the time last asked about (read only)."""
        if self._pending:
            self._catch_up()
        return self._used

    @property
    def count(self) -> np.ndarray:
        """Reservations per host at the time last asked about (read only)."""
        if self._pending:
            self._catch_up()
        return self._count

    def gather(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`used[rows]` and `count[rows]`, read from the Python rows when the numpy copies lag behind on
        more rows than asked for: ranking a few candidate hosts then does not bring every row's copy up
        to date (and many candidates are read from the copies, brought up to date)."""
        if len(rows) >= len(self._pending):
            return self.used[rows], self.count[rows]
        ids, counts = self._ids, self._count_rows
        rows = rows.tolist()
        return self._palette[[ids[i] for i in rows]], np.array([counts[i] for i in rows], dtype=np.int64)

    def _catch_up(self) -> None:
        rows = list(self._pending)
        self._pending.clear()
        count_rows, ids = self._count_rows, self._ids
        if len(rows) <= 4:
            # a few rows (a commit's hosts): element writes beat building index arrays
            used, count, palette = self._used, self._count, self._palette
            for i in rows:
                used[i] = palette[ids[i]]
                count[i] = count_rows[i]
        elif 2 * len(rows) > len(ids):
            self._used = self._palette[ids]
            self._count = np.array(count_rows, dtype=np.int64)
        else:
            self._used[rows] = self._palette[[ids[i] for i in rows]]
            self._count[rows] = [count_rows[i] for i in rows]

    def _vector_id(self, used: Resources) -> int:
        vid = self._vector_ids.get(used)
        if vid is None:
            ids = self._vector_ids
            if len(ids) >= 1 << 16:   # a long run: start again from the vectors in use
                ids.clear()
                self._code_ids.clear()
                for i, v in enumerate(self._used_rows):
                    self._ids[i] = ids.setdefault(v, len(ids))
                self._palette = np.array(list(ids) + [NOTHING] * 64, dtype=float)
                vid = ids.get(used)
                if vid is not None:
                    return vid
            vid = ids[used] = len(ids)
            if vid >= len(self._palette):
                self._palette = np.vstack([self._palette, np.zeros_like(self._palette)])
            self._palette[vid] = used
        return vid

    @property
    def valid_until(self) -> np.ndarray:
        """Per host, the key of its next breakpoint after the time last brought to (`bring_to`)."""
        return self._hi

    def changed(self, hosts: Iterable[str], ks: int, ke: int, added: bool) -> None:
        """A reservation over the keys [ks, ke) was put on these hosts or taken off them. Only the rows
        it covers at the time they are at change usage: those are recomputed at the next `bring_to`.
        For the others the usage stays; a reservation put in only narrows their windows (its start or
        end may fall inside one), and one taken off leaves them valid (its start and end bounded them)."""
        k = self.last
        if k is None:
            return
        index = self._index
        if ks <= k < ke:
            self._clean = False
            self._dirty.update([index[h] for h in hosts])
        elif not added:
            return
        elif ks > k:
            hi = self._hi
            for h in hosts:
                i = index[h]
                if ks < hi[i]:
                    hi[i] = ks
            if ks < self._min_hi:
                self._min_hi = ks
        else:
            lo = self._lo
            for h in hosts:
                i = index[h]
                if ke > lo[i]:
                    lo[i] = ke
            if ke > self._max_lo:
                self._max_lo = ke

    def bring_to(self, k: int) -> None:
        """Bring every row to the time whose slot-table key (`keys.time_key`: integer microseconds)
        is k: `used`, `count`, `valid_until`, `room` and `site_full` then answer for that time."""
        dirty = self._dirty
        exact = False
        if k == self.last:
            if self._clean:
                return
            rows = sorted(dirty)
        else:
            self.last = k
            if self._max_lo <= k < self._min_hi:
                rows = sorted(dirty)   # (k is inside every row's window)
            else:
                stale = (self._lo > k) | (self._hi <= k)
                if dirty:
                    stale[list(dirty)] = True
                rows = stale.nonzero()[0].tolist()
                exact = True
        dirty.clear()
        self._clean = True
        if rows:
            self._refresh(rows, k)
        if exact and self.names:
            # (the ufuncs' own reduce: ndarray.max goes through a Python-level wrapper)
            self._max_lo, self._min_hi = int(np.maximum.reduce(self._lo)), int(np.minimum.reduce(self._hi))

    def _refresh(self, rows: list[int], k: int) -> None:
        self.version += 1
        windows = HostTimeline.windows_at(self._timelines, rows, k)
        vectors = self._vectors
        used_rows, count_rows, code_rows = self._used_rows, self._count_rows, self._code_rows
        self._pending.update(rows)
        lo, hi = self._lo, self._hi
        ids, code_ids, vector_id = self._ids, self._code_ids, self._vector_id
        cpu_free, free_rows, capacities = self._cpu_free, self._cpu_free_rows, self._capacities
        for i, w in zip(rows, windows):
            code = w[0]
            v = used_rows[i] = vectors[code]
            code_rows[i] = code
            count_rows[i] = w[1]
            vid = code_ids.get(code)
            if vid is None:
                vid = vector_id(v)
                if len(code_ids) >= 1 << 16:   # (codes of vectors long gone)
                    code_ids.clear()
                code_ids[code] = vid
            ids[i] = vid
            free = capacities[i][0] - v[0] > 1e-9
            if free is not cpu_free[i]:
                free_rows += 1 if free else -1
                cpu_free[i] = free
        self._cpu_free_rows = free_rows
        if len(rows) <= 4:
            for i, w in zip(rows, windows):
                lo[i] = w[2]
                hi[i] = w[3]
        else:
            lo[rows] = [w[2] for w in windows]
            hi[rows] = [w[3] for w in windows]
        most = max([w[2] for w in windows])
        if most > self._max_lo:
            self._max_lo = most
        least = min([w[3] for w in windows])
        if least < self._min_hi:
            self._min_hi = least
        for room in self._rooms.values():
            room.stale.update(rows)

    # -- kept per row (valid after `bring_to`) ---------------------------------------------------------------------
    def room(self, node: Resources) -> _Room:
        """How many nodes of this size each host can take at the time last asked about, and the sum."""
        room = self._rooms.get(node)
        if room is None or (len(room.stale) > 64 and len(room.stale) * 4 > len(self.names)):
            # new, or many rows changed (a jump in time on a big site): one vectorised pass
            if room is None and len(self._rooms) >= _MAX_SIZES:
                del self._rooms[next(iter(self._rooms))]
            array = room_of(node, self.used, self.capacity)
            if room is None:
                room = self._rooms[node] = _Room(node, array, len(self._distinct))
            else:
                room.array, room.per_row = array, array.astype(int).tolist()
                room.total = sum(room.per_row)
                room.stale.clear()
        elif room.stale:
            self._bring_room(room)
        return room

    def room_at(self, node: Resources, k: int, rows: list[int] | None = None) -> int | None:
        """How many nodes of this size fit at the later key k (> the time brought to), over all rows or
        `rows`, worked out from the counts kept here and the rows whose window ends by k, without moving
        there; None when too many rows change by then (moving is then cheaper)."""
        room = self.room(node)
        hi, per_row = self._hi, room.per_row
        if rows is None:
            total = room.total
            if k < self._min_hi:
                return total
            changed = (hi <= k).nonzero()[0].tolist()
            if len(changed) > _MAX_DELTA_ROWS and 4 * len(changed) > len(self.names):
                return None
        else:
            total = sum([per_row[i] for i in rows])
            changed = [i for i in rows if hi[i] <= k]
        if changed:
            vectors, capacities, groups, known = self._vectors, self._capacities, self._groups, room.known
            for i, w in zip(changed, HostTimeline.windows_at(self._timelines, changed, k)):
                code = w[0]
                fit = known[groups[i]].get(code)
                if fit is None:
                    fit = room.learn(groups[i], code, vectors[code], capacities[i])
                total += fit - per_row[i]
        return total

    def _bring_room(self, room: _Room) -> None:
        """Recount the rows changed since the room was last asked about."""
        per_row, array, known = room.per_row, room.array, room.known
        code_rows, capacities, groups = self._code_rows, self._capacities, self._groups
        total = room.total
        for i in room.stale:
            code = code_rows[i]
            fit = known[groups[i]].get(code)
            if fit is None:
                fit = room.learn(groups[i], code, self._used_rows[i], capacities[i])
            if fit != per_row[i]:
                total += fit - per_row[i]
                per_row[i] = fit
                array[i] = fit
        room.stale.clear()
        room.total = total

    def site_full(self) -> bool:
        """No CPU free on any host at the time last asked about."""
        return self._cpu_free_rows == 0
