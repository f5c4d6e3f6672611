"""Host selection: the order in which the mapper tries hosts, and whether it packs a host before moving on.

- `greedy` (the reference's): hosts with fewer reservations at the start time first (fewer leases to
  disturb if preemption is ever needed), then the most free memory; packs.
- `pack`: best fit, the least free capacity first; consolidates and keeps whole hosts free for large ARs.
- `spread`: worst fit, the most free capacity first; one node per host per round.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection
from datetime import datetime

import numpy as np

from orchestrator.model.reservations import Reservation
from orchestrator.model.resources import Resources
from orchestrator.planning.policies.registry import Registry
from orchestrator.planning.slottable.table import SlotTable

#: what the mapper knows of a candidate host at the start time: (name, usage, capacity, reservations)
HostState = tuple[str, Resources, Resources, int]


class HostSelectionPolicy(ABC):
    """Scores hosts as sort keys over arrays (one row per host), so ranking is one vectorised sort. The keys
    are a function of a row's usage, capacity and reservations alone, and the sort is stable: hosts alike
    in all three keep the site's order (the mapper counts on it to skip sorting such hosts)."""

    name = "abstract"
    packs: bool = True   # fill a host with as many of the lease's nodes as fit before the next host

    def order(self, table: SlotTable, hosts: list[str], at: datetime,
              excluding: Collection[Reservation] = ()) -> list[str]:
        """`hosts` sorted best first."""
        return self.rank(table.host_states(hosts, at, excluding))

    def rank(self, states: list[HostState]) -> list[str]:
        """Host names sorted best first (stable: ties keep the site's order)."""
        if not states:
            return []
        used = np.array([s[1] for s in states], dtype=float)
        cap = np.array([s[2] for s in states], dtype=float)
        count = np.array([s[3] for s in states])
        return [states[i][0] for i in self.rank_indices(used, cap, count).tolist()]

    def rank_indices(self, used: np.ndarray, cap: np.ndarray, count: np.ndarray) -> np.ndarray:
        """Row indices best first; np.lexsort is stable, so ties keep the site's order."""
        return np.lexsort(self.keys(used, cap, count))

    @staticmethod
    @abstractmethod
    def keys(used: np.ndarray, cap: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, ...]:
        """Sort keys, least significant first (np.lexsort's convention). Columns: 0 cpu, 1 memory."""


HOST_SELECTION: Registry[HostSelectionPolicy] = Registry("host selection", "scheduling.policy_host_selection")


@HOST_SELECTION.register("greedy")
class Greedy(HostSelectionPolicy):
    @staticmethod
    def keys(used, cap, count):
        return (used[:, 0] - cap[:, 0], used[:, 1] - cap[:, 1], count)


@HOST_SELECTION.register("pack")
class Pack(HostSelectionPolicy):
    @staticmethod
    def keys(used, cap, count):
        return (cap[:, 0] - used[:, 0], cap[:, 1] - used[:, 1])


@HOST_SELECTION.register("spread")
class Spread(HostSelectionPolicy):
    packs = False

    @staticmethod
    def keys(used, cap, count):
        return (used[:, 0] - cap[:, 0], used[:, 1] - cap[:, 1])
