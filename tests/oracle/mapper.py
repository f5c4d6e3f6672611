"""Where a lease's VMs go: the greedy mapper, host by host, node by node, asking the slot table each time.

The hosts where the lease's smallest node fits at the start are ordered by the host-selection policy
(`greedy`: the fewest reservations at the start first, then the most free memory, then the most free CPU;
`pack`: the least free memory, then the least free CPU; `spread`: the most free memory, then the most
free CPU; ties keep the site's order). Then, host after host in that order, each host takes as many of the
remaining nodes as fit (`spread`: one per host per round), the largest node first. A node fits on a host
if the host can hold it, with the nodes it took already, over the whole interval, or (a lease that may be
suspended) from the start until some time no sooner than `floor`; the placement then ends when the first
of its hosts is needed. A placement that holds to the end is preferred to one that ends early.

An advance reservation that finds no room may preempt: the leases the policy allows are treated as gone
one at a time, the most preemptable first, until the lease fits; then each victim is given back, the
last added first, if the lease still fits without it.
"""

from __future__ import annotations

import math
from datetime import datetime

from orchestrator.model.lease import Lease
from orchestrator.model.reservations import Reservation, ReservationKind
from orchestrator.model.resources import NOTHING, Resources, add, fits
from orchestrator.model.tolerance import EPSILON
from orchestrator.planning.slottable.table import SlotTable


class Mapping:
    def __init__(self, nodes: dict[int, str], end: datetime, victims: list[Lease] | None = None):
        self.nodes = nodes          # vnode -> host
        self.end = end              # the placement holds until then
        self.victims = victims or []

    def per_host(self, lease: Lease) -> dict[str, Resources]:
        held: dict[str, Resources] = {}
        for vnode, host in self.nodes.items():
            held[host] = add(held.get(host, NOTHING), lease.request.nodes[vnode])
        return held


def free_at(table: SlotTable, host: str, t: datetime, excluding=()) -> Resources:
    cap, used = table.capacity(host), table.usage_at(host, t, excluding)
    return Resources(*(c - u for c, u in zip(cap, used)))


def nodes_that_fit(table: SlotTable, host: str, node: Resources, t: datetime) -> int:
    """How many copies of `node` the host could take at the instant t."""
    free = free_at(table, host, t)
    most = None
    for f, n in zip(free, node):
        if n > 0:
            k = math.floor((f + EPSILON) / n)
            most = k if most is None else min(most, k)
    return max(most or 0, 0)


class GreedyMapper:
    def __init__(self, table: SlotTable, host_selection: str, preemption):
        self.table = table
        self.host_selection = host_selection
        self.preemption = preemption   # the policy object: `score(preemptor, preemptee, at)`

    def map(self, lease: Lease, start: datetime, end: datetime, strict_end: bool = True, only_hosts=None,
            allow_preemption: bool = False, lease_of=None, min_end: datetime | None = None) -> Mapping | None:
        floor = None
        if min_end is not None and not strict_end:
            floor = max(start, min(min_end, end))
        hosts = [h for h in self.table.hosts if only_hosts is None or h in only_hosts]
        requests = lease.request.nodes
        vnodes = sorted(range(len(requests)), key=lambda v: requests[v], reverse=True)
        mapping = None
        if not strict_end:
            mapping = self._place(lease, vnodes, hosts, start, end, True, None, [])
        if mapping is None:
            mapping = self._place(lease, vnodes, hosts, start, end, strict_end, floor, [])
        if mapping is not None or not allow_preemption:
            return mapping
        return self._place_preempting(lease, vnodes, hosts, start, end, strict_end, lease_of)

    # -- one placement ---------------------------------------------------------------------------------------
    def _key(self, host: str, t: datetime, excluding: list[Reservation]) -> tuple:
        """The host's sort key for the host-selection policy at t, the `excluding` reservations gone."""
        used = self.table.usage_at(host, t, excluding)
        cap = self.table.capacity(host)
        count = self.table.reservation_count_at(host, t)
        for r in excluding:
            if r in self.table and host in r.resources and r.start <= t < r.end:
                count -= 1
        free_cpu, free_memory = cap.cpu - used.cpu, cap.memory - used.memory
        if self.host_selection == "greedy":
            return (count, -free_memory, -free_cpu)
        if self.host_selection == "pack":
            return (free_memory, free_cpu)
        return (-free_memory, -free_cpu)

    def host_order(self, t: datetime) -> list[str]:
        """Every host, best first at t (stable: ties keep the site's order)."""
        return sorted(self.table.hosts, key=lambda h: self._key(h, t, []))

    def _ordered_hosts(self, lease: Lease, vnodes: list[int], hosts: list[str], start: datetime,
                       excluding: list[Reservation]) -> list[str]:
        """The hosts where the smallest node fits at the start, best first."""
        smallest = Resources(*(min(lease.request.nodes[v][i] for v in vnodes) for i in range(5)))
        candidates = [h for h in hosts
                      if fits(self.table.usage_at(h, start, excluding), smallest, self.table.capacity(h))]
        return sorted(candidates, key=lambda h: self._key(h, start, excluding))

    def _place(self, lease: Lease, vnodes: list[int], hosts: list[str], start: datetime, end: datetime,
               strict_end: bool, floor: datetime | None, excluding: list[Reservation]) -> Mapping | None:
        ordered = self._ordered_hosts(lease, vnodes, hosts, start, excluding)
        remaining = list(vnodes)
        placed: dict[int, str] = {}
        held: dict[str, Resources] = {}
        until: dict[str, datetime] = {}

        def take_one(host: str) -> bool:
            """Put the first remaining node (largest first) that fits on the host."""
            for i, vnode in enumerate(remaining):
                trial = add(held.get(host, NOTHING), lease.request.nodes[vnode])
                if strict_end:
                    if not self.table.fits(host, trial, start, end, excluding):
                        continue
                    fits_until = end
                else:
                    fits_until = self.table.latest_fit(host, trial, start, end, excluding)
                    if fits_until is None or fits_until <= start or (floor is not None and fits_until < floor):
                        continue
                held[host] = trial
                until[host] = fits_until
                placed[vnode] = host
                del remaining[i]
                return True
            return False

        if self.host_selection == "spread":
            active = list(ordered)
            while remaining and active:
                active = [host for host in active if remaining and take_one(host)]
        else:
            for host in ordered:
                while remaining and take_one(host):
                    pass
        if remaining:
            return None
        return Mapping(placed, min(until[h] for h in held))

    # -- preemption -----------------------------------------------------------------------------------------
    def _place_preempting(self, lease: Lease, vnodes: list[int], hosts: list[str], start: datetime,
                          end: datetime, strict_end: bool, lease_of) -> Mapping | None:
        scores: dict[int, tuple[float, Lease]] = {}
        for r in self.table.reservations():
            if not (r.start < end and r.end > start and r.end > r.start and any(h in r.resources for h in hosts)):
                continue
            if r.lease_id == lease.id or r.lease_id in scores or r.kind is ReservationKind.UNAVAILABLE:
                continue
            other = lease_of(r.lease_id)
            score = self.preemption.score(lease, other, start)
            if score is not None:
                scores[r.lease_id] = (score, other)
        candidates = [other for _, other in sorted(scores.values(), key=lambda so: (-so[0], so[1].id))]

        def held_by(victims: list[Lease]) -> list[Reservation]:
            return [r for v in victims for r in self.table.reservations_of(v.id) if r.end > start]

        victims: list[Lease] = []
        for victim in candidates:
            victims.append(victim)
            mapping = self._place(lease, vnodes, hosts, start, end, strict_end, None, held_by(victims))
            if mapping is None:
                continue
            used = set(mapping.nodes.values())
            needed = [v for v in victims if any(h in used for r in held_by([v]) for h in r.resources)]
            for v in reversed(list(needed)):
                without = [w for w in needed if w is not v]
                other = self._place(lease, vnodes, hosts, start, end, strict_end, None, held_by(without))
                if other is not None:
                    needed, mapping = without, other
            mapping.victims = needed
            return mapping
        return None
