"""Every host's usage at one query time, as numpy arrays kept valid incrementally.

The mapper's filter and score stages look at all hosts at the lease's start time, thousands of times per
simulated hour. Recomputing each host's usage (a bisect per host) made that the hottest loop. Here each
host's entry remembers the window [since, until) of times over which it is valid (between two breakpoints
of its timeline, as the slot table's integer time keys); a query at a new time recomputes only the hosts
whose window it leaves, and a change to a host's reservations recomputes that host only if it changes
the usage at the snapshot's time (otherwise it may only narrow the window). Filtering and ranking then
run as vector operations. Rows are read from the slot table as usage *codes* (its shared vectors'
numbers), so the memos here are keyed by integers.

The question asked most ("how many nodes of this size could start at t, over all hosts": the queue's
instant check, for every queued lease at every event) is kept the same way: per node size asked about,
the count per host and its total, brought up to date for the rows that changed when next asked (the
core's compiled recount of those rows), so the answer is a lookup; for a later time it is the lookup
plus the hosts whose window ends by then (`room_at`).

What a snapshot keeps per row comes in four parts, each an object copied as a unit (`copy_from`) and
started afresh as a unit (`_changed`): the rows themselves (`_RowValues`, Python lists: the truth), their
windows (`_Windows`), the numpy copies the mapper ranks with (`_ArrayCopy`, which catch up when read) and
the palette those copies are gathered from (`_Palette`: converting tuples row by row was the slow part).
"""

from __future__ import annotations

from collections.abc import Iterable
from math import floor
from types import ModuleType

import numpy as np

from orchestrator.model.resources import NOTHING, Resources
from orchestrator.model.tolerance import EPSILON
from orchestrator.planning.slottable.keys import AFTER_ALL, BEFORE_ALL
from orchestrator.planning.slottable.core import HostTimeline

#: node sizes whose room is kept up to date (a workload has a handful; beyond this, the oldest goes)
_MAX_SIZES = 32
#: when more rows than _BULK_ROWS change by a later time, and more than one in _BULK_SHARE of all rows,
#: `room_at` leaves the count to the second snapshot brought there (a mapping there usually follows)
_BULK_ROWS = 64
_BULK_SHARE = 4
#: up to this many rows, numpy element writes beat building index arrays (a commit touches a few hosts)
_FEW_ROWS = 4
#: when more than one row in this many changed, the numpy copies are rebuilt whole (one gather) rather
#: than row by row
_REBUILD_SHARE = 2
#: per capacity group, the usage codes whose count of nodes is remembered: a plan has a few hundred
#: distinct usages, so more means codes of vectors long gone, and the memo starts again
_MAX_KNOWN = 4096
#: distinct usage vectors numbered in the palette (and codes mapped to them): past this, a long run has
#: left many unused, and the numbering starts again from the vectors the rows hold
_MAX_PALETTE = 1 << 16
#: palette rows allocated ahead (it doubles when full)
_PALETTE_SPARE = 64
#: a snapshot copied from another takes over its counts per node size when there are at most this many
#: (a workload's handful); otherwise they are recounted, vectorised, when first asked about
_MAX_ROOMS_COPIED = 4


def nodes_that_fit(used: Resources, capacity: Resources, node: Resources) -> int:
    """How many copies of `node` fit next to `used` within `capacity` (the float tolerance as in
    `resources.fits`, the arithmetic as in `room_of`, so both agree)."""
    most = None
    for u, c, n in zip(used, capacity, node):
        if n > 0:
            k = floor((c - u + EPSILON) / n)
            if most is None or k < most:
                most = k
    return max(most, 0) if most is not None else 0


def room_of(node: Resources, used: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Per row, how many copies of `node` fit (vectorised `nodes_that_fit`)."""
    need = np.array(node, dtype=float)
    wanted = need > 0
    return np.maximum(np.floor((capacity[:, wanted] - used[:, wanted] + EPSILON) / need[wanted]).min(axis=1), 0)


def fits_rows(used: np.ndarray, request: Resources, capacity: np.ndarray) -> np.ndarray:
    """Per row, whether `request` fits next to the row's usage (vectorised `resources.fits`: the same
    sums and comparisons, so the same answer as the slot table's walks give at that time)."""
    return np.all(used + np.array(request) <= capacity + EPSILON, axis=1)


class _Room:
    """Per host, how many nodes of one size fit at the states' time, and the sum."""

    __slots__ = ("node", "per_row", "total", "array", "known", "stale")

    def __init__(self, node: Resources, array: np.ndarray, groups: int) -> None:
        self.node = node
        self.array = array               # per row, as numpy (the mapper's filter) ...
        self.per_row = array.astype(int).tolist()   # ... and as Python ints (row by row)
        self.total = sum(self.per_row)
        # rows changed since, in the order refreshed (a row may come more than once: recounting it again
        # changes nothing, and appending costs less than a set's hashing): brought up to date when next asked
        self.stale: list[int] = []
        # per capacity group, usage code -> count: a plan has few distinct usage vectors (the slot table
        # shares them), so the count is worked out once per vector
        self.known: list[dict[int, int]] = [{} for _ in range(groups)]

    def learn(self, group: int, code: int, used: Resources, capacity: Resources) -> int:
        """How many nodes fit next to usage `used` (code `code`) on a host of this capacity group, remembered."""
        memo = self.known[group]
        if len(memo) > _MAX_KNOWN:
            memo.clear()
        fit = memo[code] = nodes_that_fit(used, capacity, self.node)
        return fit

    def copy(self) -> _Room:
        room = _Room(self.node, self.array.copy(), 0)   # (constructed: a compiled class has no bare __new__)
        room.per_row, room.total = list(self.per_row), self.total
        room.known = self.known   # (the memo of counts is shared)
        room.stale = list(self.stale)
        return room


class _RowValues:
    """Per row, the host's state at the snapshot's time, as Python values: the truth, kept up to date
    row by row. `vector_id` is the row's usage in the `_Palette`; `cpu_free` whether some CPU is free,
    and `cpu_free_rows` how many rows have some."""

    __slots__ = ("used", "count", "code", "vector_id", "cpu_free", "cpu_free_rows")

    def __init__(self, n: int, nothing_id: int) -> None:
        # every row is recomputed before it is read: these are placeholders (code -1 names no vector)
        self.used: list[Resources] = [NOTHING] * n
        self.count: list[int] = [0] * n
        self.code: list[int] = [-1] * n
        self.vector_id: list[int] = [nothing_id] * n
        self.cpu_free: list[bool] = [False] * n
        self.cpu_free_rows = 0

    def copy(self) -> _RowValues:
        values = _RowValues(0, 0)
        values.used, values.count, values.code = list(self.used), list(self.count), list(self.code)
        values.vector_id, values.cpu_free = list(self.vector_id), list(self.cpu_free)
        values.cpu_free_rows = self.cpu_free_rows
        return values


class _Windows:
    """Per row, the keys [since, until) between which its state holds (numpy, so that finding the rows a
    new time leaves is one comparison), and bounds on them all: a key k with `latest_since <= k <
    earliest_until` is inside every row's window, so a move there needs no look at the arrays."""

    __slots__ = ("since", "until", "latest_since", "earliest_until")

    def __init__(self, n: int) -> None:
        # (since after until: valid at no time)
        self.since = np.full(n, AFTER_ALL, dtype=np.int64)
        self.until = np.full(n, BEFORE_ALL, dtype=np.int64)
        self.latest_since = AFTER_ALL
        self.earliest_until = BEFORE_ALL

    def copy(self) -> _Windows:
        windows = _Windows(0)
        windows.since, windows.until = self.since.copy(), self.until.copy()
        windows.latest_since, windows.earliest_until = self.latest_since, self.earliest_until
        return windows


class _ArrayCopy:
    """The rows' usage (rows x resources) and counts as numpy arrays, for the mapper's vector operations;
    the rows in `pending` changed since and are copied in when the arrays are next read (a row may be
    listed more than once: copying it again changes nothing)."""

    __slots__ = ("used", "count", "pending")

    def __init__(self, n: int) -> None:
        self.used = np.zeros((n, 5))
        self.count = np.zeros(n, dtype=np.int64)
        self.pending: list[int] = []

    def copy(self) -> _ArrayCopy:
        arrays = _ArrayCopy(0)
        arrays.used, arrays.count, arrays.pending = self.used.copy(), self.count.copy(), list(self.pending)
        return arrays


class _Palette:
    """The distinct usage vectors seen, numbered (`ids`: vector -> id), with their numpy rows (`rows[id]`):
    the numpy copy of the usage is then one gather (`rows[ids]`) instead of converting tuples. `by_code`
    maps the slot table's usage codes to ids (one dict lookup per refreshed row)."""

    __slots__ = ("ids", "rows", "by_code")

    def __init__(self) -> None:
        self.ids: dict[Resources, int] = {}
        self.rows = np.zeros((_PALETTE_SPARE, 5))
        self.by_code: dict[int, int] = {}

    def copy(self) -> _Palette:
        palette = _Palette()
        palette.ids, palette.rows, palette.by_code = dict(self.ids), self.rows.copy(), dict(self.by_code)
        return palette


class HostStates:
    """Every host's state at one time (`bring_to`), its rows in the order hosts were added. `vectors` is
    the slot table's code -> usage vector (`SharedUsage`: a code names one vector for as long as it
    exists, so the memos here are keyed by it, an integer); `core` the table's core, whose `refresh_rows`
    and `room_later` read the rows from the hosts' timelines (`mark_rows`, `narrow_windows` note a
    reservation's change on its hosts' rows, `unmark_rows` clears those notes; `recount_rows`, `rows_alike`
    are the loops over many rows)."""

    def __init__(self, vectors: dict[int, Resources], core: ModuleType) -> None:
        self._vectors = vectors
        self._refresh_rows = core.refresh_rows
        self._mark_rows, self._unmark_rows, self._narrow_windows = core.mark_rows, core.unmark_rows, core.narrow_windows
        self._rows_alike, self._recount_rows, self._room_later = core.rows_alike, core.recount_rows, core.room_later
        self.names: list[str] = []
        self._index: dict[str, int] = {}
        self._timelines: list[HostTimeline] = []
        self._capacities: list[Resources] = []
        self._groups: list[int] = []           # per row, its capacity's index in `_distinct`
        self._distinct: dict[Resources, int] = {}
        self.capacity = np.zeros((0, 5))
        self.last: int | None = None   # the time last asked about (slot-table key)
        self.version = 0    # bumped whenever an entry changes: keys caches built on these arrays
        self._clean = False  # every entry valid at `last`
        # rows invalidated since the last `bring_to`, each once (`_marked` per row: whether it is in the list):
        # a query at the same time recomputes just these, without comparing every row's window (the common
        # case: the scheduler commits, then asks again)
        self._dirty: list[int] = []
        self._marked = bytearray()
        self._rooms: dict[Resources, _Room] = {}
        self._changed()

    # -- what the slot table tells (`table.TableListener`) -------------------------------------------------------
    def hosts_added(self, timelines: list[HostTimeline]) -> None:
        for timeline in timelines:
            self._index[timeline.name] = len(self.names)
            self.names.append(timeline.name)
            self._timelines.append(timeline)
            self._capacities.append(timeline.capacity)
        self.capacity = np.vstack([self.capacity, np.array([t.capacity for t in timelines], dtype=float)])
        self._changed()

    def host_removed(self, name: str) -> None:
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
        self._dirty = []
        self._marked = bytearray(n)
        self._distinct = {}
        self._groups = [self._distinct.setdefault(c, len(self._distinct)) for c in self._capacities]
        self._palette = _Palette()
        self._values = _RowValues(n, self._vector_id(NOTHING))
        self._windows = _Windows(n)
        self._arrays = _ArrayCopy(n)
        self._rooms.clear()

    def copy_from(self, other: HostStates) -> None:
        """Take over the states of another snapshot of the same hosts (rows in the same order)."""
        self.version += 1
        self._values = other._values.copy()
        self._windows = other._windows.copy()
        self._arrays = other._arrays.copy()
        self._palette = other._palette.copy()
        self.last = other.last
        self._clean = other._clean
        self._dirty = list(other._dirty)
        self._marked = bytearray(other._marked)
        if len(other._rooms) <= _MAX_ROOMS_COPIED:
            self._rooms = {node: room.copy() for node, room in other._rooms.items()}
        else:
            self._rooms = {}

    def row(self, host: str) -> int:
        return self._index[host]

    @property
    def used(self) -> np.ndarray:
        """Usage per host x resource at the time last asked about (read only)."""
        if self._arrays.pending:
            self._catch_up()
        return self._arrays.used

    @property
    def count(self) -> np.ndarray:
        """Reservations per host at the time last asked about (read only)."""
        if self._arrays.pending:
            self._catch_up()
        return self._arrays.count

    def gather(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`used[rows]` and `count[rows]`, read from the Python rows when the numpy copies lag behind on
        more rows than asked for: ranking a few candidate hosts then does not bring every row's copy up
        to date (and many candidates are read from the copies, brought up to date)."""
        if len(rows) >= len(self._arrays.pending):
            return self.used[rows], self.count[rows]
        ids, counts = self._values.vector_id, self._values.count
        rows = rows.tolist()
        return self._palette.rows[[ids[i] for i in rows]], np.array([counts[i] for i in rows], dtype=np.int64)

    def alike(self, rows: list[int]) -> bool:
        """Whether these rows hold the same usage and number of reservations on hosts of the same capacity
        (read from the Python rows): every host-selection policy's keys then tie on them."""
        values = self._values
        return self._rows_alike(rows, values.vector_id, values.count, self._groups)

    def _catch_up(self) -> None:
        arrays = self._arrays
        rows = arrays.pending
        arrays.pending = []
        count_rows, ids, palette = self._values.count, self._values.vector_id, self._palette.rows
        if len(rows) <= _FEW_ROWS:
            used, count = arrays.used, arrays.count
            for i in rows:
                used[i] = palette[ids[i]]
                count[i] = count_rows[i]
        elif len(rows) * _REBUILD_SHARE > len(ids):
            arrays.used = palette[ids]
            arrays.count = np.array(count_rows, dtype=np.int64)
        else:
            arrays.used[rows] = palette[[ids[i] for i in rows]]
            arrays.count[rows] = [count_rows[i] for i in rows]

    def _new_code(self, code: int, used: Resources) -> int:
        """The palette id of a usage code not seen before (its vector `used`), remembered."""
        by_code = self._palette.by_code
        vid = self._vector_id(used)
        if len(by_code) >= _MAX_PALETTE:   # (codes of vectors long gone)
            by_code.clear()
        by_code[code] = vid
        return vid

    def _vector_id(self, used: Resources) -> int:
        palette = self._palette
        ids = palette.ids
        vid = ids.get(used)
        if vid is None:
            if len(ids) >= _MAX_PALETTE:   # a long run: start again from the vectors in use
                ids.clear()
                palette.by_code.clear()
                row_ids = self._values.vector_id
                for i, v in enumerate(self._values.used):
                    row_ids[i] = ids.setdefault(v, len(ids))
                palette.rows = np.array(list(ids) + [NOTHING] * _PALETTE_SPARE, dtype=float)
                vid = ids.get(used)
                if vid is not None:
                    return vid
            vid = ids[used] = len(ids)
            if vid >= len(palette.rows):
                palette.rows = np.vstack([palette.rows, np.zeros_like(palette.rows)])
            palette.rows[vid] = used
        return vid

    @property
    def valid_until(self) -> np.ndarray:
        """Per host, the key of its next breakpoint after the time last brought to (`bring_to`)."""
        return self._windows.until

    def reservation_changed(self, hosts: Iterable[str], rows: list[int], ks: int, ke: int, added: bool) -> None:
        """A reservation over the keys [ks, ke) was put on these hosts or taken off them. Only the rows
        it covers at the time they are at change usage: those are recomputed at the next `bring_to`.
        For the others the usage stays; a reservation put in only narrows their windows (its start or
        end may fall inside one), and one taken off leaves them valid (its start and end bounded them)."""
        k = self.last
        if k is None:
            return
        if ks <= k < ke:
            self._clean = False
            self._mark_rows(rows, self._marked, self._dirty)
        elif not added:
            return
        elif ks > k:
            windows = self._windows
            self._narrow_windows(rows, windows.until, ks, True)
            if ks < windows.earliest_until:
                windows.earliest_until = ks
        else:
            windows = self._windows
            self._narrow_windows(rows, windows.since, ke, False)
            if ke > windows.latest_since:
                windows.latest_since = ke

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
            windows = self._windows
            if windows.latest_since <= k < windows.earliest_until:
                rows = sorted(dirty)   # (k is inside every row's window)
            else:
                stale = (windows.since > k) | (windows.until <= k)
                if dirty:
                    stale[dirty] = True
                rows = stale.nonzero()[0].tolist()
                exact = True
        if dirty:
            self._unmark_rows(dirty, self._marked)
            self._dirty = []
        self._clean = True
        if rows:
            self._refresh(rows, k)
        if exact and self.names:
            # (the ufuncs' own reduce: ndarray.max goes through a Python-level wrapper)
            windows.latest_since = int(np.maximum.reduce(windows.since))
            windows.earliest_until = int(np.minimum.reduce(windows.until))

    def _refresh(self, rows: list[int], k: int) -> None:
        self.version += 1
        values, windows = self._values, self._windows
        freed, most, least = self._refresh_rows(
            self._timelines, rows, k, self._vectors, values.used, values.code, values.count, values.vector_id,
            self._palette.by_code, self._new_code, self._capacities, values.cpu_free, windows.since, windows.until)
        values.cpu_free_rows += freed
        if most > windows.latest_since:
            windows.latest_since = most
        if least < windows.earliest_until:
            windows.earliest_until = least
        # (what lags behind the rows is brought up to date at once when its list of rows to read again
        # grows past twice the rows: the lists stay bounded)
        bound = 2 * len(self.names) + _FEW_ROWS
        pending = self._arrays.pending
        pending.extend(rows)
        if len(pending) > bound:
            self._catch_up()
        for room in self._rooms.values():
            room.stale.extend(rows)
            if len(room.stale) > bound:
                self._bring_room(room)

    # -- kept per row (valid after `bring_to`) ---------------------------------------------------------------------
    def room(self, node: Resources) -> _Room:
        """How many nodes of this size each host can take at the time last asked about, and the sum."""
        room = self._rooms.get(node)
        if room is None:   # (new: one vectorised pass over every row)
            if len(self._rooms) >= _MAX_SIZES:
                del self._rooms[next(iter(self._rooms))]
            room = self._rooms[node] = _Room(node, room_of(node, self.used, self.capacity), len(self._distinct))
        elif room.stale:
            # (the rows changed since, however many: the compiled recount of a row costs less than the
            # numpy copies of it a vectorised pass must bring up to date first)
            self._bring_room(room)
        return room

    def room_at(self, node: Resources, k: int, rows: list[int] | None = None, *,
                always: bool = False) -> int | None:
        """How many nodes of this size fit at the later key k (> the time brought to), over all rows or
        `rows`, worked out from the counts kept here and the rows whose window ends by k, without moving
        there; None when too many rows change by then (moving is then cheaper), unless `always`."""
        room = self.room(node)
        per_row = room.per_row
        most = -1   # (no limit)
        if rows is None:
            total = room.total
            if k < self._windows.earliest_until:
                return total
            if not always:
                most = max(_BULK_ROWS, len(self.names) // _BULK_SHARE)
        else:
            total = sum([per_row[i] for i in rows])
        change = self._room_later(self._timelines, self._windows.until, k, rows, most, per_row, self._groups,
                                  room.known, room.learn, self._vectors, self._capacities)
        return None if change is None else total + change

    def _bring_room(self, room: _Room) -> None:
        """Recount the rows changed since the room was last asked about."""
        values = self._values
        room.total += self._recount_rows(room.stale, values.code, self._groups, room.known, room.per_row,
                                         room.array, room.learn, values.used, self._capacities)
        room.stale = []

    def site_full(self) -> bool:
        """No CPU free on any host at the time last asked about."""
        return self._values.cpu_free_rows == 0
