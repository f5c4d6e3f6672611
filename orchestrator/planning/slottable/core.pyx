# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The slot table's compiled core: `HostTimeline`, one host's usage over time as a step function;
`add_on_hosts` and `remove_on_hosts`, the same for many hosts in one call, which answer the hosts'
rows (with `mark_rows`, `unmark_rows` and `narrow_windows`, the host states' note of a change on those
rows); `refresh_rows`, the host states' refresh of their rows from these timelines, with their per-row
loops over those rows (`recount_rows`, `room_later`, `rows_alike`); `alike_walk` and `steady_head`, the
mapper's walk of alike nodes over them; `time_key`, the key of a time (`keys.time_key`), asked for every
time the table is given.

This file and `core_rows.pxi`, which it includes (the loops over many hosts' rows), are their only
source. A deliberately naive reference with the same interface, in plain Python
(`tests/reference/core.py`), says what each answers; the slot-table, host-state and mapper tests run
against both (`SlotTable(core=...)`), and the property tests compare them on random edits.

A timeline keeps, per host, four C arrays of one entry per breakpoint, in key order: the key, the usage
code from there on (`SharedUsage`), the reservations in force from there and the reservations starting or
ending there; beside them a Python list of the datetimes as first given. A breakpoint exists while at
least one reservation starts or ends there. A host holds few breakpoints (two per reservation at most,
and a host's capacity keeps its reservations few at any time), so one sorted run per host, moved up or
down by `memmove` on an insertion or deletion, is enough.

Why compiled: a big lease holds a hundred hosts or more, and each of its reservations is put on and taken
off every one of them, each candidate host's timeline is scanned, and each host's state is read whenever
the table's snapshots move. In Python, those per-host steps are the bulk of a large simulation; here they
are loops over machine integers. Usage vectors are read only through their codes (`SharedUsage.vectors`),
so answers are the shared objects themselves.
"""

from libc.stdlib cimport free, realloc
from cpython.datetime cimport (datetime_day, datetime_hour, datetime_microsecond, datetime_minute,
                              datetime_month, datetime_second, datetime_tzinfo, datetime_year, import_datetime)
from libc.string cimport memmove
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.list cimport PyList_GET_ITEM, PyList_Insert
from cpython.tuple cimport PyTuple_GET_ITEM

from orchestrator.model.resources import NOTHING
from orchestrator.model.resources import scale as _scale
from orchestrator.model.resources import sub as _sub
from orchestrator.model.tolerance import EPSILON
from orchestrator.planning.slottable.excluding import excluded_amount
from orchestrator.planning.slottable.keys import AT_START
from orchestrator.planning.slottable.keys import NOTHING_CODE as _NOTHING_CODE
from orchestrator.planning.slottable.keys import time_key as _time_key_of
from orchestrator.planning.slottable.shared_usage import SharedUsage

ctypedef long long key_t

import_datetime()
from datetime import datetime as _datetime, timezone as _timezone
cdef object _UTC = _timezone.utc

cdef key_t BEFORE_ALL = -(1 << 63)
cdef key_t AFTER_ALL = (1 << 63) - 1
cdef key_t NOTHING_CODE = _NOTHING_CODE


cdef inline Py_ssize_t _upper(const key_t *keys, Py_ssize_t lo, Py_ssize_t hi, key_t k) noexcept nogil:
    """How many of keys[lo:hi] are at or before k, plus lo (`bisect_right`)."""
    cdef Py_ssize_t mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] <= k:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline Py_ssize_t _lower(const key_t *keys, Py_ssize_t lo, Py_ssize_t hi, key_t k) noexcept nogil:
    """The first position in keys[lo:hi] whose key is at or after k (`bisect_left`)."""
    cdef Py_ssize_t mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < k:
            lo = mid + 1
        else:
            hi = mid
    return lo


# The last few transitions one change found (old usage code -> new), for its next breakpoints and hosts:
# a big lease's hosts usually hold the same usage where its reservation goes, so the change's walk mostly
# asks the same one or two codes again, and an integer compare here spares a dict lookup by a boxed integer.
# Valid for one amount, added or taken off, and only until `SharedUsage.step` runs (a sweep may drop codes).
cdef enum:
    _STEPS = 4

cdef struct _Steps:
    int n, next
    key_t old[_STEPS]
    key_t new[_STEPS]


# Whether the request fits next to the last few usage codes a walk of `_scan`s met, on hosts of one
# capacity object (`cap`, compared by identity only): host after host, the mapper's walk meets the same
# few usages, and a compare of integers here spares reading a vector's five floats. Valid for one request.
cdef struct _Fits:
    int n, next
    void *cap
    key_t code[_STEPS]
    bint fit[_STEPS]


cdef key_t *_grown(key_t *column, Py_ssize_t room) except NULL:
    cdef void *p = realloc(column, room * sizeof(key_t))
    if p == NULL:
        raise MemoryError()
    return <key_t *>p


cpdef object time_key(t):
    """`keys.time_key`, read from the datetime's fields when it is a plain datetime in UTC (the times the
    table is given: its two keys per reservation put in or taken off, every snapshot's time); any other
    aware datetime goes through the plain definition, which also refuses a naive one."""
    if type(t) is not _datetime or datetime_tzinfo(t) is not _UTC:
        return _time_key_of(t)
    cdef long long y = datetime_year(t), m = datetime_month(t), d = datetime_day(t)
    # days from 1970-01-01 to the civil date (the proleptic Gregorian calendar of `datetime`), counted
    # in 400-year eras of March-based years (the leap day last), for years 1..9999 (never negative)
    if m <= 2:
        y -= 1
    cdef long long era = y // 400
    cdef long long yoe = y - era * 400
    cdef long long doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    cdef long long days = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
    return (((days * 24 + datetime_hour(t)) * 60 + datetime_minute(t)) * 60 + datetime_second(t)) * 1000000 \
        + datetime_microsecond(t)


cdef class HostTimeline:
    """Usage of one host as a step function over time (see the module's docstring for the layout)."""

    cdef public str name
    cdef public object capacity
    #: the host's row in the table's hosts (the order of `SlotTable.timeline_rows`), set by the table
    cdef public Py_ssize_t row
    cdef object _shared
    cdef dict _vectors
    cdef list _times
    cdef key_t *_keys
    cdef key_t *_codes
    cdef key_t *_count
    cdef key_t *_refs
    cdef Py_ssize_t _n, _room
    # the capacity `scan` compares with, each field plus EPSILON, for the capacity object `_limits_of`
    cdef object _limits_of
    cdef double _limits[5]

    def __init__(self, str name, capacity, shared=None):
        self.name = name
        self.capacity = capacity
        self._shared = shared if shared is not None else SharedUsage()
        self._shared.timelines.append(self)
        self._vectors = self._shared.vectors
        self._times = []
        self._limits_of = None
        self.row = -1

    def __dealloc__(self):
        free(self._keys)
        free(self._codes)
        free(self._count)
        free(self._refs)

    def detach(self):
        """Leave the table's shared registries (the host is gone from the table)."""
        self._shared.timelines.remove(self)

    # -- structure ------------------------------------------------------------------------------------
    cdef int _reserve(self, Py_ssize_t n) except -1:
        cdef Py_ssize_t room
        if n <= self._room:
            return 0
        room = max(8, 2 * self._room, n)
        self._keys = _grown(self._keys, room)
        self._codes = _grown(self._codes, room)
        self._count = _grown(self._count, room)
        self._refs = _grown(self._refs, room)
        self._room = room
        return 0

    cdef int _insert(self, Py_ssize_t i, key_t k, object t) except -1:
        """Make key k (time t) breakpoint i, its usage and count those of the breakpoint before it
        (none before the first)."""
        cdef Py_ssize_t moved
        self._reserve(self._n + 1)
        moved = (self._n - i) * sizeof(key_t)
        if moved:
            memmove(self._keys + i + 1, self._keys + i, moved)
            memmove(self._codes + i + 1, self._codes + i, moved)
            memmove(self._count + i + 1, self._count + i, moved)
            memmove(self._refs + i + 1, self._refs + i, moved)
        self._keys[i] = k
        if i:
            self._codes[i] = self._codes[i - 1]
            self._count[i] = self._count[i - 1]
        else:
            self._codes[i] = NOTHING_CODE
            self._count[i] = 0
        self._refs[i] = 1
        self._times.insert(i, t)
        self._n += 1
        return 0

    cdef int _delete(self, Py_ssize_t i) except -1:
        cdef Py_ssize_t moved = (self._n - i - 1) * sizeof(key_t)
        if moved:
            memmove(self._keys + i, self._keys + i + 1, moved)
            memmove(self._codes + i, self._codes + i + 1, moved)
            memmove(self._count + i, self._count + i + 1, moved)
            memmove(self._refs + i, self._refs + i + 1, moved)
        del self._times[i]
        self._n -= 1
        return 0

    # A reservation puts in or takes out its two breakpoints together: one pass over the arrays' tail
    # for both (the part between them, usually a few entries, moves by one; the tail after them by two).
    cdef int _insert_two(self, Py_ssize_t i, Py_ssize_t j, key_t ks, key_t ke, object start,
                         object end) except -1:
        """Make ks (time start) breakpoint i and ke (time end) breakpoint j + 1, where i <= j are the
        positions `_lower` gave them among the present breakpoints; each takes the usage and count of
        the breakpoint before it."""
        cdef key_t *column
        cdef key_t *columns[4]
        cdef Py_ssize_t c, inner = (j - i) * sizeof(key_t), tail = (self._n - j) * sizeof(key_t)
        self._reserve(self._n + 2)
        columns[0], columns[1], columns[2], columns[3] = self._keys, self._codes, self._count, self._refs
        for c in range(4):
            column = columns[c]
            if tail:
                memmove(column + j + 2, column + j, tail)
            if inner:
                memmove(column + i + 1, column + i, inner)
        # ke: the usage in force just before it (breakpoint j - 1, now at j; or ks's when i == j)
        self._keys[j + 1] = ke
        self._keys[i] = ks
        if i:
            self._codes[i] = self._codes[i - 1]
            self._count[i] = self._count[i - 1]
        else:
            self._codes[i] = NOTHING_CODE
            self._count[i] = 0
        self._codes[j + 1] = self._codes[j]
        self._count[j + 1] = self._count[j]
        self._refs[i] = self._refs[j + 1] = 1
        # (end before old breakpoint j, then start before old i, which moves end to j + 1: two inserts into
        # the list in place, no slices made)
        PyList_Insert(self._times, j, end)
        PyList_Insert(self._times, i, start)
        self._n += 2
        return 0

    cdef int _delete_two(self, Py_ssize_t i, Py_ssize_t j) except -1:
        """Take breakpoints i < j out."""
        cdef key_t *column
        cdef key_t *columns[4]
        cdef Py_ssize_t c, inner = (j - i - 1) * sizeof(key_t), tail = (self._n - j - 1) * sizeof(key_t)
        columns[0], columns[1], columns[2], columns[3] = self._keys, self._codes, self._count, self._refs
        for c in range(4):
            column = columns[c]
            if inner:
                memmove(column + i, column + i + 1, inner)
            if tail:
                memmove(column + j - 1, column + j + 1, tail)
        del self._times[j]
        del self._times[i]
        self._n -= 2
        return 0

    cdef dict _shift(self, Py_ssize_t i, Py_ssize_t j, object amount, bint adding, dict memo, _Steps *steps):
        """Add `amount` to (or take it off) the usage of breakpoints i to j - 1: each code becomes the
        code of its usage plus or minus the amount, as found in `steps` (the last few this change found),
        else remembered in `memo` (`SharedUsage.transitions` of the amount, or None to look it up).
        Returns the memo, for the reservation's next host."""
        cdef Py_ssize_t m
        cdef int s
        cdef key_t one = 1 if adding else -1
        cdef key_t old, new
        cdef object entry
        if i >= j:
            return memo
        shared = self._shared
        for m in range(i, j):
            old = self._codes[m]
            for s in range(steps.n):
                if steps.old[s] == old:
                    new = steps.new[s]
                    break
            else:
                if memo is None:
                    memo = shared.transitions(amount, adding)
                entry = memo.get(old)
                if entry is None:
                    entry = shared.step(old, amount, adding)
                    memo = shared.transitions(amount, adding)   # (a sweep in `step` starts a new one)
                    steps.n = steps.next = 0                     # (and may have dropped codes)
                new = (<tuple>entry)[1]
                steps.old[steps.next] = old
                steps.new[steps.next] = new
                steps.next = (steps.next + 1) % _STEPS
                if steps.n < _STEPS:
                    steps.n += 1
            self._codes[m] = new
            self._count[m] += one
        return memo

    # -- changes ----------------------------------------------------------------------------------------
    # A reservation of a big lease holds a hundred hosts or more: `add_on_hosts` and `remove_on_hosts`
    # change all of them in one loop, looking up the amount's transitions once (each host's amount is
    # usually the same object).
    def add(self, start, end, amount):
        cdef _Steps steps
        steps.n = steps.next = 0
        self._add(time_key(start), time_key(end), amount, start, end, None, &steps)

    def add_keys(self, key_t ks, key_t ke, amount, start, end):
        """`add` for times already converted to keys (ks < ke)."""
        cdef _Steps steps
        steps.n = steps.next = 0
        self._add(ks, ke, amount, start, end, None, &steps)

    cdef dict _add(self, key_t ks, key_t ke, object amount, object start, object end, dict memo, _Steps *steps):
        cdef Py_ssize_t i, j, n = self._n
        cdef bint new_end, new_start
        j = _lower(self._keys, 0, n, ke)
        new_end = j == n or self._keys[j] != ke
        i = _lower(self._keys, 0, j, ks)
        new_start = i == n or self._keys[i] != ks   # (i <= j; i == j < n: keys[i] is after ks)
        if new_start and new_end:
            self._insert_two(i, j, ks, ke, start, end)
            j += 1
        elif new_end:
            self._refs[i] += 1
            self._insert(j, ke, end)
        else:
            self._refs[j] += 1
            if new_start:
                self._insert(i, ks, start)
                j += 1
            else:
                self._refs[i] += 1
        return self._shift(i, j, amount, True, memo, steps)

    def remove(self, start, end, amount):
        cdef _Steps steps
        steps.n = steps.next = 0
        self._remove(time_key(start), time_key(end), amount, None, &steps)

    def remove_keys(self, key_t ks, key_t ke, amount):
        """`remove` for times already converted to keys (ks < ke)."""
        cdef _Steps steps
        steps.n = steps.next = 0
        self._remove(ks, ke, amount, None, &steps)

    cdef dict _remove(self, key_t ks, key_t ke, object amount, dict memo, _Steps *steps):
        cdef Py_ssize_t i, j, n = self._n
        if n == 2 and self._refs[0] == 1 and self._refs[1] == 1:   # this reservation alone
            self._n = 0
            del self._times[:]
            return memo
        i = _lower(self._keys, 0, n, ks)
        j = _lower(self._keys, i, n, ke)
        if j >= n or self._keys[i] != ks or self._keys[j] != ke:
            raise ValueError(f"no reservation from key {ks} to {ke} on {self.name}")
        memo = self._shift(i, j, amount, False, memo, steps)
        self._refs[j] -= 1
        self._refs[i] -= 1
        if not self._refs[i] and not self._refs[j]:
            self._delete_two(i, j)
        elif not self._refs[j]:
            self._delete(j)
        elif not self._refs[i]:
            self._delete(i)
        return memo

    def collect_codes(self, set into):
        """Add the usage code of every breakpoint to `into` (`SharedUsage`'s sweep keeps those)."""
        cdef Py_ssize_t m
        for m in range(self._n):
            into.add(self._codes[m])

    # -- queries (by key) -------------------------------------------------------------------------------
    cdef inline object _vector(self, Py_ssize_t i):
        """The usage from breakpoint i - 1 on (NOTHING before the first)."""
        return self._vectors[self._codes[i - 1]] if i else NOTHING

    def usage_key(self, key_t k):
        return self._vector(_upper(self._keys, 0, self._n, k))

    def state_key(self, key_t k):
        """(usage, number of reservations) at key k."""
        cdef Py_ssize_t i = _upper(self._keys, 0, self._n, k)
        return (self._vectors[self._codes[i - 1]], self._count[i - 1]) if i else (NOTHING, 0)

    def window_key(self, key_t k):
        """(usage, reservation count) at key k and the keys [since, until) of the breakpoints around k
        between which they hold (BEFORE_ALL / AFTER_ALL where there is none)."""
        code, count, since, until = self._window(k)
        return self._vectors[code], count, since, until

    cdef inline tuple _window(self, key_t k):
        cdef Py_ssize_t n = self._n
        cdef Py_ssize_t i = _upper(self._keys, 0, n, k)
        cdef key_t following = self._keys[i] if i < n else AFTER_ALL
        if i:
            return (self._codes[i - 1], self._count[i - 1], self._keys[i - 1], following)
        return (NOTHING_CODE, 0, BEFORE_ALL, following)

    def scan(self, key_t k1, k2, request, relevant=None):
        """Walk the segments meeting [k1, k2) (k2 None: to the end) until `request` stops fitting:
        None if it fits in all, `AT_START` if not even at k1, else the time of the breakpoint where
        it first does not. `relevant`: (start key, end key, amount) of reservations to treat as gone."""
        cdef double r[5]
        cdef Py_ssize_t f, j, n = self._n
        cdef key_t end = AFTER_ALL if k2 is None else <key_t>k2
        cdef key_t k
        for f in range(5):
            r[f] = request[f]
        if not relevant:
            return self._scan(k1, end, r, NULL)
        self._set_limits()
        j = _upper(self._keys, 0, n, k1)
        used = self._vector(j)
        if relevant:
            used = _sub(used, excluded_amount(relevant, k1))
        if not self._fits(used, r):
            return AT_START
        while j < n:
            k = self._keys[j]
            if k >= end:
                return None
            used = self._vectors[self._codes[j]]
            if relevant:
                used = _sub(used, excluded_amount(relevant, k))
            if not self._fits(used, r):
                return self._times[j]
            j += 1
        return None

    cdef object _scan(self, key_t k1, key_t end, double *r, _Fits *seen):
        """`scan` with nothing treated as gone, the request already unpacked (the mapper's walk asks host
        after host for the same node; `seen`, if not NULL, remembers its answers by usage code)."""
        cdef Py_ssize_t j, n = self._n
        self._set_limits()
        if seen != NULL and seen.cap != <void *>self.capacity:
            seen.n = seen.next = 0
            seen.cap = <void *>self.capacity
        j = _upper(self._keys, 0, n, k1)
        if not self._fits_code(self._codes[j - 1] if j else NOTHING_CODE, r, seen):
            return AT_START
        while j < n:
            if self._keys[j] >= end:
                return None
            if not self._fits_code(self._codes[j], r, seen):
                return self._times[j]
            j += 1
        return None

    cdef inline int _set_limits(self) except -1:
        """The capacity `_fits` compares with, each field plus EPSILON, worked out once per capacity object."""
        cdef Py_ssize_t f
        if self._limits_of is not self.capacity:
            cap = self.capacity
            for f in range(5):
                self._limits[f] = cap[f] + EPSILON
            self._limits_of = cap
        return 0

    cdef inline bint _fits_code(self, key_t code, double *r, _Fits *seen) except -1:
        """`_fits` of the usage under `code`, looked up in `seen` first (which `_scan` keeps to this host's
        capacity), else worked out and remembered there."""
        cdef int s
        cdef bint fit
        if seen != NULL:
            for s in range(seen.n):
                if seen.code[s] == code:
                    return seen.fit[s]
        fit = self._fits(self._vectors[code], r)
        if seen != NULL:
            seen.code[seen.next] = code
            seen.fit[seen.next] = fit
            seen.next = (seen.next + 1) % _STEPS
            if seen.n < _STEPS:
                seen.n += 1
        return fit

    cdef inline bint _fits(self, object used, double *r) except -1:
        """resources.fits(used, request, capacity), with the capacity's sums worked out once."""
        cdef int f
        cdef double u
        for f in range(5):
            u = <object>PyTuple_GET_ITEM(used, f)
            if not u + r[f] <= self._limits[f]:
                return False
        return True

    cdef inline Py_ssize_t _after(self, key_t k1) noexcept:
        return _upper(self._keys, 0, self._n, k1)

    cdef inline Py_ssize_t _before(self, k2) except -1:
        return self._n if k2 is None else _lower(self._keys, 0, self._n, <key_t>k2)

    def breakpoint_list(self, key_t k1, k2):
        """The breakpoints strictly inside (k1, k2), in order."""
        cdef Py_ssize_t i = self._after(k1), j = self._before(k2)
        return self._times[i:j] if i < j else []

    def collect(self, key_t k1, k2, dict into):
        """Add (key: time) of every breakpoint strictly inside (k1, k2) to `into`."""
        cdef Py_ssize_t m, i = self._after(k1), j = self._before(k2)
        for m in range(i, j):
            into[self._keys[m]] = <object>PyList_GET_ITEM(self._times, m)

    def steps_key(self, key_t k1, k2):
        """The usage at k1 and from each breakpoint strictly inside (k1, k2) on (k2 None: to the end), as
        (keys, usages), the first key k1: the host's step function over the interval."""
        cdef Py_ssize_t m, i = self._after(k1), j = self._before(k2)
        keys = [k1]
        usages = [self._vector(i)]
        for m in range(i, j):
            keys.append(self._keys[m])
            usages.append(self._vectors[self._codes[m]])
        return keys, usages

    def peak_key(self, key_t k1, k2):
        """Per field, the most the host uses at any time in [k1, k2) (k2 None: for ever; the usage at k1
        when the interval holds no breakpoint), as a tuple of floats."""
        cdef double peak[5]
        cdef double u
        cdef Py_ssize_t f, m, i = self._after(k1), j = self._before(k2)
        used = self._vector(i)
        for f in range(5):
            peak[f] = <object>PyTuple_GET_ITEM(used, f)
        for m in range(i, j):
            used = self._vectors[self._codes[m]]
            for f in range(5):
                u = <object>PyTuple_GET_ITEM(used, f)
                if u > peak[f]:
                    peak[f] = u
        return (peak[0], peak[1], peak[2], peak[3], peak[4])

    # -- queries (by datetime) --------------------------------------------------------------------------
    def window(self, t):
        """(usage, reservation count) at t and the breakpoints around t between which they hold."""
        cdef Py_ssize_t n = self._n
        cdef Py_ssize_t i = _upper(self._keys, 0, n, time_key(t))
        return (self._vector(i), self._count[i - 1] if i else 0,
                self._times[i - 1] if i else None, self._times[i] if i < n else None)

    def usage_at(self, t):
        return self.usage_key(time_key(t))

    def state_at(self, t):
        """(usage, number of reservations) at t, with one lookup."""
        return self.state_key(time_key(t))

    def count_at(self, t):
        return self.state_key(time_key(t))[1]

    def last_breakpoint(self):
        """After this time the host is empty."""
        return self._times[self._n - 1] if self._n else None

    def segments(self, t1, t2):
        """(segment start, usage) for every segment meeting [t1, t2); the first starts at t1."""
        cdef Py_ssize_t m, i, j
        k1 = time_key(t1)
        out = [(t1, self.usage_key(k1))]
        i, j = self._after(k1), self._before(None if t2 is None else time_key(t2))
        for m in range(i, j):
            out.append((self._times[m], self._vectors[self._codes[m]]))
        return iter(out)

    def breakpoints(self, t1, t2=None):
        """Breakpoints strictly inside (t1, t2), in order."""
        return iter(self.breakpoint_list(time_key(t1), None if t2 is None else time_key(t2)))

    def items(self):
        """Every (breakpoint, usage from there), in order."""
        cdef Py_ssize_t m
        return iter([(self._times[m], self._vectors[self._codes[m]]) for m in range(self._n)])

    def __len__(self):
        return self._n


def add_on_hosts(dict timelines, held, key_t ks, key_t ke, start, end):
    """`add_keys` of one reservation on each of its hosts (`held`: host -> amount there; `timelines`:
    host -> its timeline). Returns the hosts' rows (their timelines' `row`), in `held`'s order."""
    return _on_hosts(timelines, held, ks, ke, start, end, True)


def remove_on_hosts(dict timelines, held, key_t ks, key_t ke):
    """`remove_keys` of one reservation from each of its hosts (as `add_on_hosts`)."""
    return _on_hosts(timelines, held, ks, ke, None, None, False)


def mark_rows(list rows, bytearray marked, list into):
    """The host states' note of rows to read again: each of `rows` not `marked` yet (a byte per row) is
    marked and added to `into` (so `into` holds each row once, without hashing)."""
    cdef Py_ssize_t i, n = len(marked)
    cdef char *flags = PyByteArray_AS_STRING(marked)
    for i in rows:
        if not 0 <= i < n:
            raise IndexError(f"row {i} out of range")
        if not flags[i]:
            flags[i] = 1
            into.append(i)


def unmark_rows(list rows, bytearray marked):
    """Take `mark_rows`'s mark off these rows."""
    cdef Py_ssize_t i, n = len(marked)
    cdef char *flags = PyByteArray_AS_STRING(marked)
    for i in rows:
        if not 0 <= i < n:
            raise IndexError(f"row {i} out of range")
        flags[i] = 0


def narrow_windows(list rows, key_t[::1] bound, key_t k, bint later):
    """A reservation put in outside the time the host states are at: each of its rows' window ends by
    its start (`later`: `bound` is `until`, k the start) or begins at its end (`bound` is `since`, k the
    end), whichever is narrower."""
    cdef Py_ssize_t i
    for i in rows:
        if later:
            if k < bound[i]:
                bound[i] = k
        elif k > bound[i]:
            bound[i] = k


cdef list _on_hosts(dict timelines, held, key_t ks, key_t ke, start, end, bint adding):
    """One reservation put on (or taken off) each of its hosts, the amount's transitions looked up once
    for a run of hosts given the same amount object. An unknown host changes none of them. Returns the
    hosts' rows."""
    cdef HostTimeline tl
    cdef dict memo = None
    cdef _Steps steps
    cdef list rows = []
    cdef list held_timelines = [timelines[host] for host in held]
    cdef Py_ssize_t m = 0
    last = None
    for amount in held.values():
        tl = <HostTimeline>held_timelines[m]
        m += 1
        if amount is not last:
            memo, last = None, amount
            steps.n = steps.next = 0
        memo = tl._add(ks, ke, amount, start, end, memo, &steps) if adding \
            else tl._remove(ks, ke, amount, memo, &steps)
        rows.append(tl.row)
    return rows


include "core_rows.pxi"   # the loops over many hosts' rows (refresh_rows ... steady_head)
