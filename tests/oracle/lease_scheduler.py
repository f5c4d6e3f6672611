"""The lease scheduler: admission, the best-effort queue, preemption, events and re-planning (as Haizea's
`lease_scheduler.py`, with leasewise's rules where they differ: docs/scheduling.md).

At every scheduling step, immediate leases are placed (or rejected), then advance reservations, then
every lease of the queue is tried in submit order (lease id on equal submit times); with backfilling
off the pass stops at the first lease that does not fit, and when no more leases may be planned in the
future and no CPU is free anywhere, it stops too. Events at one instant are handled in the order early
ends, ends, starts of shutdowns and suspensions, other starts; within each, in the order the
reservations were put in the plan.
"""

from __future__ import annotations

import heapq
from datetime import datetime

from orchestrator.model.errors import NotSchedulable
from orchestrator.model.lease import Lease, LeaseRequest, LeaseType
from orchestrator.model.reservations import Reservation, ReservationKind, ReservationState
from orchestrator.model.resources import NOTHING, fits, sub
from orchestrator.model.states import LeaseState as S
from orchestrator.model.timeutil import parse_time
from orchestrator.model.tolerance import EPSILON
from orchestrator.planning.policies import ADMISSION, PREEMPTION
from tests.oracle.evacuation import EvacuationPlanner
from tests.oracle.vm_scheduler import ZERO, VMScheduler

EARLY_END, END, FREEING_START, START = 0, 1, 2, 3

SCHEDULED, ACTIVE, DONE = ReservationState.SCHEDULED, ReservationState.ACTIVE, ReservationState.DONE


class LeaseScheduler:
    def __init__(self, table, config):
        self.table = table
        self.config = config
        self.admission = ADMISSION.create(config.policy_admission)
        self.vm = VMScheduler(table, config, self.lease, PREEMPTION.create(config.policy_preemption))
        self.evacuation = EvacuationPlanner(table, config, self.vm)
        self.migrate_first = config.preemption_mode == "migrate-first"
        self.leases: dict[int, Lease] = {}
        self.pending: list[Lease] = []
        self.queue: list[Lease] = []
        self.events: list[tuple] = []
        self.planned = 0   # reservations put in the plan so far (orders events at one instant)
        self.next_id = 1
        self.counters = {"suspensions": 0, "requeues": 0, "migrations": 0, "image_migrations": 0,
                         "failed_migrations": 0, "premature_ends": 0, "predicted_downtime_ms_total": 0.0}

    def lease(self, lease_id: int) -> Lease:
        return self.leases[lease_id]

    # -- arrivals ----------------------------------------------------------------------------------------------
    def submit(self, request: LeaseRequest, now: datetime) -> Lease:
        lease = Lease(id=self.next_id, request=request)
        self.next_id += 1
        lease.history.append((now, S.NEW))
        self.leases[lease.id] = lease
        reason = self.admission.reject_reason(lease) or self.misfit(lease)
        if reason:
            lease.reason = reason
            lease.set_state(S.REJECTED, now)
        else:
            lease.set_state(S.PENDING, now)
            self.pending.append(lease)
        return lease

    def misfit(self, lease: Lease) -> str | None:
        """Why the lease could not run even on an empty site (first fit, hosts in site order), or None."""
        capacities = [self.table.capacity(h) for h in self.table.hosts]
        for i, node in enumerate(lease.request.nodes):
            for field in range(5):
                if node[field] > max(c[field] for c in capacities) + EPSILON:
                    return f"nodes[{i}] is larger than any host"
        placed = 0
        for cap in capacities:
            free = cap
            for node in lease.request.nodes[placed:]:
                if not fits(NOTHING, node, free):
                    break
                free = sub(free, node)
                placed += 1
        return None if placed == lease.numnodes else "does not fit on the site even when it is empty"

    # -- scheduling --------------------------------------------------------------------------------------------
    def schedule(self, now: datetime) -> None:
        nexttime = now + self.config.non_schedulable_interval
        pending, self.pending = self.pending, []
        for kind in (LeaseType.IMMEDIATE, LeaseType.ADVANCE_RESERVATION):
            for lease in pending:
                if lease.type is kind:
                    try:
                        self.schedule_lease(lease, nexttime, now)
                    except NotSchedulable as exc:
                        lease.reason = str(exc)
                        lease.set_state(S.REJECTED, now)
        for lease in pending:
            if lease.type is LeaseType.BEST_EFFORT:
                lease.set_state(S.QUEUED, now)
                self.queue.append(lease)
        self.process_queue(nexttime, now)

    def process_queue(self, nexttime: datetime, now: datetime) -> None:
        queue = sorted(self.queue, key=lambda l: (l.submit_time, l.id))
        self.queue = []
        kept = []
        done = False
        for lease in queue:
            if not done and not self.vm.can_schedule_in_future() and self.site_full(nexttime):
                done = True
            if done:
                kept.append(lease)
                continue
            try:
                self.schedule_lease(lease, nexttime, now)
            except NotSchedulable:
                kept.append(lease)
                if self.config.max_in_future == 0:
                    done = True
        self.queue = kept + self.queue   # (with any lease requeued during the pass)

    def site_full(self, t: datetime) -> bool:
        return all(self.table.capacity(h).cpu - self.table.usage_at(h, t).cpu <= EPSILON for h in self.table.hosts)

    def schedule_lease(self, lease: Lease, nexttime: datetime, now: datetime) -> None:
        resuming = lease.state is S.SUSPENDED_QUEUED
        earliest = None
        for _ in range(8):
            vm, victims, in_future = self.vm.schedule(lease, nexttime, earliest)
            transfers = []
            if resuming and self.config.migration != "no":
                transfers = self.vm.plan_migration(lease, vm, nexttime)
                if transfers and transfers[-1].end > vm.first_start:
                    earliest = transfers[-1].end
                    continue
            break
        else:
            raise NotSchedulable("memory-image transfers could not be fitted before resumption")
        continuation = self.evacuation_instead_of_suspension(lease, vm, nexttime)
        for victim in victims:
            self.unplan(victim)
        vm.pre = transfers + vm.pre
        for rr in vm.pre + vm.post:
            rr.vm = vm
        lease.reservations.append(vm)
        if continuation is not None:
            lease.reservations.append(continuation)
        self.mark_premature_end(lease)
        for planned in lease.open_vms():
            for part in planned.all_parts():
                self.commit(part)
        needed = set(vm.resources)
        # while one victim gives way, the others still hold their plans (on the new lease's hosts only
        # until its start)
        holds = {victim.id: self.hold(victim, vm.start, needed) for victim in victims}
        for victim in victims:
            for rr in holds.pop(victim.id):
                self.table.remove(rr)
            self.preempt(victim, vm.start, needed, now)
        if in_future:
            self.vm.future_leases.add(lease.id)
        lease.set_state(S.SUSPENDED_SCHEDULED if resuming else S.SCHEDULED, now)

    def hold(self, victim: Lease, at: datetime, needed: set[str]) -> list[Reservation]:
        holds = []
        for vm in victim.open_vms():
            for rr in vm.all_parts():
                if rr.state is DONE:
                    continue
                on_needed = {h: r for h, r in rr.resources.items() if h in needed}
                elsewhere = {h: r for h, r in rr.resources.items() if h not in needed}
                for held, end in ((on_needed, min(rr.end, at)), (elsewhere, rr.end)):
                    if held and end > rr.start:
                        holds.append(self.table.add(Reservation(lease_id=victim.id, kind=ReservationKind.UNAVAILABLE,
                                                                start=rr.start, end=end, resources=held)))
        return holds

    def evacuation_instead_of_suspension(self, lease: Lease, vm: Reservation, nexttime: datetime):
        """migrate-first: a placement to be suspended on some hosts moves those VMs live to hosts free until
        its end instead, when there is such an evacuation (its continuation is returned)."""
        if not self.migrate_first or not vm.is_suspending:
            return None
        needed_by = vm.final_end
        end = vm.start + lease.remaining + self.vm.shutdown_time(lease)
        avoid = {h for h, amount in vm.resources.items() if not self.table.fits(h, amount, needed_by, end)}
        if not avoid:
            return None
        evacuation = self.evacuation.plan(lease, vm, needed_by, avoid, nexttime)
        if evacuation is None:
            return None
        self.vm.plan_shutdown(lease, evacuation.continuation)
        return evacuation.continuation

    def mark_premature_end(self, lease: Lease) -> None:
        """Simulation: where the lease really ends inside its open VM reservation."""
        vms = lease.open_vms()
        for vm in vms:
            vm.premature_end = None
        if lease.remaining_real is None or not vms:
            return
        ends = vms[0].start + max(lease.remaining_real, ZERO)
        for vm in vms:
            if ends < vm.end or (ends == vm.end and vm.is_suspending):   # (done as its suspension begins)
                vm.premature_end = max(ends, vm.start)
                return

    def unplan(self, lease: Lease) -> None:
        for vm in lease.open_vms():
            for rr in vm.all_parts():
                if rr in self.table:
                    self.table.remove(rr)

    def replan(self, lease: Lease) -> None:
        self.mark_premature_end(lease)
        for vm in lease.open_vms():
            for rr in vm.all_parts():
                if rr.state is not DONE and rr not in self.table:
                    self.commit(rr)

    # -- preemption --------------------------------------------------------------------------------------------
    def preempt(self, lease: Lease, at: datetime, needed: set[str], now: datetime) -> None:
        """Make the lease (its plan out of the table) leave the `needed` hosts by `at`: evacuate it live
        (migrate-first), else suspend it to be done by then, else requeue it. A lease needed before its
        planned live migration would switch over stays where it is and is suspended there, if it can."""
        vm = lease.last_vm
        vms = lease.open_vms()
        forgotten = len(vms) == 2 and vms[1].pre[0].state is SCHEDULED and vms[1].start >= at
        if forgotten:
            if self.stay_and_suspend(lease, now):
                return
            vm = vms[0]
        if self.migrate_first and lease.state is S.ACTIVE and lease.running_vm is vm and not forgotten:
            evacuation = self.evacuation.plan(lease, vm, at, needed, now + self.config.non_schedulable_interval)
            if evacuation is not None:
                self.vm.plan_shutdown(lease, evacuation.continuation)
                lease.reservations.append(evacuation.continuation)
                self.replan(lease)
                return
        by = min(vm.final_end, at)
        if ((vm.state is SCHEDULED and vm.start >= at) or not self.vm.may_suspend(lease)
                or lease.state not in (S.ACTIVE, S.SCHEDULED, S.RESUMED_READY)
                or not self.vm.can_suspend_by(lease, vm, by, now)):
            self.requeue(lease, now)
            return
        self.vm.plan_suspension(lease, vm, by)
        self.replan(lease)

    def stay_and_suspend(self, lease: Lease, now: datetime) -> bool:
        """Drop the lease's planned evacuation and suspend it where it runs by when its hosts are needed."""
        vm, continuation = lease.open_vms()
        needed_by = parse_time(continuation.pre[0].extra["needed_by"], "needed_by")
        lease.reservations.remove(continuation)
        vm.end = max(vm.end, needed_by)
        vm.post = []
        if self.vm.may_suspend(lease) and self.vm.can_suspend_by(lease, vm, needed_by, now):
            self.vm.plan_suspension(lease, vm, needed_by)
            if all(self.table.fits(h, amount, max(rr.start, now), rr.end)
                   for rr in vm.all_parts() for h, amount in rr.resources.items() if rr.end > now):
                self.replan(lease)
                return True
        return False

    def requeue(self, lease: Lease, now: datetime) -> None:
        running = lease.state in (S.ACTIVE, S.RESUMING, S.RESUMED_READY)
        self.drop_plan(lease, now)
        if running:
            lease.accumulated = ZERO
            lease.set_state(S.QUEUED, now)
        elif lease.state in (S.SUSPENDED_SCHEDULED, S.MIGRATING):
            lease.set_state(S.SUSPENDED_QUEUED, now)
        else:
            lease.set_state(S.QUEUED, now)
        lease.requeues += 1
        self.counters["requeues"] += 1
        self.queue.append(lease)

    def drop_plan(self, lease: Lease, now: datetime) -> None:
        """Take the lease's unfinished reservations out; a running VM reservation ends now. Image
        transfers done for a resumption that is dropped stay, after the suspension they follow."""
        self.vm.future_leases.discard(lease.id)
        for vm in reversed(lease.open_vms()):
            for rr in vm.all_parts():
                if rr in self.table:
                    self.table.remove(rr)
            if vm.state is ACTIVE:
                vm.end = now
                vm.post = []
                vm.state = DONE
            elif vm.state is SCHEDULED and vm is lease.reservations[-1]:
                lease.reservations.pop()
                done = [p for p in vm.pre if p.kind is ReservationKind.MIGRATE and p.state is DONE]
                if done and lease.reservations:
                    for p in done:
                        p.vm = lease.reservations[-1]
                    lease.reservations[-1].post += done

    # -- re-planning -------------------------------------------------------------------------------------------
    def reevaluate(self, now: datetime, freed_until: datetime) -> None:
        """Capacity freed until `freed_until`: leases planned in the future move earlier if they can."""
        nexttime = now + self.config.non_schedulable_interval
        for lease in sorted((self.leases[i] for i in self.vm.future_leases), key=lambda l: (l.submit_time, l.id)):
            vms = lease.open_vms()
            if not vms or lease.state not in (S.SCHEDULED, S.SUSPENDED_SCHEDULED):
                continue
            if any(rr.state is not SCHEDULED and not (rr.kind is ReservationKind.MIGRATE and rr.state is DONE)
                   for vm in vms for rr in vm.all_parts()):
                continue
            if not self.vm.could_start_earlier(lease, vms[0], nexttime, freed_until):
                continue
            self.drop_plan(lease, now)
            lease.set_state(S.QUEUED if lease.state is S.SCHEDULED else S.SUSPENDED_QUEUED, now)
            try:
                self.schedule_lease(lease, nexttime, now)
            except NotSchedulable:
                self.queue.append(lease)

    # -- events ------------------------------------------------------------------------------------------------
    def commit(self, rr: Reservation) -> None:
        self.table.add(rr)
        freeing = rr.kind in (ReservationKind.SHUTDOWN, ReservationKind.SUSPEND)
        self._event(rr.start, FREEING_START if freeing else START, rr)
        self._event(rr.end, END, rr)
        if rr.premature_end is not None:
            self._event(rr.premature_end, EARLY_END, rr)

    def _event(self, t: datetime, phase: int, rr: Reservation) -> None:
        self.planned += 1
        heapq.heappush(self.events, (t, phase, self.planned, rr))

    def _due(self, t: datetime, phase: int, rr: Reservation) -> bool:
        if rr not in self.table:
            return False
        if phase >= FREEING_START:
            return rr.state is SCHEDULED and rr.start == t
        if phase == END:
            return rr.state is ACTIVE and rr.end == t
        return rr.state is ACTIVE and rr.premature_end == t and rr.kind is ReservationKind.VM

    def next_event_time(self) -> datetime | None:
        while self.events:
            t, phase, _, rr = self.events[0]
            if self._due(t, phase, rr) or (phase < FREEING_START and rr in self.table and rr.state is SCHEDULED):
                return t
            heapq.heappop(self.events)
        return None

    def process_events(self, now: datetime) -> bool:
        handled = False
        while self.events and self.events[0][0] <= now:
            t, phase, _, rr = heapq.heappop(self.events)
            if not self._due(t, phase, rr):
                continue
            handled = True
            if phase == EARLY_END:
                self.early_end(rr, now)
            elif phase == END:
                self.end(rr, now)
            else:
                self.start(rr, now)
        return handled

    def start(self, rr: Reservation, now: datetime) -> None:
        lease = self.leases[rr.lease_id]
        rr.state = ACTIVE
        if rr.kind is ReservationKind.VM:
            self.vm.future_leases.discard(lease.id)   # (planned in the future until its VMs start)
            if not rr.continues:   # (a continuation's VMs arrived by live migration: they run already)
                lease.set_state(S.ACTIVE, now)
            if lease.start_time is None:
                lease.start_time = now
            if rr.premature_end is not None and rr.premature_end <= now:   # (nothing left to run)
                self.early_end(rr, now)
                return
        elif rr.kind is ReservationKind.SUSPEND:
            if rr is rr.vm.post[0]:
                lease.set_state(S.SUSPENDING, now)
        elif rr.kind is ReservationKind.RESUME:
            if lease.state is not S.RESUMING:
                lease.set_state(S.RESUMING, now)
        elif rr.kind is ReservationKind.MIGRATE:
            if lease.state is not S.MIGRATING:
                lease.set_state(S.MIGRATING, now)
        if rr.end <= now and rr in self.table:
            self.end(rr, now)

    def end(self, rr: Reservation, now: datetime) -> None:
        lease = self.leases[rr.lease_id]
        rr.state = DONE
        self.table.remove(rr)
        if rr.kind is ReservationKind.VM:
            lease.accumulated += now - rr.start
        elif rr.kind is ReservationKind.SHUTDOWN:
            self.finish(lease, now)
        elif rr.kind is ReservationKind.SUSPEND:
            if rr is rr.vm.post[-1]:
                lease.set_state(S.SUSPENDED_PENDING, now)
                lease.suspensions += 1
                self.counters["suspensions"] += 1
                lease.set_state(S.SUSPENDED_QUEUED, now)
                self.queue.append(lease)
        elif rr.kind is ReservationKind.RESUME:
            if rr is [p for p in rr.vm.pre if p.kind is ReservationKind.RESUME][-1]:
                lease.set_state(S.RESUMED_READY, now)
        elif rr.kind is ReservationKind.MIGRATE:
            lease.migrations += len(rr.transfers)
            self.counters["image_migrations"] += 1
            if rr is [p for p in rr.vm.pre if p.kind is ReservationKind.MIGRATE][-1]:
                lease.set_state(S.SUSPENDED_SCHEDULED, now)
        elif rr.kind is ReservationKind.LIVE_MIGRATE:
            lease.migrations += len(rr.transfers)
            self.counters["migrations"] += len(rr.transfers)
            self.counters["predicted_downtime_ms_total"] += sum(
                p["downtime_ms"] for p in rr.extra.get("predicted", {}).values())

    def early_end(self, vm: Reservation, now: datetime) -> None:
        """The lease's work is done before its VM reservation is: it stops now, and capacity frees."""
        lease = self.leases[vm.lease_id]
        freed_until = lease.open_vms()[-1].final_end
        for later in [v for v in lease.open_vms() if v is not vm and v.start >= vm.end]:
            for rr in later.all_parts():   # (an evacuation planned after the real end is not needed)
                if rr in self.table:
                    self.table.remove(rr)
            lease.reservations.remove(later)
        for rr in vm.post:
            if rr in self.table:
                self.table.remove(rr)
        vm.post = []
        vm.premature_end = None
        self.counters["premature_ends"] += 1
        self.table.remove(vm)
        vm.end = now
        vm.state = DONE
        lease.accumulated += now - vm.start
        self.finish(lease, now)
        self.reevaluate(now, freed_until)

    def finish(self, lease: Lease, now: datetime) -> None:
        self.vm.future_leases.discard(lease.id)
        lease.set_state(S.DONE, now)
