"""The slot table: per host, capacity and the reservations over time, answering the scheduler's queries.

Structure, and why: each host keeps its usage as a *step function*: sorted breakpoints and, per breakpoint,
the usage in force until the next one. A breakpoint exists while at least one reservation starts or ends
there (reference counted), so the table never holds more than 2 breakpoints per reservation.

Representation (chosen for the caches: at 100k reservations, a random host's structures are not in them,
and every cache line a point query reaches through a pointer or a bisect probe is one more dependent miss):

- times become integer keys at the API boundary (`time_key`: microseconds since the Unix epoch, exact for
  every aware datetime); datetimes go in and come out, keys stay inside (and in `hoststates`);
- a host's breakpoints live in blocks of at most 2 x _LOAD. A block is *one* `array('q')`: its keys
  (contiguous machine integers: a bisect touches no Python object), then, in the same buffer and in
  reverse order, the codes of the usage from each key on. A point query reaches one object and one
  buffer and reads its answer's code next to the keys it bisected (the usage in a list of its own was a
  list header and a list buffer more: two more dependent misses). In parallel, per block, the usage
  vectors again (what the walks of add / remove / fits read: one list access per breakpoint), the
  datetimes as given, the reservation counts and the reference counts; `_mins` (the blocks' first keys)
  picks the block, and a host with a single block (up to 2 x _LOAD breakpoints) has it in
  `SharedUsage.single`, which `SlotTable.usage_at` reads without going through the timeline object;
- before bisecting keys that span several cache lines, a point query reads one key per line (a strided
  slice): those loads do not depend on each other, so the CPU overlaps their misses, where the bisect's
  probes, each waiting for the one before, miss one after the other. It costs about 0.1 µs when the
  block is cached and saves about 0.15 µs at 100k reservations, where it is not; with the codes next to
  the keys, it is what keeps a random host's point query at 100k under 2x (1.4-1.5x) the one at 10k in
  benchmarks/slottable.py (2.0x before: bisect misses, then the usage list's header and buffer);
- usage vectors are shared by value across the table (`SharedUsage`, which gives each a code): a plan
  has a few hundred distinct ones, so the code -> vector map, and the vectors, stay in the caches.

Costs, n the breakpoints of the host:

- point query (usage at t): one or two bisects, O(log n) (the strided read is bounded by the block size);
- add / remove a reservation: two breakpoint updates, each two bisects and an insertion into one block
  (bounded by 2 x _LOAD), plus one vector (and code) update per breakpoint *inside* the interval; that
  count is bounded by the reservations overlapping it, which a host's capacity keeps small, so the cost
  stays O(log n) as the table grows (benchmarks/slottable.py shows it);
- interval queries (fits, latest fit) walk only the breakpoints inside the interval.

Nothing is rebuilt from scratch per query (the reference rebuilt an availability window over
reservations x changepoints x nodes on every call). Per-host numpy arrays were the alternative: O(n)
inserts and a microsecond of call overhead per query; blocks of plain arrays keep inserts bounded and
every bisect in C.

Every query takes `excluding`: reservations to treat as gone, which answers "what if these leases were
preempted" without touching the table.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Collection, Iterable, Iterator, Mapping
from datetime import datetime, timedelta

from sortedcontainers import SortedKeyList

from orchestrator.model.errors import InconsistentSchedule, InvalidRequest
from orchestrator.model.reservations import Reservation
from orchestrator.model.resources import NOTHING, Resources, add, fits, sub
from orchestrator.model.timeutil import UTC
from orchestrator.planning.slottable.hoststates import HostStates

#: what `latest_fit` answers for a request that fits for ever
FOREVER = datetime.max.replace(tzinfo=UTC)


#: the table's internal time: whole microseconds since the Unix epoch, exact for every datetime
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: amounts whose usage transitions are remembered at once, and transitions per amount (beyond these
#: the memo starts again)
_MAX_AMOUNTS = 1024
_MICROSECOND = timedelta(microseconds=1)
#: keys below and above every time a datetime can express (the edges of a host's first and last segment)
BEFORE_ALL = -(1 << 63)
AFTER_ALL = (1 << 63) - 1

#: breakpoints per block: a block splits in two above 2 x _LOAD and merges with a neighbour below _LOAD / 4
_LOAD = 128
_MAX_BLOCK = 2 * _LOAD
_MIN_BLOCK = _LOAD // 4
#: the code (`SharedUsage`) of the first usage vector, NOTHING: above every key (time_key(datetime.max)
#: is below 2**58), so a block's codes sort after its keys
_CODE = 1 << 62
#: a point query first reads one key per cache line (8 keys) of a block of more breakpoints than this
_PREFETCH = 8
#: `SharedUsage` sweeps when it holds twice the vectors it kept at the last sweep plus this many
_SWEEP_SLACK = 1024

_new_tuple = tuple.__new__
#: `latest_fit`'s scan: the request does not fit even at the interval's start
_AT_START = object()


def time_key(t: datetime) -> int:
    """The internal key of an aware datetime: microseconds since the Unix epoch."""
    return (t - _EPOCH) // _MICROSECOND


def _plus(a: Resources, b: Resources) -> Resources:
    # resources.add without NamedTuple's Python-level __new__ (the same object, half the cost)
    return _new_tuple(Resources, (a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3], a[4] + b[4]))


def _minus(a: Resources, b: Resources) -> Resources:
    return _new_tuple(Resources, (a[0] - b[0], a[1] - b[1], a[2] - b[2], a[3] - b[3], a[4] - b[4]))


class SharedUsage:
    """The distinct usage vectors of a table, each under a code: blocks hold codes next to their keys,
    `vectors[code]` is the vector and `values[v]` (the shared vector equal to v, its code).

    A plan has few distinct vectors (sums of a few VM sizes): a few hundred objects instead of one per
    breakpoint, so a point query's answer is usually in the CPU caches. Vectors are keyed by value, so
    equal vectors are one object and one code (100 and 100.0 are equal: the answer may be either).
    Codes count up from `_CODE` (NOTHING's), above every key: a bisect over a whole block (keys, then
    codes) stops among its keys. Whenever the table has doubled since the last sweep, the vectors whose
    code no breakpoint of the registered `timelines` holds any more are dropped."""

    __slots__ = ("values", "vectors", "next", "limit", "timelines", "single", "added", "taken")

    def __init__(self) -> None:
        self.values: dict[Resources, tuple[Resources, int]] = {NOTHING: (NOTHING, _CODE)}
        self.vectors: dict[int, Resources] = {_CODE: NOTHING}
        self.next = _CODE + 1
        self.limit = _SWEEP_SLACK
        self.timelines: list[HostTimeline] = []
        #: host name -> its only block (None while it has none or several): `SlotTable.usage_at`
        self.single: dict[str, array | None] = {}
        # per amount, code -> (vector, code) of that usage plus (`added`) or minus (`taken`) the amount:
        # a reservation's walk then costs a lookup by integer per breakpoint, not a sum and its hash
        self.added: dict[Resources, dict[int, tuple[Resources, int]]] = {}
        self.taken: dict[Resources, dict[int, tuple[Resources, int]]] = {}

    def transitions(self, amount: Resources, adding: bool) -> dict[int, tuple[Resources, int]]:
        """The transitions for adding (or taking off) `amount` found so far (`step` finds the others)."""
        memos = self.added if adding else self.taken
        memo = memos.get(amount)
        if memo is None:
            if len(memos) >= _MAX_AMOUNTS:
                memos.clear()
            memo = memos[amount] = {}
        return memo

    def step(self, code: int, amount: Resources, adding: bool) -> tuple[Resources, int]:
        """(vector, code) of the usage under `code` plus or minus `amount`, remembered."""
        vector = self.vectors[code]
        used = _plus(vector, amount) if adding else _minus(vector, amount)
        entry = self.values.get(used) or self.add(used)
        memo = self.transitions(amount, adding)   # (after a sweep: a new one)
        if len(memo) >= _MAX_AMOUNTS:
            memo.clear()
        memo[code] = entry
        return entry

    def add(self, used: Resources) -> tuple[Resources, int]:
        """Give a code to a vector not in `values` yet (the caller looked); returns (it, its code)."""
        if len(self.values) >= self.limit:
            self._sweep()
        code = self.next
        self.next = code + 1
        self.vectors[code] = used
        entry = self.values[used] = used, code
        return entry

    def _sweep(self) -> None:
        held = {_CODE}
        for tl in self.timelines:
            for block in tl._blocks:
                held.update(block[len(block) >> 1:])
        values, vectors = self.values, self.vectors
        for used, (_, code) in list(values.items()):
            if code not in held:
                del values[used], vectors[code]
        self.limit = 2 * len(values) + _SWEEP_SLACK
        self.added.clear()   # (they name dropped codes)
        self.taken.clear()


class HostTimeline:
    """Usage of one host as a step function over time.

    The breakpoints live in blocks of at most 2 x _LOAD, in order. `_blocks[b]` is an `array('q')` of
    2 x n machine integers for block b's n breakpoints: their time keys in order, then, in *reverse*
    order, the codes (`SharedUsage`) of the usage from each to the next. Breakpoint j's code is at
    `block[~j]`; codes are above every key, so a bisect over the whole block stops among the keys, and
    the code before the position i it returns is `block[-i]`; splitting a block is one slice
    (`block[h:2n - h]` is a block) and merging two is one slice assignment. The parallel `_usage[b]`
    (the same vectors, for the walks: one list access per breakpoint), `_times[b]` (each as the datetime
    it was first given as), `_count[b]` (reservations in force there) and `_refs[b]` (reservations
    starting or ending there) hold the rest, and `_mins[b]` is block b's first key, so the block holding
    the last breakpoint at or before a time is one bisect away."""

    __slots__ = ("name", "capacity", "_mins", "_blocks", "_times", "_usage", "_count", "_refs", "_len",
                 "_k0", "_c0", "_shared", "_vectors", "_single", "_limits")

    def __init__(self, name: str, capacity: Resources, shared: SharedUsage | None = None):
        self.name = name
        self.capacity = capacity
        self._shared = shared if shared is not None else SharedUsage()
        self._shared.timelines.append(self)
        self._vectors = self._shared.vectors
        self._single = self._shared.single
        self._single[name] = None
        self._limits: tuple = ()   # (capacity, its fields + 1e-9): what `scan` compares with
        self._mins = array("q")
        self._blocks: list[array] = []
        self._times: list[list[datetime]] = []
        self._usage: list[list[Resources]] = []
        self._count: list[array] = []
        self._refs: list[array] = []
        self._len = 0
        # while there is exactly one block, it and its counts (else None): queries on a host of up to
        # 2 x _LOAD breakpoints skip the block level (fewer pointer hops, so fewer cache misses)
        self._k0: array | None = None
        self._c0: array | None = None

    # -- structure ------------------------------------------------------------------------------------
    def _blocks_changed(self) -> None:
        if len(self._blocks) == 1:
            self._k0 = self._single[self.name] = self._blocks[0]
            self._c0 = self._count[0]
        else:
            self._k0 = self._c0 = self._single[self.name] = None

    def _split(self, k: int, t: datetime) -> tuple[int, int]:
        """Make key k (time t) a breakpoint, or count one more reservation at it; returns its position."""
        mins = self._mins
        if not mins:
            mins.append(k)
            self._blocks.append(array("q", (k, _CODE)))
            self._times.append([t])
            self._usage.append([NOTHING])
            self._count.append(array("q", (0,)))
            self._refs.append(array("q", (1,)))
            self._len = 1
            self._blocks_changed()
            return 0, 0
        b = bisect_right(mins, k) - 1
        if b < 0:                        # before every breakpoint: first of the first block
            b = i = 0
            mins[0] = k
        else:
            block = self._blocks[b]
            i = bisect_left(block, k)    # >= 1: block[0] == mins[b] <= k
            if block[i] == k:
                self._refs[b][i] += 1
                return b, i
        self._new_breakpoint(b, i, k, t)
        self._len += 1
        if len(self._refs[b]) > _MAX_BLOCK:
            half = self._split_block(b)
            if i >= half:
                return b + 1, i - half
        return b, i

    def _new_breakpoint(self, b: int, i: int, k: int, t: datetime) -> None:
        """Put key k (time t) at position i of block b, the usage from it on being the one before it
        (none before the first breakpoint of all, which is position 0 of block 0)."""
        block = self._blocks[b]
        if i:
            code, used, held = block[-i], self._usage[b][i - 1], self._count[b][i - 1]
        else:
            code, used, held = _CODE, NOTHING, 0
        block.insert(len(block) - i, code)   # the code of the new breakpoint i, after that of i (reversed)
        block.insert(i, k)
        self._times[b].insert(i, t)
        self._usage[b].insert(i, used)
        self._count[b].insert(i, held)
        self._refs[b].insert(i, 1)

    def _split_block(self, b: int) -> int:
        block = self._blocks[b]
        n = len(block) >> 1
        half = n >> 1
        self._blocks.insert(b + 1, block[half:2 * n - half])    # keys from half on, then their codes
        del block[half:2 * n - half]
        for blocks in (self._times, self._usage, self._count, self._refs):
            block = blocks[b]
            blocks.insert(b + 1, block[half:])
            del block[half:]
        self._mins.insert(b + 1, self._blocks[b + 1][0])
        self._blocks_changed()
        return half

    def _unsplit(self, k: int) -> None:
        """One reservation fewer starts or ends at key k; the breakpoint goes with the last one."""
        mins = self._mins
        b = bisect_right(mins, k) - 1
        block = self._blocks[b]
        i = bisect_left(block, k)
        refs = self._refs[b]
        r = refs[i] - 1
        if r:
            refs[i] = r
            return
        self._len -= 1
        del block[~i], block[i], self._times[b][i], self._usage[b][i], self._count[b][i], refs[i]
        if not block:
            for blocks in (mins, self._blocks, self._times, self._usage, self._count, self._refs):
                del blocks[b]
            self._blocks_changed()
            return
        if not i:
            mins[b] = block[0]
        if len(refs) < _MIN_BLOCK and len(mins) > 1:
            a = b - 1 if b else b        # merge blocks a and a + 1
            left = self._blocks[a]
            n = len(left) >> 1
            left[n:n] = self._blocks[a + 1]   # its keys after the keys, its codes before the codes
            del self._blocks[a + 1]
            for blocks in (self._times, self._usage, self._count, self._refs):
                blocks[a] += blocks[a + 1]
                del blocks[a + 1]
            del mins[a + 1]
            self._blocks_changed()
            if len(self._refs[a]) > _MAX_BLOCK:
                self._split_block(a)

    def add(self, start: datetime, end: datetime, amount: Resources) -> None:
        self.add_keys(time_key(start), time_key(end), amount, start, end)

    def add_keys(self, ks: int, ke: int, amount: Resources, start: datetime, end: datetime) -> None:
        """`add` for times already converted to keys (ks < ke)."""
        if not self._len:
            # an empty host (on a small site, most hosts between two leases): its one block, built at once
            shared = self._shared
            entry = shared.transitions(amount, True).get(_CODE) or shared.step(_CODE, amount, True)
            self._mins.append(ks)
            self._blocks.append(array("q", (ks, ke, _CODE, entry[1])))
            self._times.append([start, end])
            self._usage.append([entry[0], NOTHING])
            self._count.append(array("q", (1, 0)))
            self._refs.append(array("q", (1, 1)))
            self._len = 2
            self._blocks_changed()
            return
        if self._k0 is not None:
            self._add_in_one_block(ks, ke, amount, start, end)
            return
        self._split(ke, end)
        b, i = self._split(ks, start)
        self._shift_until(b, i, ke, amount, True)

    def _shift_until(self, b: int, i: int, ke: int, amount: Resources, adding: bool) -> None:
        """`_shift` every breakpoint from position i of block b up to key ke (a breakpoint), block by block."""
        while True:
            n = len(self._refs[b])
            j = bisect_left(self._blocks[b], ke, i, n)
            self._shift(b, i, j, amount, adding)
            if j < n:
                return
            b += 1
            i = 0

    def _shift(self, b: int, i: int, j: int, amount: Resources, adding: bool) -> None:
        """Add `amount` to (or take it off) the usage from breakpoints i to j - 1 of block b: each code
        becomes the code of its usage plus or minus the amount, as remembered (`SharedUsage`)."""
        block, usage, count = self._blocks[b], self._usage[b], self._count[b]
        shared = self._shared
        memo = shared.transitions(amount, adding)
        one = 1 if adding else -1
        for m in range(i, j):
            entry = memo.get(block[~m])
            if entry is None:
                entry = shared.step(block[~m], amount, adding)
                memo = shared.transitions(amount, adding)
            usage[m], block[~m] = entry
            count[m] += one

    # A host with one block (up to 2 x _LOAD breakpoints: every host of a small site, most of a big one)
    # is changed in place by the two methods below: no block-level search, one pass. They do what
    # `_split`, the walk and `_unsplit` do for any number of blocks.
    def _add_in_one_block(self, ks: int, ke: int, amount: Resources, start: datetime, end: datetime) -> None:
        block = self._k0
        refs = self._refs[0]
        added = 0
        j = bisect_left(block, ke, 0, len(refs))
        if j < len(refs) and block[j] == ke:
            refs[j] += 1
        else:
            self._new_breakpoint(0, j, ke, end)
            added = 1
        i = bisect_left(block, ks, 0, j)
        if block[i] == ks:
            refs[i] += 1
        else:
            self._new_breakpoint(0, i, ks, start)
            added += 1
            j += 1
            if not i:
                self._mins[0] = ks
        self._shift(0, i, j, amount, True)   # the breakpoints in [ks, ke)
        if added:
            self._len += added
            if len(refs) > _MAX_BLOCK:
                self._split_block(0)

    def _remove_in_one_block(self, ks: int, ke: int, amount: Resources) -> None:
        block = self._k0
        times, usage, count, refs = self._times[0], self._usage[0], self._count[0], self._refs[0]
        i = bisect_left(block, ks, 0, len(refs))
        j = bisect_left(block, ke, i, len(refs))
        self._shift(0, i, j, amount, False)
        gone = 0
        for m in (j, i):                 # (the later one first: deleting it leaves i where it is)
            r = refs[m] - 1
            if r:
                refs[m] = r
            else:
                del block[~m], block[m], times[m], usage[m], count[m], refs[m]
                gone += 1
        if gone:
            self._len -= gone
            if not refs:
                for blocks in (self._mins, self._blocks, self._times, self._usage, self._count, self._refs):
                    del blocks[0]
                self._blocks_changed()
            else:
                self._mins[0] = block[0]

    def remove(self, start: datetime, end: datetime, amount: Resources) -> None:
        self.remove_keys(time_key(start), time_key(end), amount)

    def remove_keys(self, ks: int, ke: int, amount: Resources) -> None:
        """`remove` for times already converted to keys (ks < ke)."""
        if self._len == 2 and len(self._blocks) == 1:
            refs = self._refs[0]
            if refs[0] == 1 and refs[1] == 1:   # (then the host holds this reservation alone)
                for blocks in (self._mins, self._blocks, self._times, self._usage, self._count, self._refs):
                    del blocks[0:]
                self._len = 0
                self._blocks_changed()
                return
        if self._k0 is not None:
            self._remove_in_one_block(ks, ke, amount)
            return
        b = bisect_right(self._mins, ks) - 1
        self._shift_until(b, bisect_left(self._blocks[b], ks), ke, amount, False)
        self._unsplit(ks)
        self._unsplit(ke)

    # -- queries (by key) -------------------------------------------------------------------------------
    # Each finds the last breakpoint at or before k: one bisect over the block (after one over the blocks'
    # first keys when there are several), preceded, when its keys span several cache lines, by a strided
    # read of one key per line, and reads the usage code next to where the bisect ended.
    def usage_key(self, k: int) -> Resources:
        block = self._k0
        if block is None:
            b = bisect_right(self._mins, k)
            if not b:
                return NOTHING
            block = self._blocks[b - 1]
        n = len(block) >> 1
        if n > _PREFETCH:
            block[:n:8]
        i = bisect_right(block, k)
        return self._vectors[block[-i]] if i else NOTHING

    def state_key(self, k: int) -> tuple[Resources, int]:
        """(usage, number of reservations) at key k."""
        block = self._k0
        if block is None:
            b = bisect_right(self._mins, k)
            if not b:
                return NOTHING, 0
            block, count = self._blocks[b - 1], self._count[b - 1]
        else:
            count = self._c0
        n = len(block) >> 1
        if n > _PREFETCH:
            block[:n:8]
        i = bisect_right(block, k)
        return (self._vectors[block[-i]], count[i - 1]) if i else (NOTHING, 0)

    def window_key(self, k: int) -> tuple[Resources, int, int, int]:
        """(usage, reservation count) at key k and the keys [lo, hi) of the breakpoints around k between
        which they hold (BEFORE_ALL / AFTER_ALL where there is none)."""
        code, count, lo, hi = windows_at([self], [0], k)[0]
        return self._vectors[code], count, lo, hi

    def scan(self, k1: int, k2: int | None, request: Resources,
             relevant: list[tuple[int, int, Resources]] | None = None):
        """Walk the segments meeting [k1, k2) (k2 None: to the end) until `request` stops fitting:
        None if it fits in all, `_AT_START` if not even at k1, else the time of the breakpoint where
        it first does not. `relevant`: (start key, end key, amount) of reservations to treat as gone."""
        limits = self._limits
        if not limits or limits[0] is not self.capacity:
            cap = self.capacity
            limits = self._limits = (cap, cap[0] + 1e-9, cap[1] + 1e-9, cap[2] + 1e-9, cap[3] + 1e-9,
                                     cap[4] + 1e-9)
        _, c0, c1, c2, c3, c4 = limits
        r0, r1, r2, r3, r4 = request
        blocks, usage_ = self._blocks, self._usage
        nb = len(blocks)
        b = bisect_right(self._mins, k1) - 1
        if b < 0:
            b = i = 0
            used = NOTHING
        else:
            i = bisect_right(blocks[b], k1)
            used = usage_[b][i - 1]
        if relevant:
            used = sub(used, _excluded_amount(relevant, k1))
        # exactly resources.fits(used, request, cap), with the capacity sums hoisted out of the loop
        if not (used[0] + r0 <= c0 and used[1] + r1 <= c1 and used[2] + r2 <= c2
                and used[3] + r3 <= c3 and used[4] + r4 <= c4):
            return _AT_START
        if k2 is None:
            k2 = AFTER_ALL
        while b < nb:
            block, usage = blocks[b], usage_[b]
            for j in range(i, len(usage)):
                k = block[j]
                if k >= k2:
                    return None
                used = usage[j]
                if relevant:
                    used = sub(used, _excluded_amount(relevant, k))
                if not (used[0] + r0 <= c0 and used[1] + r1 <= c1 and used[2] + r2 <= c2
                        and used[3] + r3 <= c3 and used[4] + r4 <= c4):
                    return self._times[b][j]
            b += 1
            i = 0
        return None

    def _slices(self, k1: int, k2: int | None) -> list[tuple[int, int, int]]:
        """(block, first, last + 1) of the breakpoints strictly inside (k1, k2), block by block."""
        mins, blocks = self._mins, self._blocks
        nb = len(mins)
        b = bisect_right(mins, k1) - 1
        if b < 0:
            b = i = 0
        else:
            i = bisect_right(blocks[b], k1)
        out = []
        while b < nb:
            block = blocks[b]
            if k2 is not None and (b + 1 == nb or mins[b + 1] >= k2):
                j = bisect_left(block, k2)
                if j > i:
                    out.append((b, i, j))
                return out
            n = len(block) >> 1
            if i < n:
                out.append((b, i, n))
            b += 1
            i = 0
        return out

    def breakpoint_list(self, k1: int, k2: int | None) -> list[datetime]:
        """The breakpoints strictly inside (k1, k2), in order."""
        times_ = self._times
        return [t for b, i, j in self._slices(k1, k2) for t in times_[b][i:j]]

    def collect(self, k1: int, k2: int | None, into: dict[int, datetime]) -> None:
        """Add (key: time) of every breakpoint strictly inside (k1, k2) to `into`."""
        blocks, times_ = self._blocks, self._times
        for b, i, j in self._slices(k1, k2):
            into.update(zip(blocks[b][i:j], times_[b][i:j]))

    # -- queries (by datetime) --------------------------------------------------------------------------
    def window(self, t: datetime) -> tuple[Resources, int, datetime | None, datetime | None]:
        """(usage, reservation count) at t and the breakpoints around t between which they hold."""
        used, count, lo, hi = self.window_key(time_key(t))
        return used, count, self._time_of(lo), self._time_of(hi)

    def _time_of(self, k: int) -> datetime | None:
        """The datetime of breakpoint key k (None for BEFORE_ALL / AFTER_ALL)."""
        if k == BEFORE_ALL or k == AFTER_ALL:
            return None
        b = bisect_right(self._mins, k) - 1
        return self._times[b][bisect_left(self._blocks[b], k)]

    def usage_at(self, t: datetime) -> Resources:
        return self.usage_key(time_key(t))

    def state_at(self, t: datetime) -> tuple[Resources, int]:
        """(usage, number of reservations) at t, with one lookup."""
        return self.state_key(time_key(t))

    def count_at(self, t: datetime) -> int:
        return self.state_key(time_key(t))[1]

    def last_breakpoint(self) -> datetime | None:
        """After this time the host is empty."""
        return self._times[-1][-1] if self._times else None

    def segments(self, t1: datetime, t2: datetime | None) -> Iterator[tuple[datetime, Resources]]:
        """(segment start, usage) for every segment meeting [t1, t2); the first starts at t1."""
        k1 = time_key(t1)
        yield t1, self.usage_key(k1)
        times_, usage_ = self._times, self._usage
        for b, i, j in self._slices(k1, None if t2 is None else time_key(t2)):
            yield from zip(times_[b][i:j], usage_[b][i:j])

    def breakpoints(self, t1: datetime, t2: datetime | None = None) -> Iterator[datetime]:
        """Breakpoints strictly inside (t1, t2), in order."""
        return iter(self.breakpoint_list(time_key(t1), None if t2 is None else time_key(t2)))

    def items(self) -> Iterator[tuple[datetime, Resources]]:
        """Every (breakpoint, usage from there), in order."""
        for times, usage in zip(self._times, self._usage):
            yield from zip(times, usage)

    def __len__(self) -> int:
        return self._len


def windows_at(timelines: list[HostTimeline], rows: list[int], k: int) -> list[tuple[int, int, int, int]]:
    """`HostTimeline.window_key` for many hosts at once, with the usage as its code (`SharedUsage`):
    per row, (code, reservation count, lo, hi) of timelines[row] at key k. The host states refresh
    their rows with it: one call for all of them, and integer codes they key their memos by."""
    out = []
    append = out.append
    for r in rows:
        tl = timelines[r]
        block = tl._k0
        if block is not None:   # (one block: the usual small host)
            n = len(block) >> 1
            if n > _PREFETCH:
                block[:n:8]
            i = bisect_right(block, k)
            following = block[i]
            if following >= _CODE:
                following = AFTER_ALL
            append((block[-i], tl._c0[i - 1], block[i - 1], following) if i else (_CODE, 0, BEFORE_ALL, following))
            continue
        mins = tl._mins
        b = bisect_right(mins, k) - 1
        if b < 0:
            append((_CODE, 0, BEFORE_ALL, mins[0] if mins else AFTER_ALL))
            continue
        block = tl._blocks[b]
        n = len(block) >> 1
        if n > _PREFETCH:
            block[:n:8]
        i = bisect_right(block, k)        # >= 1
        following = block[i]
        if following >= _CODE:
            following = mins[b + 1] if b + 1 < len(mins) else AFTER_ALL
        append((block[-i], tl._count[b][i - 1], block[i - 1], following))
    return out


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


def _relevant_keys(relevant: list[Reservation], host: str) -> list[tuple[int, int, Resources]]:
    return [(time_key(r.start), time_key(r.end), r.resources[host]) for r in relevant]


def _excluded_amount(relevant: list[tuple[int, int, Resources]], k: int) -> Resources:
    total = NOTHING
    for start, end, amount in relevant:
        if start <= k < end:
            total = add(total, amount)
    return total


class SlotTable:
    """All hosts' timelines plus indexes over the reservations (by id, by lease, by end time)."""

    def __init__(self, hosts: Mapping[str, Resources] | Iterable[tuple[str, Resources]] = ()):
        self._hosts: dict[str, HostTimeline] = {}
        self._reservations: dict[int, Reservation] = {}
        #: lease id -> its reservation, or {id: reservation} when it has several (most have one)
        self._by_lease: dict[int, Reservation | dict[int, Reservation]] = {}
        self._shared = SharedUsage()
        self._by_end: SortedKeyList = SortedKeyList(key=lambda r: (r.end, r.id))
        self._next_id = 1
        self._largest: Resources | None = None
        self._single = self._shared.single
        self._vectors = self._shared.vectors
        #: every host's usage at the mapper's query times, kept valid incrementally; two snapshots so
        #: queries "now" and queries at a future AR's start do not keep invalidating each other
        self._snapshots = (HostStates(windows_at, self._vectors), HostStates(windows_at, self._vectors))
        self._states_key: tuple[datetime | None, int] = (None, 0)
        #: the last (time, key) converted for an interval's start and end: the mapper asks `fits` for
        #: host after host with the same two datetimes (one tuple each, so a reader never mixes two)
        self._keys: list[tuple] = [(None, 0), (None, 0)]   # the last (start, key) and (end, key) asked
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
        self._hosts[name] = HostTimeline(name, capacity, self._shared)
        self._largest = None
        for snapshot in self._snapshots:
            snapshot.add_host(self._hosts[name])

    def remove_host(self, name: str) -> None:
        timeline = self._timeline(name)
        if len(timeline):
            raise InvalidRequest("host", f"{name!r} still has reservations")
        del self._hosts[name]
        self._shared.timelines.remove(timeline)
        del self._shared.single[name]
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
        if not rr.resources.keys() <= self._hosts.keys():
            for host in rr.resources:
                self._timeline(host)   # (names the unknown host)
        if not rr.id:   # a reservation taken out and put back keeps its id
            rr.id = self._next_id
            self._next_id += 1
        else:           # never hand that id out again (e.g. an id this table did not issue)
            self._next_id = max(self._next_id, rr.id + 1)
        self._insert(rr)
        return rr

    def _insert(self, rr: Reservation) -> None:
        start, end = rr.start, rr.end
        if end > start:
            ks, ke = time_key(start), time_key(end)
            hosts = self._hosts
            for host, amount in rr.resources.items():
                hosts[host].add_keys(ks, ke, amount, start, end)
            for snapshot in self._snapshots:
                snapshot.changed(rr.resources, ks, ke, True)
        self._reservations[rr.id] = rr
        by_lease = self._by_lease
        held = by_lease.get(rr.lease_id)
        if held is None:
            by_lease[rr.lease_id] = rr
        elif type(held) is dict:
            held[rr.id] = rr
        else:
            by_lease[rr.lease_id] = {held.id: held, rr.id: rr}
        self._by_end.add(rr)

    def remove(self, rr: Reservation) -> None:
        if self._reservations.get(rr.id) is not rr:
            raise InconsistentSchedule(f"reservation {rr!r} is not in the slot table")
        self._by_end.remove(rr)
        if rr.end > rr.start:
            ks, ke = time_key(rr.start), time_key(rr.end)
            hosts = self._hosts
            for host, amount in rr.resources.items():
                hosts[host].remove_keys(ks, ke, amount)
            for snapshot in self._snapshots:
                snapshot.changed(rr.resources, ks, ke, False)
        del self._reservations[rr.id]
        held = self._by_lease[rr.lease_id]
        if held is rr:
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
        if type(held) is not dict:
            return [held]
        return sorted(held.values(), key=lambda r: (r.start, r.id))

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
        try:
            block = self._single[host]
        except KeyError:
            raise InvalidRequest("host", f"unknown host {host!r}") from None
        k = (t - _EPOCH) // _MICROSECOND   # time_key(t), inline: this is the point query
        if block is not None:            # HostTimeline.usage_key, inline: one object fewer to reach
            n = len(block) >> 1
            if n > _PREFETCH:
                block[:n:8]
            i = bisect_right(block, k)
            used = self._vectors[block[-i]] if i else NOTHING
        else:
            used = self._hosts[host].usage_key(k)
        if excluding:
            relevant = _relevant(excluding, host, t, None, self._reservations)
            if relevant:
                used = sub(used, _excluded_amount(_relevant_keys(relevant, host), k))
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
        forever returns `datetime.max` in UTC."""
        if t2 is not None and t2 < t1:
            raise InvalidRequest("end", f"interval ends ({t2}) before it starts ({t1})")
        tl, relevant = self._scan_setup(host, t1, t2 if t2 is None or t2 > t1 else None, excluding)
        stop = tl.scan(self._key(t1, 0), None if t2 is None else self._key(t2, 1), request, relevant)
        if stop is None:
            return t2 if t2 is not None else FOREVER
        return None if stop is _AT_START else stop

    def _scan_setup(self, host: str, t1: datetime, t2: datetime | None, excluding: Collection[Reservation]):
        """The host's timeline, and the excluded reservations that matter over [t1, t2) (by key)."""
        try:
            tl = self._hosts[host]
        except KeyError:
            raise InvalidRequest("host", f"unknown host {host!r}") from None
        relevant = None
        if excluding:
            relevant = _relevant(excluding, host, t1, t2, self._reservations)
            relevant = _relevant_keys(relevant, host) if relevant else None
        return tl, relevant

    # the mapper asks host after host about the same interval: its two keys are remembered
    def _key(self, t: datetime, slot: int) -> int:
        memo = self._keys[slot]
        if memo[0] is t:
            return memo[1]
        k = (t - _EPOCH) // _MICROSECOND
        self._keys[slot] = (t, k)
        return k

    def _states(self, t: datetime) -> HostStates:
        """The snapshot for t, brought to t. Queries at `present` (the scheduler's next schedulable time)
        use one snapshot, which moves forward with time and stays almost valid; others (an AR's start,
        backfilling points) use the second, so they never disturb the first. When the present one is
        closer to t, the second starts from a copy of it: fewer hosts to bring up to date."""
        present, elsewhere = self._snapshots
        memo = self._states_key
        if memo[0] is t:   # (asked again and again about the same time object: the present, a point)
            k = memo[1]
        else:
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

    def state_arrays(self, t: datetime) -> tuple[list[str], "np.ndarray", "np.ndarray", "np.ndarray", tuple]:
        """(host names, usage rows, capacity rows, reservation counts, version) of every host at t;
        equal versions mean equal contents."""
        snapshot = self._states(t)
        return snapshot.names, snapshot.used, snapshot.capacity, snapshot.count, (id(snapshot), snapshot.version)

    def states_at(self, t: datetime) -> HostStates:
        """The host states behind `state_arrays`, brought to t: with them, per node size, how many such
        nodes each host can take, and whether any CPU is free (`HostStates.room`, `site_full`). Read only."""
        return self._states(t)

    def room_total(self, node: Resources, t: datetime, hosts: Collection[str] | None = None) -> int:
        """How many nodes of this size fit at the instant t over all hosts (or `hosts`): the instant
        check the queue and the mapper make at the present, when a suspended lease's images could have
        moved, at backfilling points. After the present it is worked out from the present's snapshot
        and the hosts whose usage changes in between, so these checks do not drag the second snapshot
        back and forth (it stays where the mappings at other times need it)."""
        present = self.present
        if present is not None and t > present:
            snapshot = self._states(present)
            rows = None if hosts is None else [snapshot.row(h) for h in hosts]
            total = snapshot.room_at(node, time_key(t), rows)
            if total is not None:
                return total
        snapshot = self._states(t)
        room = snapshot.room(node)
        if hosts is None:
            return room.total
        return sum(room.per_row[snapshot.row(h)] for h in hosts)

    def unchanged_until(self, t: datetime) -> "np.ndarray":
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
                relevant = _relevant(excluding, h, t, None, self._reservations)
                if relevant:
                    used = sub(used, _excluded_amount(_relevant_keys(relevant, h), k))
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

