"""Every host's usage at one query time, as numpy arrays kept valid incrementally.

The mapper's filter and score stages look at all hosts at the lease's start time, thousands of times per
simulated hour. Recomputing each host's usage (a bisect per host) made that the hottest loop. Here each
host's entry remembers the window [lo, hi) of times over which it is valid (between two breakpoints of
its timeline); a query at a new time recomputes only the hosts whose window it leaves, and a change to
a host's reservations invalidates only that host. Filtering and ranking then run as vector operations.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from .slottable import HostTimeline

_INF = float("inf")


class HostStates:
    def __init__(self) -> None:
        self.names: list[str] = []
        self._index: dict[str, int] = {}
        self._timelines: list["HostTimeline"] = []
        self.capacity = np.zeros((0, 5))
        self.used = np.zeros((0, 5))
        self.count = np.zeros(0, dtype=np.int64)
        self._lo = np.zeros(0)
        self._hi = np.zeros(0)
        self.last = -_INF   # the time last asked about (timestamp)
        self.version = 0    # bumped whenever an entry changes: keys caches built on these arrays
        self._clean = False  # every entry valid at `last`

    def add_host(self, timeline: "HostTimeline") -> None:
        self._index[timeline.name] = len(self.names)
        self.names.append(timeline.name)
        self._timelines.append(timeline)
        self.capacity = np.vstack([self.capacity, np.array(timeline.capacity, dtype=float)])
        self.used = np.vstack([self.used, np.zeros(5)])
        self.count = np.append(self.count, 0)
        self._lo = np.append(self._lo, _INF)
        self._hi = np.append(self._hi, -_INF)
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

    def invalidate(self, host: str) -> None:
        self._clean = False
        i = self._index[host]
        self._lo[i] = _INF
        self._hi[i] = -_INF

    def at(self, t: datetime) -> tuple[np.ndarray, np.ndarray]:
        """(usage per host x resource, reservations per host) at t; the arrays are owned here: read only."""
        ts = t.timestamp()
        if self._clean and ts == self.last:
            return self.used, self.count
        self.last = ts
        stale = np.flatnonzero((self._lo > ts) | (self._hi <= ts))
        self._clean = True
        if stale.size:
            self.version += 1
            rows = stale.tolist()
            timelines = self._timelines
            windows = [timelines[i].window(t) for i in rows]
            # one vectorised write per array instead of a numpy element write per host and field
            self.used[stale] = [w[0] for w in windows]
            self.count[stale] = [w[1] for w in windows]
            self._lo[stale] = [w[2].timestamp() if w[2] is not None else -_INF for w in windows]
            self._hi[stale] = [w[3].timestamp() if w[3] is not None else _INF for w in windows]
        return self.used, self.count
