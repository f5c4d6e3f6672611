"""When a lease's VMs run, and the reservations of their overheads (as Haizea's `vm_scheduler.py`).

An advance reservation is mapped at its start, strictly. An immediate or best-effort lease is tried at
its first chance (now; for a suspended lease, now plus the time to move its memory images, or only on
the hosts that hold them when images may not move), then, for a best-effort lease when backfilling
allows one more lease in the future, at each later time a VM reservation ends (with its shutdown or
suspension). A lease that may be suspended takes a placement that ends early if it lasts at least its
scheduling threshold; it is then suspended by that end, and resumes later.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from orchestrator.model.errors import InconsistentSchedule, NotSchedulable
from orchestrator.model.lease import Lease, LeaseType
from orchestrator.model.reservations import Reservation, ReservationKind
from orchestrator.model.resources import NOTHING, Resources, add
from orchestrator.model.states import SUSPENDED_STATES
from orchestrator.model.tolerance import EPSILON
from orchestrator.planning.overheads import Overheads
from tests.oracle.mapper import GreedyMapper, free_at, nodes_that_fit

ZERO = timedelta(0)


def whole_seconds(seconds: float) -> timedelta:
    return timedelta(seconds=math.ceil(seconds - EPSILON))


def metered(amount: Resources, capacity: Resources) -> Resources:
    return Resources(*(a if c > 0 else 0 for a, c in zip(amount, capacity)))


class VMScheduler:
    def __init__(self, table, config, lease_of, preemption):
        self.table = table
        self.config = config
        self.lease_of = lease_of
        self.mapper = GreedyMapper(table, config.policy_host_selection, preemption)
        self.overheads = Overheads(config)
        self.future_leases: set[int] = set()

    # -- overheads (their arithmetic is `Overheads`': plain sums and layouts, no state) -----------------------
    def shutdown_time(self, lease: Lease) -> timedelta:
        return self.overheads.shutdown_time(lease)

    def estimate_suspend(self, lease: Lease) -> timedelta:
        return self.overheads.estimate_suspend(lease)

    def may_suspend(self, lease: Lease) -> bool:
        s = self.config.suspension
        return s == "all" or (s == "serial" and lease.numnodes == 1)

    def can_schedule_in_future(self) -> bool:
        limit = self.config.max_in_future
        return limit == -1 or len(self.future_leases) < limit

    # -- scheduling ------------------------------------------------------------------------------------------
    def schedule(self, lease: Lease, nexttime: datetime, earliest: datetime | None = None):
        """(VM reservation with its overheads, victims, planned in the future?)"""
        if lease.type is LeaseType.ADVANCE_RESERVATION:
            start = lease.request.start
            if start < nexttime:
                raise NotSchedulable("in the past")
            end = start + lease.request.duration
            mapping = self.mapper.map(lease, start, end, strict_end=True, allow_preemption=True,
                                      lease_of=self.lease_of)
            if mapping is None:
                raise NotSchedulable("not enough resources in the requested interval")
            vm = self._vm(lease, start, end, mapping)
            self.plan_shutdown(lease, vm)
            return vm, mapping.victims, False
        allow_future = lease.type is LeaseType.BEST_EFFORT and self.can_schedule_in_future()
        return self._schedule_asap(lease, nexttime, allow_future, earliest)

    def first_chance(self, lease: Lease, nexttime: datetime):
        if lease.state not in SUSPENDED_STATES:
            return nexttime, None
        images = lease.image_hosts()
        if self.config.migration == "no":
            return nexttime, set(images.values())
        return nexttime + self.overheads.estimate_migration(lease, images), None

    def _schedule_asap(self, lease: Lease, nexttime: datetime, allow_future: bool, earliest):
        resuming = lease.state in SUSPENDED_STATES
        remaining = lease.remaining
        shutdown = self.shutdown_time(lease)
        min_duration = self.overheads.scheduling_threshold(lease, resuming)
        first, only_hosts = self.first_chance(lease, nexttime)
        if earliest is not None:
            first = earliest
        duration = remaining + shutdown + (self.overheads.estimate_resume(lease) if resuming else ZERO)
        strict_end = not self.may_suspend(lease)
        found = self._fit_at(lease, [first], duration, min_duration, strict_end, only_hosts)
        in_future = False
        if found is None and allow_future:
            found = self._fit_at(lease, self.future_points(first), duration, min_duration, strict_end, only_hosts)
            in_future = True
            if found is None:
                raise NotSchedulable("does not fit even on an empty site")
        if found is None:
            raise NotSchedulable("not enough resources now")
        start, mapping = found
        vm = self._vm(lease, start, mapping.end, mapping)
        if resuming:
            self._plan_resumption(lease, vm, start)
        if vm.end - vm.start < remaining + shutdown:
            self.plan_suspension(lease, vm, vm.end)
        else:
            vm.end = vm.start + remaining + shutdown
            self.plan_shutdown(lease, vm)
        return vm, [], in_future

    def _fit_at(self, lease, points, duration, min_duration, strict_end, only_hosts):
        for start in points:
            end = start + duration
            mapping = self.mapper.map(lease, start, end, strict_end=strict_end, only_hosts=only_hosts,
                                      min_end=None if strict_end else start + min_duration)
            if mapping is None or (mapping.end < end and mapping.end - start < min_duration):
                continue
            return start, mapping
        return None

    def future_points(self, after: datetime, until: datetime | None = None) -> list[datetime]:
        """The ends, after `after` (and before `until`), of VM reservations with their shutdown or suspension."""
        ends = set()
        for r in self.table.reservations():
            ending = r.kind in (ReservationKind.SHUTDOWN, ReservationKind.SUSPEND) or (
                r.kind is ReservationKind.VM and not r.post)
            if ending and r.end > after and (until is None or r.end < until):
                ends.add(r.end)
        return sorted(ends)

    def could_start_earlier(self, lease: Lease, vm: Reservation, nexttime: datetime, freed_until) -> bool:
        """Room for the lease at the instant of some point before its VMs' planned start (the start of its
        resumption, if it resumes) and before `freed_until`."""
        planned = next((p.start for p in vm.pre if p.kind is ReservationKind.RESUME), vm.start)
        limit = planned if freed_until is None else min(planned, freed_until)
        if nexttime >= limit:
            return False
        for t in [nexttime, *self.future_points(nexttime, limit)]:
            node = lease.request.uniform
            if node is not None:
                if sum(nodes_that_fit(self.table, h, node, t) for h in self.table.hosts) >= lease.numnodes:
                    return True
            else:
                free = NOTHING
                for h in self.table.hosts:
                    free = add(free, free_at(self.table, h, t))
                if all(f + EPSILON >= n for f, n in zip(free, lease.request.total)):
                    return True
        return False

    def can_suspend_by(self, lease: Lease, vm: Reservation, by: datetime, now: datetime) -> bool:
        if by - vm.start < self.overheads.scheduling_threshold(lease, resuming=False):
            return False
        first = self.overheads.suspend_layout(lease, vm.nodes, by)[0][0]
        return first >= now and first >= vm.start

    # -- reservations ----------------------------------------------------------------------------------------
    def _vm(self, lease: Lease, start: datetime, end: datetime, mapping) -> Reservation:
        return Reservation(lease_id=lease.id, kind=ReservationKind.VM, start=start, end=end,
                           resources=mapping.per_host(lease), nodes=dict(mapping.nodes))

    def plan_shutdown(self, lease: Lease, vm: Reservation) -> None:
        start = vm.end - self.shutdown_time(lease)
        vm.post = [Reservation(lease_id=lease.id, kind=ReservationKind.SHUTDOWN, start=start, end=vm.end,
                               resources=dict(vm.resources), nodes=dict(vm.nodes), vm=vm)]
        vm.end = start

    def _held(self, lease: Lease, hosts: dict[str, list[int]], with_image: bool) -> dict[str, Resources]:
        held = {}
        for host, vnodes in hosts.items():
            amount = NOTHING
            for v in vnodes:
                node = lease.request.nodes[v]
                amount = add(amount, Resources(node.cpu, node.memory, node.memory if with_image else 0, 0, 0))
            held[host] = metered(amount, self.table.capacity(host))
        return held

    def plan_suspension(self, lease: Lease, vm: Reservation, by: datetime) -> None:
        if by < vm.start or by > vm.final_end:
            raise InconsistentSchedule("suspension outside the VM reservation")
        steps = self.overheads.suspend_layout(lease, vm.nodes, by)
        vm.post = [Reservation(lease_id=lease.id, kind=ReservationKind.SUSPEND, start=s, end=e,
                               resources=self._held(lease, hosts, with_image=True),
                               nodes={v: h for h, vs in hosts.items() for v in vs}, vm=vm)
                   for s, e, hosts in steps]
        vm.end = vm.post[0].start

    def _plan_resumption(self, lease: Lease, vm: Reservation, at: datetime) -> None:
        steps = self.overheads.resume_layout(lease, vm.nodes, at)
        vm.pre = [Reservation(lease_id=lease.id, kind=ReservationKind.RESUME, start=s, end=e,
                              resources=self._held(lease, hosts, with_image=False),
                              nodes={v: h for h, vs in hosts.items() for v in vs}, vm=vm)
                  for s, e, hosts in steps]
        vm.start = vm.pre[-1].end

    def plan_migration(self, lease: Lease, vm: Reservation, nexttime: datetime) -> list[Reservation]:
        """Memory-image transfers from where the images are to the hosts `vm` resumes on, in rounds in
        which no host sends or receives twice, each as long as its largest image takes."""
        images = lease.image_hosts()
        moves = {v: (images[v], vm.nodes[v]) for v in vm.nodes if images[v] != vm.nodes[v]}
        if not moves:
            return []
        start = max(lease.last_vm.final_end, nexttime)
        if self.config.migration == "yes-notransfer":
            return [Reservation(lease_id=lease.id, kind=ReservationKind.MIGRATE, start=start, end=start,
                                resources={}, transfers=moves, vm=vm)]
        bandwidth = self.config.migration_bandwidth
        transfers = []
        for round_ in self.overheads.migration_rounds(lease, moves):
            length = self.overheads.transfer_time(max(lease.request.nodes[v].memory for v in round_))
            held: dict[str, Resources] = {}
            for src, dst in round_.values():
                held[src] = add(held.get(src, NOTHING), metered(Resources(0, 0, 0, 0, bandwidth),
                                                                self.table.capacity(src)))
                held[dst] = add(held.get(dst, NOTHING), metered(Resources(0, 0, 0, bandwidth, 0),
                                                                self.table.capacity(dst)))
            transfers.append(Reservation(lease_id=lease.id, kind=ReservationKind.MIGRATE, start=start,
                                         end=start + length, resources={h: r for h, r in held.items() if r != NOTHING},
                                         transfers=round_, vm=vm))
            start += length
        return transfers
