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

from ..reservations import Reservation
from ..resources import Resources
from ..slottable import SlotTable
from .registry import Registry


#: what the mapper knows of a candidate host at the start time: (name, usage, capacity, reservations)
HostState = tuple[str, Resources, Resources, int]


class HostSelectionPolicy(ABC):
    name = "abstract"
    packs: bool = True   # fill a host with as many of the lease's nodes as fit before the next host

    def order(self, table: SlotTable, hosts: list[str], at: datetime,
              excluding: Collection[Reservation] = ()) -> list[str]:
        """`hosts` sorted best first."""
        return self.rank(table.host_states(hosts, at, excluding))

    def rank(self, states: list[HostState]) -> list[str]:
        """Host names sorted best first (stable: ties keep the site's order)."""
        return [s[0] for s in sorted(states, key=self.key)]

    @staticmethod
    @abstractmethod
    def key(state: HostState) -> tuple: ...


HOST_SELECTION: Registry[HostSelectionPolicy] = Registry("host selection", "scheduling.policy_host_selection")


@HOST_SELECTION.register("greedy")
class Greedy(HostSelectionPolicy):
    @staticmethod
    def key(state: HostState) -> tuple:
        _, used, cap, count = state
        return (count, used.memory - cap.memory, used.cpu - cap.cpu)


@HOST_SELECTION.register("pack")
class Pack(HostSelectionPolicy):
    @staticmethod
    def key(state: HostState) -> tuple:
        _, used, cap, _ = state
        return (cap.memory - used.memory, cap.cpu - used.cpu)


@HOST_SELECTION.register("spread")
class Spread(HostSelectionPolicy):
    packs = False

    @staticmethod
    def key(state: HostState) -> tuple:
        _, used, cap, _ = state
        return (used.memory - cap.memory, used.cpu - cap.cpu)
