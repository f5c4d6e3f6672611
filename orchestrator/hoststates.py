"""Every host's usage at one query time, as numpy arrays kept valid incrementally.

The mapper's filter and score stages look at all hosts at the lease's start time, thousands of times per
simulated hour. Recomputing each host's usage (a bisect per host) made that the hottest loop. Here each
host's entry remembers the window [lo, hi) of times over which it is valid (between two breakpoints of
its timeline, as the slot table's integer time keys); a query at a new time recomputes only the hosts
whose window it leaves, and a change to a host's reservations invalidates only that host. Filtering and
ranking then run as vector operations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from .slottable import HostTimeline

# the slot table's time keys (integer microseconds) bracketing every real one: an entry with
# lo = _NEVER_LO, hi = _NEVER_HI is valid at no time
_NEVER_LO = (1 << 63) - 1
_NEVER_HI = -(1 << 63)


class HostStates:
    def __init__(self) -> None:
        self.names: list[str] = []
        self._index: dict[str, int] = {}
        self._timelines: list["HostTimeline"] = []
        self.capacity = np.zeros((0, 5))
        self.used = np.zeros((0, 5))
        self.count = np.zeros(0, dtype=np.int64)
        self._lo = np.zeros(0, dtype=np.int64)
        self._hi = np.zeros(0, dtype=np.int64)
        self.last: int | None = None   # the time last asked about (slot-table key)
        self.version = 0    # bumped whenever an entry changes: keys caches built on these arrays
        self._clean = False  # every entry valid at `last`

    def add_host(self, timeline: "HostTimeline") -> None:
        self._index[timeline.name] = len(self.names)
        self.names.append(timeline.name)
        self._timelines.append(timeline)
        self.capacity = np.vstack([self.capacity, np.array(timeline.capacity, dtype=float)])
        self.used = np.vstack([self.used, np.zeros(5)])
        self.count = np.append(self.count, 0)
        self._lo = np.append(self._lo, np.int64(_NEVER_LO))
        self._hi = np.append(self._hi, np.int64(_NEVER_HI))
        self._changed()

    def remove_host(self, name: str) -> None:
        i = self._index.pop(name)
        del self.names[i], self._timelines[i]
        self.capacity = np.delete(self.capacity, i, axis=0)
        self.used = np.delete(self.used, i, axis=0)
        self.count = np.delete(self.count, i)
        self._lo = np.delete(self._lo, i)
        self._hi = np.delete(self._hi, i)
        self._index = {n: k for k, n in enumerate(self.names)}
        self._changed()

    def _changed(self) -> None:
        # the rows themselves changed: caches keyed by `version` (the mapper's room per lease shape)
        # must not survive, and `at` must not take the same-time shortcut
        self._clean = False
        self.version += 1

    def row(self, host: str) -> int:
        return self._index[host]

    @property
    def valid_until(self) -> np.ndarray:
        """Per host, the key of its next breakpoint after the time last asked about (`at`)."""
        return self._hi

    def invalidate(self, host: str) -> None:
        self._clean = False
        i = self._index[host]
        self._lo[i] = _NEVER_LO
        self._hi[i] = _NEVER_HI

    def at(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(usage per host x resource, reservations per host) at the time whose slot-table key
        (`slottable.time_key`: integer microseconds) is k; the arrays are owned here: read only."""
        if self._clean and k == self.last:
            return self.used, self.count
        self.last = k
        stale = np.flatnonzero((self._lo > k) | (self._hi <= k))
        self._clean = True
        if stale.size:
            self.version += 1
            rows = stale.tolist()
            timelines = self._timelines
            windows = [timelines[i].window_key(k) for i in rows]
            # one vectorised write per array instead of a numpy element write per host and field
            self.used[stale] = [w[0] for w in windows]
            self.count[stale] = [w[1] for w in windows]
            self._lo[stale] = [w[2] for w in windows]
            self._hi[stale] = [w[3] for w in windows]
        return self.used, self.count
