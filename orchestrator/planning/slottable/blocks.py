"""A block: a run of consecutive breakpoints of one host, as one `array('q')` of their keys and usage codes.

Layout of a block of n breakpoints (2n machine integers):

    index   0     1     ...  n-1       |  n          ...  2n-2    2n-1
    holds   key0  key1  ...  key(n-1)  |  code(n-1)  ...  code1   code0

The keys come first, in order; the codes (`SharedUsage`: the usage from that breakpoint to the next)
follow in *reverse* order, so breakpoint j's code is the j-th from the end, `block[-1 - j]`. After
`i = bisect_keys(block, k)` (how many keys are at or before k), the breakpoint in force at k is i - 1 and
its code is `block[-i]`: a point query reads its answer next to the keys it bisected, in the same buffer
(one object and one buffer to reach, so fewer cache misses than a list of usage beside the keys). The
reverse order makes splitting one slice (`block[h:2n - h]` is breakpoints h.. with their codes) and
merging one slice assignment. Codes are above every key (`keys.NOTHING_CODE`), so a bisect over the
whole block stops among the keys.

The point queries (`bisect_keys` and the reads of `block[-i]` after it; `timeline.windows_at`, which
runs it once per host, inlines it) and the walk that changes codes (`HostTimeline._shift`) index the block
inline; everything else goes through the functions below.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Sequence

#: a 64-byte cache line holds this many 8-byte keys
KEYS_PER_LINE = 8
#: `bisect_keys` first reads one key per cache line of a block of more keys than this (one line's worth)
STRIDED_READ_ABOVE = 8


def new_block(keys: Sequence[int], codes: Sequence[int]) -> array:
    """The block of breakpoints with these keys (in order) and these codes (in the same order)."""
    return array("q", [*keys, *reversed(codes)])


def size(block: array) -> int:
    """The number of breakpoints in the block."""
    return len(block) >> 1


def bisect_keys(block: array, k: int) -> int:
    """How many of the block's keys are at or before k (`bisect_right`): breakpoint i - 1 is in force at k.

    When the keys span several cache lines, one key per line is read first: those loads do not depend on
    each other, so the CPU overlaps their misses, where the bisect's probes, each waiting for the one
    before, would miss one after the other (the table's point queries on a big site reach blocks that
    are not in the caches). On a cached block it costs a little; this is the one place it is done."""
    n = len(block) >> 1
    if n > STRIDED_READ_ABOVE:
        block[:n:KEYS_PER_LINE]   # (the slice is thrown away: the loads are what count)
    return bisect_right(block, k)


def code_of(block: array, j: int) -> int:
    """The usage code of breakpoint j."""
    return block[-1 - j]


def codes(block: array) -> array:
    """The codes of all the block's breakpoints (last breakpoint first)."""
    return block[len(block) >> 1:]


def insert(block: array, j: int, key: int, code: int) -> None:
    """Make (key, code) breakpoint j, the breakpoints from j on moving up one."""
    block.insert(len(block) - j, code)   # after the code of breakpoint j (which becomes j + 1)
    block.insert(j, key)


def delete(block: array, j: int) -> None:
    """Take breakpoint j out."""
    del block[-1 - j], block[j]


def split_off(block: array, h: int) -> array:
    """Take breakpoints h.. out of the block; returns them as a block of their own."""
    end = len(block) - h
    tail = block[h:end]   # keys from h on, then their codes
    del block[h:end]
    return tail


def append(block: array, following: array) -> None:
    """Append the breakpoints of `following` (all after the block's) to the block."""
    n = len(block) >> 1
    block[n:n] = following   # its keys after the keys, its codes before the codes
