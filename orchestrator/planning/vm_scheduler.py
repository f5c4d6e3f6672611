"""The VM scheduler: finds when and where a lease's VMs run, and builds its reservations.

It plans but does not commit: `schedule` returns the VM reservation with its overheads attached (`pre`:
resumptions; `post`: shutdown or suspensions) and the leases that must be preempted for it; the lease
scheduler preempts them and then puts the reservations in the slot table.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from orchestrator.config import SchedulingConfig
from orchestrator.model.errors import (
    InconsistentSchedule,
    InvalidRequest,
    NotSchedulable,
    Unschedulable,
)
from orchestrator.model.lease import Lease, LeaseType
from orchestrator.model.reservations import Reservation, ReservationKind
from orchestrator.model.resources import NOTHING, Resources, add, metered
from orchestrator.model.states import SUSPENDED_STATES
from orchestrator.model.timeutil import iso
from orchestrator.planning.free_slots import FreeSlots
from orchestrator.planning.mapper import Mapper, Mapping
from orchestrator.planning.overheads import Overheads
from orchestrator.planning.slottable.table import SlotTable


@dataclass
class Placement:
    """A planned VM reservation (overheads attached) and the leases that must make way for it."""

    vm: Reservation
    victims: list[Lease]
    in_future: bool = False
    migrations: list[Reservation] | None = None


class VMScheduler:
    def __init__(self, table: SlotTable, mapper: Mapper, config: SchedulingConfig, lease_of: Callable[[int], Lease]):
        self.table = table
        self.mapper = mapper
        self.config = config
        self.overheads = Overheads(config)
        self.lease_of = lease_of
        #: best-effort leases planned in the future by backfilling (at most `max_in_future` of them)
        self.future_leases: set[int] = set()
        #: when an advance reservation would fit (`lease submit --start earliest`, `plan --free`)
        self.free_slots = FreeSlots(table, self.map_exact, self.yields_to)

    # -- entry point -------------------------------------------------------------------------------------
    def can_schedule_in_future(self) -> bool:
        limit = self.config.max_in_future
        return limit == -1 or len(self.future_leases) < limit

    def schedule(self, lease: Lease, nexttime: datetime, earliest: datetime | None = None) -> Placement:
        """Plan the lease from `nexttime`; `earliest`: a suspended lease's first start when it is known
        already (after image transfers that took longer than estimated), instead of the estimate."""
        if lease.type is LeaseType.ADVANCE_RESERVATION:
            return self._schedule_exact(lease, nexttime)
        if lease.type is LeaseType.IMMEDIATE:
            return self._schedule_asap(lease, nexttime, False, earliest)
        return self._schedule_asap(lease, nexttime, self.can_schedule_in_future(), earliest)

    # -- advance reservations ------------------------------------------------------------------------------------
    def _schedule_exact(self, lease: Lease, nexttime: datetime) -> Placement:
        request = lease.request
        start = request.start
        assert start is not None
        if request.earliest:
            first = max(start, nexttime)
            found = self.free_slots.earliest(lease, first, request.not_after, request.duration)
            if found is None:
                until = f"to {iso(request.not_after)}" if request.not_after is not None else "on"
                raise NotSchedulable(f"nothing fits from {iso(first)} {until} without preempting leases that may "
                                     "not be preempted")
            start, mapping = found
            end = start + request.duration
        else:
            if start < nexttime:
                raise NotSchedulable(f"start {start.isoformat()} is in the past (now {nexttime.isoformat()})")
            end = start + request.duration
            exact = self.map_exact(lease, start, end)
            if exact is None:
                raise NotSchedulable("not enough resources in the requested interval")
            mapping = exact
        vm = self._vm_reservation(lease, start, end, mapping)
        self.plan_shutdown(lease, vm)
        return Placement(vm=vm, victims=mapping.victims)

    def map_exact(self, lease: Lease, start: datetime, end: datetime) -> Mapping | None:
        """The placement an advance reservation gets over [start, end): every node for the whole interval,
        preempting what the preemption policy lets it (the free-slot search asks exactly this)."""
        return self.mapper.map(lease, start, end, strict_end=True, allow_preemption=True, lease_of=self.lease_of)

    def yields_to(self, lease: Lease) -> Callable[[int], bool]:
        """Whether the reservations of a lease (by id) may give way to `lease` (the preemption policy's
        word; a drained or lost host's hold never does)."""
        preemption, lease_of = self.mapper.preemption, self.lease_of
        at = lease.request.start or lease.submit_time

        def gives_way(lease_id: int) -> bool:
            try:
                other = lease_of(lease_id)
            except (LookupError, InvalidRequest):   # (a hold of a drained or lost host: lease 0)
                return False
            return preemption.score(lease, other, at) is not None

        return gives_way

    # -- as soon as possible ------------------------------------------------------------------------------------
    def _schedule_asap(self, lease: Lease, nexttime: datetime, allow_future: bool,
                       first: datetime | None) -> Placement:
        resuming = lease.state in SUSPENDED_STATES
        remaining = lease.remaining
        shutdown = self.overheads.shutdown_time(lease)
        min_duration = self.overheads.scheduling_threshold(lease, resuming)
        earliest, only_hosts = self._first_chance(lease, nexttime)
        if first is not None:
            earliest = first
        duration = remaining + shutdown
        if resuming:
            duration += self.overheads.estimate_resume(lease)

        strict_end = not self.may_suspend(lease)
        found, too_short = self._fit_at(lease, [earliest], duration, min_duration, strict_end, only_hosts)
        in_future = False
        if found is None and allow_future:
            found, _ = self._fit_at(lease, self._future_points(earliest), duration, min_duration, strict_end,
                                    only_hosts)
            in_future = True
            if found is None:
                raise NotSchedulable("the lease does not fit even on an empty site")
        if found is None:
            # why, for the queue's failure memo (SHORT: room at the instant, but for too short a run)
            raise NotSchedulable("not enough resources available now", Unschedulable.SHORT if too_short
                                 else (Unschedulable.STRICT if strict_end else Unschedulable.INSTANT))
        start, mapping = found
        vm = self._vm_reservation(lease, start, mapping.end, mapping)
        if resuming:
            self._plan_resumption(lease, vm, start)
        if vm.end - vm.start < remaining + shutdown:
            self.plan_suspension(lease, vm, vm.end)
        else:
            if vm.end - vm.start > remaining + shutdown:
                vm.end = vm.start + remaining + shutdown
            self.plan_shutdown(lease, vm)
        return Placement(vm=vm, victims=[], in_future=in_future)

    def _first_chance(self, lease: Lease, nexttime: datetime) -> tuple[datetime, set[str] | None]:
        """The earliest start to try and the hosts allowed: a suspended lease resumes where it was
        (`migration = no`) or after its memory images have had time to move."""
        if lease.state not in SUSPENDED_STATES:
            return nexttime, None
        images = lease.image_hosts()
        if self.config.migration == "no":
            return nexttime, set(images.values())
        return nexttime + self.overheads.estimate_migration(lease, images), None

    def shortest_run(self, lease: Lease) -> timedelta:
        """How long a placement of a queued lease (not resuming) must last for `schedule` to take it: its
        whole run and shutdown, or, when it may be suspended, its scheduling threshold if that is shorter
        (the queue's failure memo compares leases by it)."""
        duration = lease.remaining + self.overheads.shutdown_time(lease)
        if not self.may_suspend(lease):
            return duration
        return min(duration, self.overheads.scheduling_threshold(lease, resuming=False))

    def could_start_now(self, lease: Lease, nexttime: datetime) -> bool:
        """Whether the first start `schedule` tries passes its instant check: if not, and the lease may
        not be planned in the future, scheduling it now would fail (the queue asks this first)."""
        earliest, only_hosts = self._first_chance(lease, nexttime)
        return self.mapper.could_fit_at(lease, earliest, only_hosts)

    def _fit_at(self, lease: Lease, points: Iterable[datetime], duration: timedelta, min_duration: timedelta,
                strict_end: bool, only_hosts: set[str] | None) -> tuple[tuple[datetime, Mapping] | None, bool]:
        """The first point at which the lease maps for its duration or, when it may be suspended, for at
        least `min_duration` (the rest then runs after a resumption); and whether some point had room at
        its instant but no mapping that lasts long enough.

        The mapper is told the shortest run worth having: the hosts first in its order may be free only
        briefly while others are free for long, and a placement on the former, refused as too short,
        must not hide one on the latter."""
        too_short = False
        could_fit_at = self.mapper.could_fit_at
        for start in points:
            end = start + duration
            # a vectorised look at every host at the start instant first: most points fail here
            if not could_fit_at(lease, start, only_hosts):
                continue
            mapping = self.mapper.map(lease, start, end, strict_end=strict_end, only_hosts=only_hosts,
                                      min_end=None if strict_end else start + min_duration)
            if mapping is None or (mapping.end < end and mapping.end - start < min_duration):
                too_short = too_short or not strict_end
                continue
            return (start, mapping), too_short
        return None, too_short

    def _future_points(self, after: datetime, until: datetime | None = None) -> Iterator[datetime]:
        """Times after `after` (and before `until`) at which VM reservations end with their shutdown or
        suspension, in order, lazily: the search usually stops at one of the first."""
        previous = None
        for rr in self.table.iter_ending_after(after):
            end = rr.end
            if until is not None and end >= until:
                return
            if end == previous:
                continue
            if rr.kind in (ReservationKind.SHUTDOWN, ReservationKind.SUSPEND) or (
                    rr.kind is ReservationKind.VM and not rr.post):
                previous = end
                yield end

    # -- building reservations ---------------------------------------------------------------------------------
    def _vm_reservation(self, lease: Lease, start: datetime, end: datetime, mapping: Mapping) -> Reservation:
        return Reservation(lease_id=lease.id, kind=ReservationKind.VM, start=start, end=end,
                           resources=mapping.per_host(lease), nodes=dict(mapping.nodes))

    def _held(self, lease: Lease, steps_nodes: dict[str, list[int]], with_image: bool) -> dict[str, Resources]:
        """What a suspend/resume step holds per host: the VMs concerned (and disk for their images).
        Worked out once per (VMs concerned, host capacity): a big lease's hosts mostly hold alike VMs and
        are alike themselves."""
        held = {}
        nodes, uniform = lease.request.nodes, lease.request.uniform
        capacity = self.table.capacity
        placement = lease.request.placement
        if placement is not None and placement.exclusive:   # (its hosts stay whole: nothing else meanwhile)
            return {host: capacity(host) for host in steps_nodes}
        made: dict[tuple, Resources] = {}
        for host, vnodes in steps_nodes.items():
            cap = capacity(host)
            key = (len(vnodes), cap) if uniform is not None else (tuple(nodes[v] for v in vnodes), cap)
            amount = made.get(key)
            if amount is None:
                amount = NOTHING
                for v in vnodes:
                    node = nodes[v]
                    amount = add(amount, Resources(node.cpu, node.memory, node.memory if with_image else 0, 0, 0))
                amount = made[key] = metered(amount, cap)
            held[host] = amount
        return held

    def _metered(self, host: str, amount: Resources) -> Resources:
        return metered(amount, self.table.capacity(host))

    def plan_shutdown(self, lease: Lease, vm: Reservation) -> None:
        shutdown = self.overheads.shutdown_time(lease)
        start = vm.end - shutdown
        rr = Reservation(lease_id=lease.id, kind=ReservationKind.SHUTDOWN, start=start, end=vm.end,
                         resources=dict(vm.resources), nodes=dict(vm.nodes), vm=vm)
        vm.end = start
        vm.post = [rr]

    def plan_suspension(self, lease: Lease, vm: Reservation, by: datetime) -> None:
        """Replace the VM reservation's post-overheads with suspensions that end by `by`."""
        if by < vm.start or by > vm.final_end:
            raise InconsistentSchedule(f"lease {lease.id}: suspension by {by} outside its VM reservation "
                                       f"({vm.start}-{vm.final_end})")
        steps = self.overheads.suspend_layout(lease, vm.nodes, by)
        rrs = [Reservation(lease_id=lease.id, kind=ReservationKind.SUSPEND, start=s, end=e,
                           resources=self._held(lease, hosts, with_image=True),
                           nodes={v: h for h, vs in hosts.items() for v in vs}, vm=vm)
               for s, e, hosts in steps]
        if rrs[0].start < vm.start:
            raise InconsistentSchedule(f"lease {lease.id}: suspension would start at {rrs[0].start}, "
                                       f"before its VM reservation starts ({vm.start})")
        vm.end = rrs[0].start
        vm.post = rrs

    def _plan_resumption(self, lease: Lease, vm: Reservation, at: datetime) -> None:
        steps = self.overheads.resume_layout(lease, vm.nodes, at)
        rrs = [Reservation(lease_id=lease.id, kind=ReservationKind.RESUME, start=s, end=e,
                           resources=self._held(lease, hosts, with_image=False),
                           nodes={v: h for h, vs in hosts.items() for v in vs}, vm=vm)
               for s, e, hosts in steps]
        if rrs[-1].end > vm.end:
            raise InconsistentSchedule(f"lease {lease.id}: resumption would end at {rrs[-1].end}, after its VM "
                                       f"reservation ends ({vm.end})")
        vm.start = rrs[-1].end
        vm.pre = rrs

    def plan_migration(self, lease: Lease, vm: Reservation, nexttime: datetime) -> list[Reservation]:
        """Memory-image transfers for a suspended lease resuming on other hosts, before `vm` resumes."""
        last = lease.last_vm
        assert last is not None
        images = lease.image_hosts()
        moves = {v: (images[v], vm.nodes[v]) for v in vm.nodes if images[v] != vm.nodes[v]}
        if not moves:
            return []
        start = max(last.final_end, nexttime)
        if self.config.migration == "yes-notransfer":
            return [Reservation(lease_id=lease.id, kind=ReservationKind.MIGRATE, start=start, end=start,
                                resources={}, transfers=moves, vm=vm)]
        bandwidth = self.config.migration_bandwidth
        rrs = []
        for moves_now in self.overheads.migration_rounds(lease, moves):
            length = max(self.overheads.transfer_time(lease.request.nodes[v].memory, src, dst)
                         for v, (src, dst) in moves_now.items())
            held: dict[str, Resources] = {}
            for src, dst in moves_now.values():
                held[src] = add(held.get(src, NOTHING), self._metered(src, Resources(0, 0, 0, 0, bandwidth)))
                held[dst] = add(held.get(dst, NOTHING), self._metered(dst, Resources(0, 0, 0, bandwidth, 0)))
            held = {h: r for h, r in held.items() if r != NOTHING}
            rrs.append(Reservation(lease_id=lease.id, kind=ReservationKind.MIGRATE, start=start,
                                   end=start + length, resources=held, transfers=dict(moves_now), vm=vm))
            start += length
        return rrs

    def could_start_earlier(self, lease: Lease, vm: Reservation, nexttime: datetime,
                            freed_until: datetime | None = None) -> bool:
        """Whether the hosts have room for the lease at the instant of some point before its planned
        start (and before `freed_until`): if not, re-planning it cannot move it earlier. Its start is
        that of its resumption, if it resumes (image transfers before it hold only network)."""
        planned = next((p.start for p in vm.pre if p.kind is ReservationKind.RESUME), vm.start)
        limit = planned if freed_until is None else min(planned, freed_until)
        if nexttime >= limit:
            return False
        points = itertools.chain([nexttime], self._future_points(nexttime, until=limit))
        # before its planned start the lease's own plan holds nothing (memory-image transfers hold
        # only network), so the instant check needs no exclusion
        return any(self.mapper.could_fit_at(lease, p) for p in points)

    # -- preemption ----------------------------------------------------------------------------------------
    def may_suspend(self, lease: Lease) -> bool:
        """Whether the `suspension` setting lets this lease be suspended at all."""
        suspension = self.config.suspension
        return suspension == "all" or (suspension == "serial" and lease.numnodes == 1)

    def can_suspend_by(self, lease: Lease, vm: Reservation, by: datetime, now: datetime) -> bool:
        """Enough run before `by` to be worth it, and the suspension would not have to start in the past."""
        if by - vm.start < self.overheads.scheduling_threshold(lease, resuming=False):
            return False
        first = self.overheads.suspend_layout(lease, vm.nodes, by)[0][0]
        return first >= now and first >= vm.start
