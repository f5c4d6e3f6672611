"""One host's usage over time, as a step function: sorted breakpoints and the usage from each to the next.

A breakpoint exists while at least one reservation starts or ends there (reference counted), so a host
never holds more than 2 breakpoints per reservation. The breakpoints live in blocks (`blocks.py`) of at
most 2 x _LOAD: inserting one moves at most a block, and every search is a bisect in C over machine
integers. Beside each block, in Python lists and arrays of the same length, are what the walks read one
per breakpoint: the usage vectors again (one list access, where the block holds their codes), the
datetimes as first given, the reservations in force and the reservations starting or ending there.

Costs, n the breakpoints of the host: a point query is one or two bisects; adding or removing a
reservation is two breakpoint updates (each two bisects and an insertion into one block) plus one usage
update per breakpoint *inside* its interval, which a host's capacity keeps few; interval queries (fits,
latest fit) walk only the breakpoints inside the interval.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from typing import Any
from datetime import datetime

from orchestrator.model.resources import NOTHING, Resources, sub
from orchestrator.model.tolerance import EPSILON
from orchestrator.planning.slottable import blocks as block_ops
from orchestrator.planning.slottable.blocks import bisect_keys
from orchestrator.planning.slottable.excluding import Excluded, excluded_amount
from orchestrator.planning.slottable.keys import AFTER_ALL, BEFORE_ALL, NOTHING_CODE, time_key
from orchestrator.planning.slottable.shared_usage import Entry, SharedUsage

#: breakpoints per block: a block splits in two above 2 x _LOAD and merges with a neighbour below
#: _LOAD / 4. A few hundred keys are a few cache lines of bisect, and an insertion moves a few KiB
_LOAD = 128
_MAX_BLOCK = 2 * _LOAD
_MIN_BLOCK = _LOAD // 4

#: `scan`'s answer when the request does not fit even at the interval's start
AT_START = object()


#: what `timeline.windows_at` answers per host at a key k: (the code of its usage at k, the number of
#: reservations in force, and the keys since and until which both hold: the breakpoints around k, or
#: BEFORE_ALL / AFTER_ALL where there is none). A plain tuple, unpacked by name where it is read: one is
#: built per host whenever the host states refresh, and a NamedTuple is built through a Python-level __new__.
Window = tuple[int, int, int, int]


class HostTimeline:
    """Usage of one host as a step function over time.

    Block b's breakpoints: `_blocks[b]` (their keys and usage codes, see `blocks.py`), `_usage[b]` (the
    same vectors, for the walks), `_times[b]` (each as the datetime it was first given as), `_count[b]`
    (reservations in force from there) and `_refs[b]` (reservations starting or ending there). `_mins[b]`
    is block b's first key, so the block holding the last breakpoint at or before a time is one bisect
    away."""

    __slots__ = ("name", "capacity", "_mins", "_blocks", "_times", "_usage", "_count", "_refs", "_len",
                 "_k0", "_c0", "_shared", "_vectors", "_single", "_fit_limits")

    def __init__(self, name: str, capacity: Resources, shared: SharedUsage | None = None):
        self.name = name
        self.capacity = capacity
        self._shared = shared if shared is not None else SharedUsage()
        self._shared.timelines.append(self)
        self._vectors = self._shared.vectors
        self._single = self._shared.single
        self._single[name] = None
        #: (capacity, each of its fields + EPSILON): what `scan` compares with, for that capacity object
        self._fit_limits: tuple = ()
        self._mins = array("q")
        self._blocks: list[array] = []
        self._times: list[list[datetime]] = []
        self._usage: list[list[Resources]] = []
        self._count: list[array] = []
        self._refs: list[array] = []
        self._len = 0
        # while there is exactly one block, it (`_k0`) and its counts (`_c0`), else None: queries on a host
        # of up to 2 x _LOAD breakpoints skip the block level (fewer pointer hops, so fewer cache misses)
        self._k0: array | None = None
        self._c0: array | None = None

    def detach(self) -> None:
        """Leave the table's shared registries (the host is gone from the table)."""
        self._shared.timelines.remove(self)
        del self._single[self.name]

    # -- structure ------------------------------------------------------------------------------------
    def _blocks_changed(self) -> None:
        if len(self._blocks) == 1:
            self._k0 = self._single[self.name] = self._blocks[0]
            self._c0 = self._count[0]
        else:
            self._k0 = self._c0 = self._single[self.name] = None

    def _columns(self) -> tuple[array, list, list, list, list, list]:
        """Every per-block list (`_mins` holds one key per block), for taking a block out of all at once."""
        return self._mins, self._blocks, self._times, self._usage, self._count, self._refs

    def _clear(self) -> None:
        del self._mins[:], self._blocks[:], self._times[:], self._usage[:], self._count[:], self._refs[:]
        self._len = 0
        self._k0 = self._c0 = self._single[self.name] = None

    def _hold_only(self, ks: int, ke: int, used: Resources, code: int, start: datetime, end: datetime) -> None:
        """On an empty host: hold one reservation over [ks, ke), its usage `used` (code `code`): the one
        block, built at once (on a small site, most hosts between two leases are empty)."""
        block = block_ops.new_block((ks, ke), (code, NOTHING_CODE))
        counts = array("q", (1, 0))
        self._mins.append(ks)
        self._blocks.append(block)
        self._times.append([start, end])
        self._usage.append([used, NOTHING])
        self._count.append(counts)
        self._refs.append(array("q", (1, 1)))
        self._len = 2
        self._k0 = self._single[self.name] = block
        self._c0 = counts

    def _split(self, k: int, t: datetime) -> tuple[int, int]:
        """Make key k (time t) a breakpoint, or count one more reservation at it; returns its position."""
        mins = self._mins
        if not mins:
            mins.append(k)
            self._blocks.append(block_ops.new_block((k,), (NOTHING_CODE,)))
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
            code, used, held = block_ops.code_of(block, i - 1), self._usage[b][i - 1], self._count[b][i - 1]
        else:
            code, used, held = NOTHING_CODE, NOTHING, 0
        block_ops.insert(block, i, k, code)
        self._times[b].insert(i, t)
        self._usage[b].insert(i, used)
        self._count[b].insert(i, held)
        self._refs[b].insert(i, 1)

    def _split_block(self, b: int) -> int:
        """Split block b in two halves; returns the size of the first."""
        half = len(self._refs[b]) >> 1
        self._blocks.insert(b + 1, block_ops.split_off(self._blocks[b], half))
        columns: tuple[list[Any], ...] = (self._times, self._usage, self._count, self._refs)
        for column in columns:
            block = column[b]
            column.insert(b + 1, block[half:])
            del block[half:]
        self._mins.insert(b + 1, self._blocks[b + 1][0])
        self._blocks_changed()
        return half

    def _merge_with_next(self, a: int) -> None:
        """Append block a + 1 to block a (splitting the result again if it is too big)."""
        block_ops.append(self._blocks[a], self._blocks[a + 1])
        del self._blocks[a + 1]
        columns: tuple[list[Any], ...] = (self._times, self._usage, self._count, self._refs)
        for column in columns:
            column[a] += column[a + 1]
            del column[a + 1]
        del self._mins[a + 1]
        self._blocks_changed()
        if len(self._refs[a]) > _MAX_BLOCK:
            self._split_block(a)

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
        block_ops.delete(block, i)
        del self._times[b][i], self._usage[b][i], self._count[b][i], refs[i]
        if not block:
            for column in self._columns():
                del column[b]
            self._blocks_changed()
            return
        if not i:
            mins[b] = block[0]
        if len(refs) < _MIN_BLOCK and len(mins) > 1:
            self._merge_with_next(b - 1 if b else b)

    def add(self, start: datetime, end: datetime, amount: Resources) -> None:
        self.add_keys(time_key(start), time_key(end), amount, start, end)

    def add_keys(self, ks: int, ke: int, amount: Resources, start: datetime, end: datetime) -> None:
        """`add` for times already converted to keys (ks < ke)."""
        if not self._len:
            shared = self._shared
            used, code = (shared.transitions(amount, True).get(NOTHING_CODE)
                          or shared.step(NOTHING_CODE, amount, True))
            self._hold_only(ks, ke, used, code, start, end)
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
        codes, usage, counts = self._blocks[b], self._usage[b], self._count[b]
        shared = self._shared
        memo = shared.transitions(amount, adding)
        one = 1 if adding else -1
        last = len(codes) - 1            # breakpoint m's code is at last - m (blocks.py: codes run backwards)
        for m in range(i, j):
            at = last - m
            entry = memo.get(codes[at])
            if entry is None:
                entry = shared.step(codes[at], amount, adding)
                memo = shared.transitions(amount, adding)
            usage[m] = entry[0]
            codes[at] = entry[1]
            counts[m] += one

    # A host with one block (up to 2 x _LOAD breakpoints: every host of a small site, most of a big one)
    # is changed in place by the two methods below: no block-level search, one pass. They do what
    # `_split`, the walk and `_unsplit` do for any number of blocks.
    def _add_in_one_block(self, ks: int, ke: int, amount: Resources, start: datetime, end: datetime) -> None:
        block = self._k0
        assert block is not None   # (called on a host of one block)
        refs = self._refs[0]
        n = len(refs)
        added = 0
        j = bisect_left(block, ke, 0, n)
        if j < n and block[j] == ke:
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
        assert block is not None   # (called on a host of one block)
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
                block_ops.delete(block, m)
                del times[m], usage[m], count[m], refs[m]
                gone += 1
        if gone:
            self._len -= gone
            if not refs:
                self._clear()
            else:
                self._mins[0] = block[0]

    def remove(self, start: datetime, end: datetime, amount: Resources) -> None:
        self.remove_keys(time_key(start), time_key(end), amount)

    def remove_keys(self, ks: int, ke: int, amount: Resources) -> None:
        """`remove` for times already converted to keys (ks < ke)."""
        if self._len == 2 and len(self._blocks) == 1:
            refs = self._refs[0]
            if refs[0] == 1 and refs[1] == 1:   # (then the host holds this reservation alone)
                self._clear()
                return
        if self._k0 is not None:
            self._remove_in_one_block(ks, ke, amount)
            return
        b = bisect_right(self._mins, ks) - 1
        self._shift_until(b, bisect_left(self._blocks[b], ks), ke, amount, False)
        self._unsplit(ks)
        self._unsplit(ke)

    def collect_codes(self, into: set[int]) -> None:
        """Add the usage code of every breakpoint to `into` (`SharedUsage`'s sweep keeps those)."""
        for block in self._blocks:
            into.update(block_ops.codes(block))

    # -- queries (by key) -------------------------------------------------------------------------------
    # Each finds the last breakpoint at or before k (`bisect_keys` over its block, after a bisect of the
    # blocks' first keys when there are several) and reads its usage code next to the keys: `block[-i]`.
    def usage_key(self, k: int) -> Resources:
        block = self._k0
        if block is None:
            b = bisect_right(self._mins, k)
            if not b:
                return NOTHING
            block = self._blocks[b - 1]
        i = bisect_keys(block, k)
        return self._vectors[block[-i]] if i else NOTHING

    def state_key(self, k: int) -> tuple[Resources, int]:
        """(usage, number of reservations) at key k."""
        one = self._k0
        if one is None:
            b = bisect_right(self._mins, k)
            if not b:
                return NOTHING, 0
            block, counts = self._blocks[b - 1], self._count[b - 1]
        else:
            c0 = self._c0
            assert c0 is not None   # (a host of one block has its counts beside it)
            block, counts = one, c0
        i = bisect_keys(block, k)
        return (self._vectors[block[-i]], counts[i - 1]) if i else (NOTHING, 0)

    def window_key(self, k: int) -> tuple[Resources, int, int, int]:
        """(usage, reservation count) at key k and the keys [since, until) of the breakpoints around k
        between which they hold (BEFORE_ALL / AFTER_ALL where there is none)."""
        [(code, count, since, until)] = windows_at([self], [0], k)
        return self._vectors[code], count, since, until

    def scan(self, k1: int, k2: int | None, request: Resources,
             relevant: list[Excluded] | None = None) -> datetime | object | None:
        """Walk the segments meeting [k1, k2) (k2 None: to the end) until `request` stops fitting:
        None if it fits in all, `AT_START` if not even at k1, else the time of the breakpoint where
        it first does not. `relevant`: (start key, end key, amount) of reservations to treat as gone."""
        limits = self._fit_limits
        if not limits or limits[0] is not self.capacity:
            cap = self.capacity
            limits = self._fit_limits = (cap, cap[0] + EPSILON, cap[1] + EPSILON, cap[2] + EPSILON,
                                         cap[3] + EPSILON, cap[4] + EPSILON)
        _, c0, c1, c2, c3, c4 = limits
        r0, r1, r2, r3, r4 = request
        blocks, usage_ = self._blocks, self._usage
        nb = len(blocks)
        b = bisect_right(self._mins, k1) - 1
        if b < 0:
            b = i = 0
            used = NOTHING
        else:
            i = bisect_keys(blocks[b], k1)
            used = usage_[b][i - 1]
        if relevant:
            used = sub(used, excluded_amount(relevant, k1))
        # exactly resources.fits(used, request, cap), with the capacity sums hoisted out of the loop
        if not _fits(used, r0, r1, r2, r3, r4, c0, c1, c2, c3, c4):
            return AT_START
        end = AFTER_ALL if k2 is None else k2
        while b < nb:
            keys, usage = blocks[b], usage_[b]
            for j in range(i, len(usage)):
                k = keys[j]
                if k >= end:
                    return None
                used = usage[j]
                if relevant:
                    used = sub(used, excluded_amount(relevant, k))
                if not _fits(used, r0, r1, r2, r3, r4, c0, c1, c2, c3, c4):
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
            i = bisect_keys(blocks[b], k1)
        out = []
        while b < nb:
            block = blocks[b]
            if k2 is not None and (b + 1 == nb or mins[b + 1] >= k2):
                j = bisect_left(block, k2)
                if j > i:
                    out.append((b, i, j))
                return out
            n = block_ops.size(block)
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
        used, count, since, until = self.window_key(time_key(t))
        return used, count, self._time_of(since), self._time_of(until)

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


def add_on_hosts(held: Iterable[tuple[HostTimeline, Resources]], ks: int, ke: int,
                 start: datetime, end: datetime) -> None:
    """`add_keys` of one reservation on each of its hosts (timeline, amount there), in one loop: a
    reservation of a big lease holds a hundred hosts or more, most of them empty or of one block,
    and these are changed without going through `add_keys` (an empty host's usage code is looked up
    once per amount)."""
    last_amount: Resources | None = None
    entry: Entry = (NOTHING, NOTHING_CODE)
    for tl, amount in held:
        if tl._len:
            if tl._k0 is not None:
                tl._add_in_one_block(ks, ke, amount, start, end)
            else:
                tl.add_keys(ks, ke, amount, start, end)
            continue
        if amount is not last_amount:
            shared = tl._shared
            entry = (shared.transitions(amount, True).get(NOTHING_CODE)
                     or shared.step(NOTHING_CODE, amount, True))
            last_amount = amount
        tl._hold_only(ks, ke, entry[0], entry[1], start, end)


def remove_on_hosts(held: Iterable[tuple[HostTimeline, Resources]], ks: int, ke: int) -> None:
    """`remove_keys` of one reservation from each of its hosts (timeline, amount there)."""
    for tl, amount in held:
        tl.remove_keys(ks, ke, amount)


def _fits(used: Resources, r0: float, r1: float, r2: float, r3: float, r4: float,
          c0: float, c1: float, c2: float, c3: float, c4: float) -> bool:
    """`resources.fits(used, request, capacity)`, given the request's fields and the capacity's plus EPSILON."""
    u0, u1, u2, u3, u4 = used
    return u0 + r0 <= c0 and u1 + r1 <= c1 and u2 + r2 <= c2 and u3 + r3 <= c3 and u4 + r4 <= c4


def windows_at(timelines: list[HostTimeline], rows: list[int], k: int) -> list[Window]:
    """`window_key` for many hosts at once (timelines[row] for each of `rows`), with the usage as its
    code: the host states refresh their rows with one call for all of them, and key their memos by
    the integer codes."""
    out: list[Window] = []
    append = out.append
    strided_read_above, keys_per_line = block_ops.STRIDED_READ_ABOVE, block_ops.KEYS_PER_LINE
    for r in rows:
        tl = timelines[r]
        block = tl._k0
        if block is not None:   # (one block: the usual small host)
            counts = tl._c0
            assert counts is not None
            after_block = AFTER_ALL
        else:
            mins = tl._mins
            b = bisect_right(mins, k) - 1
            if b < 0:
                append((NOTHING_CODE, 0, BEFORE_ALL, mins[0] if mins else AFTER_ALL))
                continue
            block, counts = tl._blocks[b], tl._count[b]
            after_block = mins[b + 1] if b + 1 < len(mins) else AFTER_ALL
        # bisect_keys(block, k), inline: this loop runs once per host
        keys = block
        n = len(keys) >> 1
        if n > strided_read_above:
            block[:n:keys_per_line]
        i = bisect_right(block, k)
        following = keys[i] if i < n else after_block
        if i:
            append((keys[-i], counts[i - 1], keys[i - 1], following))
        else:
            append((NOTHING_CODE, 0, BEFORE_ALL, following))
    return out
