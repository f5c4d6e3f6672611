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
from ..slottable import SlotTable
from .registry import Registry


class HostSelectionPolicy(ABC):
    name = "abstract"
    packs: bool = True   # fill a host with as many of the lease's nodes as fit before the next host

    @abstractmethod
    def order(self, table: SlotTable, hosts: list[str], at: datetime,
              excluding: Collection[Reservation] = ()) -> list[str]:
        """`hosts` sorted best first."""


HOST_SELECTION: Registry[HostSelectionPolicy] = Registry("host selection", "scheduling.policy_host_selection")


@HOST_SELECTION.register("greedy")
class Greedy(HostSelectionPolicy):
    def order(self, table, hosts, at, excluding=()):
        def key(h: str):
            free = table.free_at(h, at, excluding)
            return (table.reservation_count_at(h, at), -free.memory, -free.cpu)
        return sorted(hosts, key=key)


@HOST_SELECTION.register("pack")
class Pack(HostSelectionPolicy):
    def order(self, table, hosts, at, excluding=()):
        def key(h: str):
            free = table.free_at(h, at, excluding)
            return (free.memory, free.cpu)
        return sorted(hosts, key=key)


@HOST_SELECTION.register("spread")
class Spread(HostSelectionPolicy):
    packs = False

    def order(self, table, hosts, at, excluding=()):
        def key(h: str):
            free = table.free_at(h, at, excluding)
            return (-free.memory, -free.cpu)
        return sorted(hosts, key=key)
