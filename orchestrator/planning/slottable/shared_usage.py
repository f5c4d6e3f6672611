"""The distinct usage vectors of a slot table, each under an integer code, and the sums between them.

A plan has few distinct usage vectors (sums of a few VM sizes): keeping each once, under a code the host
timelines store next to their keys, makes a point query's answer one of a few hundred objects that stay in
the CPU caches, instead of one object per breakpoint. Adding a reservation changes the usage of the breakpoints
it covers; the new vector's code is remembered per (amount, old code), so the walk costs a lookup by
integer per breakpoint, not a sum of five floats and its hash.
"""

from __future__ import annotations

from typing import Protocol

from orchestrator.model.resources import NOTHING, Resources
from orchestrator.planning.slottable.keys import NOTHING_CODE

#: amounts whose transitions are remembered at once, and transitions remembered per amount: a plan uses
#: a handful of VM sizes, so beyond this many something unusual goes on and the memo starts again
_MAX_AMOUNTS = 1024
#: a sweep runs when the table holds twice the vectors it kept at the last sweep plus this many: enough
#: that a small table does not sweep over and over
_SWEEP_SLACK = 1024

_new_tuple = tuple.__new__

#: a shared vector and its code
Entry = tuple[Resources, int]


def _plus(a: Resources, b: Resources) -> Resources:
    # resources.add without NamedTuple's Python-level __new__ (the same object, half the cost)
    return _new_tuple(Resources, (a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3], a[4] + b[4]))


def _minus(a: Resources, b: Resources) -> Resources:
    return _new_tuple(Resources, (a[0] - b[0], a[1] - b[1], a[2] - b[2], a[3] - b[3], a[4] - b[4]))


class CodeHolder(Protocol):
    """What holds codes (a host's timeline): a sweep keeps the vectors of the codes it still holds."""

    def collect_codes(self, into: set[int]) -> None: ...


class SharedUsage:
    """The distinct usage vectors of a table, each under a code: `vectors[code]` is the vector and
    `values[v]` (the shared vector equal to v, its code).

    Vectors are keyed by value, so equal vectors are one object and one code (100 and 100.0 are equal:
    the answer may be either). Codes count up from `NOTHING_CODE`. Whenever the table has doubled since
    the last sweep, the vectors whose code none of the registered `timelines` holds any more are dropped."""

    __slots__ = ("values", "vectors", "next", "limit", "timelines", "added", "taken")

    def __init__(self) -> None:
        self.values: dict[Resources, Entry] = {NOTHING: (NOTHING, NOTHING_CODE)}
        self.vectors: dict[int, Resources] = {NOTHING_CODE: NOTHING}
        self.next = NOTHING_CODE + 1
        self.limit = _SWEEP_SLACK
        self.timelines: list[CodeHolder] = []
        # per amount, code -> entry of that usage plus (`added`) or minus (`taken`) the amount
        self.added: dict[Resources, dict[int, Entry]] = {}
        self.taken: dict[Resources, dict[int, Entry]] = {}

    def transitions(self, amount: Resources, adding: bool) -> dict[int, Entry]:
        """The transitions for adding (or taking off) `amount` found so far (`step` finds the others)."""
        memos = self.added if adding else self.taken
        memo = memos.get(amount)
        if memo is None:
            if len(memos) >= _MAX_AMOUNTS:
                memos.clear()
            memo = memos[amount] = {}
        return memo

    def step(self, code: int, amount: Resources, adding: bool) -> Entry:
        """The entry of the usage under `code` plus or minus `amount`, remembered."""
        vector = self.vectors[code]
        used = _plus(vector, amount) if adding else _minus(vector, amount)
        entry = self.values.get(used) or self.add(used)
        memo = self.transitions(amount, adding)   # (after a sweep: a new one)
        if len(memo) >= _MAX_AMOUNTS:
            memo.clear()
        memo[code] = entry
        return entry

    def add(self, used: Resources) -> Entry:
        """Give a code to a vector not in `values` yet (the caller looked); returns its entry."""
        if len(self.values) >= self.limit:
            self._sweep()
        code = self.next
        self.next = code + 1
        self.vectors[code] = used
        entry = self.values[used] = used, code
        return entry

    def _sweep(self) -> None:
        held = {NOTHING_CODE}
        for timeline in self.timelines:
            timeline.collect_codes(held)
        values, vectors = self.values, self.vectors
        for used, (_, code) in list(values.items()):
            if code not in held:
                del values[used], vectors[code]
        self.limit = 2 * len(values) + _SWEEP_SLACK
        self.added.clear()   # (they name dropped codes)
        self.taken.clear()
