"""The lease scheduler: admission, the best-effort queue, preemption, and reacting to reservation events.

Advance reservations and immediate leases are scheduled (or rejected) as they arrive; best-effort leases
wait in a queue processed in submit order (stopping at the first failure when backfilling is off). An AR
that needs capacity held by preemptible best-effort leases suspends them so that the suspension is done by
its start, or, when that is impossible or too short to be worth it, cancels and requeues them. Suspended
leases are requeued and resumed later, possibly on other hosts (their memory images migrated first).
When a lease ends early or is cancelled, the best-effort leases planned in the future are re-planned so
the freed capacity is used.

Events (a reservation starting or ending, a VM ending early: `events.PlanEvents`) are handled by
`process_events(now)`; `next_event_time()` says when the next one is due. The clock that drives it
(simulated or real) is the caller's. Around it: `queue` (the best-effort queue and a pass's failure memo),
`victims` (how preempted leases give way), `drain` (emptying a host), `corrections` (what the hosts report
back: failed operations, early ends, lost or moved VMs, longer leases); they ask the scheduler through
`planner.Planner`.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import replace
from datetime import datetime, timedelta

from orchestrator.config import SchedulingConfig
from orchestrator.model.errors import (
    InconsistentSchedule,
    InvalidRequest,
    NotSchedulable,
    Unschedulable,
)
from orchestrator.model.lease import Lease, LeaseRequest, LeaseType
from orchestrator.model.reservations import (
    Reservation,
    ReservationKind,
    ReservationState,
)
from orchestrator.model.resources import Resources
from orchestrator.model.states import LeaseState as S
from orchestrator.model.timeutil import ZERO
from orchestrator.planning.enactment import (
    EnactmentError,
    Enactor,
    NullEnactor,
    Operation,
    operations_of,
)
from orchestrator.planning.drain import DrainPlan, plan_drain
from orchestrator.planning.evacuation import Evacuation, EvacuationPlanner
from orchestrator.planning.mapper import Mapper
from orchestrator.planning.policies import ADMISSION, HOST_SELECTION, PREEMPTION
from orchestrator.planning import corrections, drain
from orchestrator.planning.corrections import enactment_error
from orchestrator.planning.events import EARLY_END, END, PlanEvents
from orchestrator.planning.policies.host_filter import HostFacts, HostFilters
from orchestrator.planning.image_filter import NO_IMAGE_FILTER, ImageHolders
from orchestrator.planning.queue import Entry, FailureMemo, LeaseQueue
from orchestrator.planning.slottable.table import SlotTable
from orchestrator.planning.slottable.core import HostTimeline
from orchestrator.planning.victims import evacuation_instead_of_suspension, hold, preempt
from orchestrator.planning.vm_scheduler import VMScheduler

log = logging.getLogger(__name__)


class LeaseScheduler:
    def __init__(self, table: SlotTable, config: SchedulingConfig, enactor: Enactor | None = None,
                 images: ImageHolders = NO_IMAGE_FILTER):
        """`images`: the hosts holding each image copied to hosts' own storage (its leases go only there)."""
        self.table = table
        self.config = config
        self.enactor: Enactor = enactor or NullEnactor()
        self._operations = operations_of(self.enactor)
        self.admission = ADMISSION.create(config.policy_admission)
        self.preemption = PREEMPTION.create(config.policy_preemption)
        self.host_selection = HOST_SELECTION.create(config.policy_host_selection)
        #: what the filter step knows of the hosts (their properties: set before scheduling)
        self.host_facts = HostFacts()
        self.mapper = Mapper(table, self.host_selection, self.preemption, HostFilters(self.host_facts), images)
        self.vm = VMScheduler(table, self.mapper, config, self.lease)
        self.evacuation = EvacuationPlanner(table, config, self.vm.overheads, self.host_selection,
                                            self.vm.may_suspend, self.mapper.allowed_hosts, images)
        self.leases: dict[int, Lease] = {}
        self.pending: list[Lease] = []
        self.queue = LeaseQueue()
        self.events = PlanEvents(table)
        self._next_id = 1
        #: what the scheduler remembers of the table, forgotten as the table tells of a change (`listen`):
        #: whether capacity was freed (or hosts changed) since the last pass over the queue
        self._queue_dirty = False
        table.listen(self)
        #: what lets a pass over the queue see a change other than a reservation removed (see
        #: `_process_queue`): the next schedulable time of the last pass, when it moves with time; and
        #: whether a suspended lease whose images may move waits there
        self._queue_time: datetime | None = None
        self._queue_waits_on_time = config.non_schedulable_interval > ZERO
        self._queue_resumes = False
        #: drained hosts: host -> the reservation that holds all of it from the drain on
        self.blocks: dict[str, Reservation] = {}
        #: migrations: VMs live-migrated; image_migrations: rounds of suspended memory images moved cold
        self.counters = {"suspensions": 0, "requeues": 0, "migrations": 0, "image_migrations": 0,
                         "failed_migrations": 0, "premature_ends": 0, "predicted_downtime_ms_total": 0.0}
        #: when a list, every lease that reaches a final state is appended to it, for a caller that
        #: hands finished leases on and drops them (a long simulation's memory stays flat)
        self.finished: list[Lease] | None = None

    # -- leases -------------------------------------------------------------------------------------------
    def set_image_holders(self, images: ImageHolders) -> None:
        """Which hosts hold each copied image, from now on (the queue is looked at again: a lease waiting
        for a copy may fit now)."""
        self.mapper.images = self.evacuation.images = images
        self._queue_dirty = True

    def touch(self, lease: Lease) -> None:
        """Note a change to the lease that the slot table does not see (a reservation's state, a longer
        request), for a store that writes back only the leases that changed."""
        changed = self.table.changed_leases
        if changed is not None:
            changed.add(lease.id)

    def set_state(self, lease: Lease, target: S, at: datetime) -> None:
        lease.set_state(target, at)
        self.touch(lease)

    def lease(self, lease_id: int) -> Lease:
        try:
            return self.leases[lease_id]
        except KeyError:
            raise InvalidRequest("lease", f"no lease with id {lease_id}") from None

    def submit(self, request: LeaseRequest, now: datetime, lease_id: int | None = None) -> Lease:
        """Admit a request: it becomes pending (scheduled at the next `schedule`) or rejected at once."""
        if lease_id is None:
            lease_id = self._next_id
        if lease_id in self.leases:
            raise InvalidRequest("lease", f"id {lease_id} is already taken")
        self._next_id = max(self._next_id, lease_id + 1)
        lease = Lease(id=lease_id, request=request)
        lease.history.append((now, S.NEW))
        self.touch(lease)
        self.leases[lease.id] = lease
        reason = (self.admission.reject_reason(lease) or self.table.misfit(lease.request.nodes)
                  or self.mapper.misfit(lease))
        if reason:
            self._reject(lease, reason, now)
        else:
            self.set_state(lease, S.PENDING, now)
            self.pending.append(lease)
        return lease

    # -- what the slot table tells (`table.TableListener`) ------------------------------------------------
    def reservation_changed(self, hosts: Collection[str], rows: list[int], ks: int, ke: int, added: bool) -> None:
        if not added:   # (capacity freed: a lease that did not fit may fit now)
            self._queue_dirty = True

    def hosts_added(self, timelines: list[HostTimeline]) -> None:
        self._queue_dirty = True
        self.host_facts.version += 1   # (the filters' answers name the table's hosts)

    def host_removed(self, name: str) -> None:
        self._queue_dirty = True
        self.host_facts.version += 1

    def _reject(self, lease: Lease, reason: str, now: datetime) -> None:
        lease.reason = reason
        self.set_state(lease, S.REJECTED, now)
        self.ended(lease)
        log.info("lease %s rejected: %s", lease.id, reason)

    # -- scheduling ---------------------------------------------------------------------------------------
    def nexttime(self, now: datetime) -> datetime:
        nexttime = now + self.config.non_schedulable_interval
        self.table.present = nexttime
        return nexttime

    def schedule(self, now: datetime) -> None:
        """Place what arrived: immediate leases, then advance reservations, then the best-effort queue."""
        nexttime = self.nexttime(now)
        pending, self.pending = self.pending, []
        for kind in (LeaseType.IMMEDIATE, LeaseType.ADVANCE_RESERVATION):
            for lease in pending:
                if lease.type is kind:
                    try:
                        self.place(lease, nexttime, now)
                    except NotSchedulable as exc:
                        self._reject(lease, str(exc), now)
        for lease in pending:
            if lease.type is LeaseType.BEST_EFFORT:
                self.set_state(lease, S.QUEUED, now)
                self.enqueue(lease)
        self._process_queue(nexttime, now)

    def forget_future(self, lease: Lease) -> None:
        """The lease no longer counts against the backfilling budget (it started, ended or was dropped)."""
        if lease.id in self.vm.future_leases:
            self.vm.future_leases.discard(lease.id)
            self._queue_dirty = True

    def enqueue(self, lease: Lease) -> None:
        self._queue_dirty = True
        self.queue.add(lease)


    def _process_queue(self, nexttime: datetime, now: datetime) -> None:
        """One pass over the queue in submit order. Skipped when nothing changed since the last pass:
        with no reservation removed (none ended, was cut or dropped) every host's usage is the same or
        higher at every future instant, so every lease that did not fit then does not fit now. Not so
        with a non-schedulable interval (a lease's first chance then moves on with time: a new time is a
        change), nor for a suspended lease whose images may move (whether its transfers end in time
        depends on where it would resume, so more usage elsewhere may let it in: never skipped)."""
        if not self.queue:
            return
        if not (self._queue_dirty or self._queue_resumes
                or (self._queue_waits_on_time and nexttime != self._queue_time)):
            return
        self._queue_time = nexttime
        queue, resuming = self.queue.take()
        kept: list[Entry] = []
        stop = False
        memo = FailureMemo(self.vm.shortest_run)
        full = None
        room: dict[Resources, float] = {}   # nodes of a size that fit now, added up (until a lease is placed)
        only_now = not self.vm.can_schedule_in_future()
        strict_fcfs = self.config.max_in_future == 0   # (backfilling off: stop at the first lease kept)
        for i, entry in enumerate(queue):
            lease = entry[2]
            if only_now and not stop:
                if full is None:
                    full = self._site_full(nexttime)
                    room.clear()
                # (no CPU free now, and a pass frees none: no lease from here on can start)
                stop = full
            if stop:
                kept += queue[i:]
                break
            if only_now:
                node = lease.request.uniform
                if node is not None and lease.state is S.QUEUED:
                    # the first thing scheduling would try, remembered per node size: asking it here
                    # spares the planning machinery the many leases that cannot start now (and makes
                    # the memo's "instant" entries needless for these)
                    total = room.get(node)
                    if total is None:
                        total = room[node] = self.table.states_at(nexttime).room(node).total
                    ruled_out = total < lease.numnodes or memo.rules_out(lease)
                else:
                    ruled_out = memo.rules_out(lease)
                    if not ruled_out and not self.vm.could_start_now(lease, nexttime):
                        ruled_out = True
                        memo.record(lease, Unschedulable.INSTANT)
                if ruled_out:
                    kept.append(entry)
                    stop = strict_fcfs
                    continue
            try:
                resumes = lease.state is S.SUSPENDED_QUEUED
                self.place(lease, nexttime, now)
                full = None
                resuming -= resumes
            except NotSchedulable as exc:
                kept.append(entry)
                memo.record(lease, exc.kind)
                stop = strict_fcfs
            only_now = not self.vm.can_schedule_in_future()
        self.queue.put_back(kept, resuming)
        self._queue_dirty = False
        self._queue_resumes = self.config.migration == "yes" and self.queue.resuming > 0

    def _site_full(self, t: datetime) -> bool:
        """No CPU free anywhere at t: nothing can start now (the reference's shortcut)."""
        return self.mapper.site_full(t)

    def place(self, lease: Lease, nexttime: datetime, now: datetime) -> None:
        """Plan `lease`, preempt what must give way, and commit its reservations (or raise NotSchedulable)."""
        resuming = lease.state is S.SUSPENDED_QUEUED
        earliest = None   # (the first try: from the estimate of the image transfers)
        for _ in range(8):
            placement = self.vm.schedule(lease, nexttime, earliest)
            migrations = []
            if resuming and self.config.migration != "no":
                migrations = self.vm.plan_migration(lease, placement.vm, nexttime)
                if migrations and migrations[-1].end > placement.vm.first_start:
                    # the transfers take longer than estimated: look again from their end
                    earliest = migrations[-1].end
                    continue
            break
        else:
            raise NotSchedulable("memory-image transfers could not be fitted before resumption")
        vm = placement.vm
        if lease.request.earliest:   # (found: from now on an advance reservation like any other)
            lease.request = replace(lease.request, start=vm.start, earliest=False, not_after=None)
        continuation = evacuation_instead_of_suspension(self, lease, vm, nexttime)
        # the victims' plans come out first, the new lease goes in, then each victim is re-planned
        # around it (evacuated, suspended or requeued) against the table as it now is
        for victim in placement.victims:
            self.unplan(victim)
        vm.pre = migrations + vm.pre
        for rr in vm.pre + vm.post:
            rr.vm = vm
        lease.reservations.append(vm)
        if continuation is not None:
            lease.reservations.append(continuation)
        self._set_premature_end(lease)
        for planned in lease.open_vms():
            for rr in planned.all_parts():
                self.commit(rr)
        needed = set(vm.resources)
        # while one victim gives way (an evacuation may move it onto other hosts), the others still hold
        # what they have until they give way: their plans, cut at the new lease's start on its hosts
        holds = {victim.id: hold(self, victim, vm.start, needed) for victim in placement.victims}
        for victim in placement.victims:
            for rr in holds.pop(victim.id):
                self.table.remove(rr)
            preempt(self, victim, vm.start, needed, now)
        if placement.in_future:
            self.vm.future_leases.add(lease.id)
        if resuming:
            self.set_state(lease, S.SUSPENDED_SCHEDULED, now)
        else:
            self.set_state(lease, S.SCHEDULED, now)
        if log.isEnabledFor(logging.DEBUG):   # (vm.hosts sorts: not for a message nobody reads)
            log.debug("lease %s scheduled %s-%s on %s", lease.id, vm.start, vm.end, vm.hosts)

    def _set_premature_end(self, lease: Lease) -> None:
        """Simulation: mark where the lease really ends inside its open VM reservations (the run time
        not yet accounted for starts at the first one's start; an evacuated lease's two are contiguous)."""
        self.touch(lease)
        vms = lease.open_vms()
        for vm in vms:
            vm.premature_end = None
        remaining = lease.remaining_real
        if remaining is None or not vms:
            return
        ends = vms[0].start + max(remaining, ZERO)
        for vm in vms:
            # (work done just as a suspension would begin: the lease ends there, it is not suspended)
            if ends < vm.end or (ends == vm.end and vm.is_suspending):
                vm.premature_end = max(ends, vm.start)
                return

    def unplan(self, lease: Lease) -> None:
        """Take every unfinished part of the lease's plan out of the slot table (the objects stay)."""
        for vm in lease.open_vms():
            for rr in vm.all_parts():
                if rr in self.table:
                    self.uncommit(rr)

    def replan(self, lease: Lease) -> None:
        """Put the unfinished parts of the lease's plan (back) into the slot table."""
        self._set_premature_end(lease)
        for vm in lease.open_vms():
            for rr in vm.all_parts():
                if rr.state is not ReservationState.DONE and rr not in self.table:
                    self.commit(rr)

    def commit_evacuation(self, lease: Lease, evacuation: Evacuation) -> None:
        continuation = evacuation.continuation
        self.vm.plan_shutdown(lease, continuation)
        lease.reservations.append(continuation)
        self.replan(lease)

    def requeue(self, lease: Lease, now: datetime) -> None:
        """Drop the lease's plan and put it back in the queue; running VMs are killed (their work lost)."""
        running = lease.state in (S.ACTIVE, S.RESUMING, S.RESUMED_READY)
        vm = lease.last_vm
        self.drop_plan(lease, now)
        if running:
            self._enact(Operation.KILL_VMS, lease, vm)
            lease.accumulated = ZERO
            self.set_state(lease, S.QUEUED, now)
        elif lease.state in (S.SUSPENDED_SCHEDULED, S.MIGRATING):
            self.set_state(lease, S.SUSPENDED_QUEUED, now)
        else:
            self.set_state(lease, S.QUEUED, now)
        lease.requeues += 1
        self.counters["requeues"] += 1
        self.enqueue(lease)

    def drop_plan(self, lease: Lease, now: datetime) -> None:
        """Remove every not-yet-finished reservation of the lease; a running VM reservation is cut at now."""
        self.touch(lease)
        self.forget_future(lease)
        for vm in reversed(lease.open_vms()):
            for rr in vm.all_parts():
                if rr in self.table:
                    self.uncommit(rr)
            if vm.state is ReservationState.ACTIVE:
                vm.end = now
                vm.post = []
                vm.state = ReservationState.DONE
            elif vm.state is ReservationState.SCHEDULED and vm is lease.reservations[-1]:
                # (the VM reservation before a suspension, or one being evacuated, stays in the history)
                lease.reservations.pop()
                self._keep_done_transfers(lease, vm)

    @staticmethod
    def _keep_done_transfers(lease: Lease, dropped: Reservation) -> None:
        """Image transfers done for a resumption that is no longer planned moved the images all the
        same: they stay in the plan, after the suspension whose images they moved (where
        `Lease.image_hosts` reads them)."""
        done = [p for p in dropped.pre if p.kind is ReservationKind.MIGRATE and p.state is ReservationState.DONE]
        if not done or not lease.reservations:
            return
        suspended = lease.reservations[-1]
        for part in done:
            part.vm = suspended
        suspended.post += done

    # -- cancel / re-plan ----------------------------------------------------------------------------------------
    def cancel(self, lease_id: int, now: datetime) -> Lease:
        lease = self.lease(lease_id)
        if lease.is_final:
            raise InvalidRequest("lease", f"lease {lease_id} is already {lease.state}")
        running = lease.state in (S.ACTIVE, S.SUSPENDING, S.RESUMING, S.RESUMED_READY)
        vm = lease.last_vm
        freed_until = vm.final_end if vm is not None and vm in self.table else now
        if lease in self.pending:
            self.pending.remove(lease)
        self.queue.remove(lease)
        self.drop_plan(lease, now)
        if running and vm is not None:
            self._enact(Operation.KILL_VMS, lease, vm)
        self.set_state(lease, S.CANCELLED, now)
        self.ended(lease)
        self.reevaluate(now, freed_until)
        return lease

    def reevaluate(self, now: datetime, freed_until: datetime | None = None) -> None:
        """Re-plan best-effort leases planned in the future, so capacity freed early is used.

        `freed_until`: the capacity that became free lies in [now, freed_until); a lease can only move
        to a start inside that range (elsewhere nothing changed since it was planned)."""
        nexttime = self.nexttime(now)
        future = sorted((self.leases[i] for i in self.vm.future_leases), key=lambda l: (l.submit_time, l.id))
        for lease in future:
            vms = lease.open_vms()   # (two when a live migration is planned after the start)
            # (nothing of it under way: parts all to come, but for image transfers done already)
            if not vms or any(rr.state is not ReservationState.SCHEDULED
                              and not (rr.kind is ReservationKind.MIGRATE and rr.state is ReservationState.DONE)
                              for vm in vms for rr in vm.all_parts()):
                continue
            vm = vms[0]
            if lease.state not in (S.SCHEDULED, S.SUSPENDED_SCHEDULED):
                continue
            if not self.vm.could_start_earlier(lease, vm, nexttime, freed_until):
                continue
            self.drop_plan(lease, now)
            self.set_state(lease, S.QUEUED if lease.state is S.SCHEDULED else S.SUSPENDED_QUEUED, now)
            try:
                self.place(lease, nexttime, now)
            except NotSchedulable:
                self.enqueue(lease)

    # -- events ------------------------------------------------------------------------------------------------
    def commit(self, rr: Reservation) -> None:
        self.table.add(rr)
        self.events.add(rr)

    def uncommit(self, rr: Reservation) -> None:
        self.table.remove(rr)

    def next_event_time(self) -> datetime | None:
        return self.events.next_time()

    def process_events(self, now: datetime) -> bool:
        """Handle every event due at or before `now`; True if any was handled."""
        handled = False
        while (event := self.events.pop_due(now)) is not None:
            kind, rr = event
            handled = True
            if kind == EARLY_END:
                self.handle_premature_end(rr, now)
            elif kind == END:
                self._handle_end(rr, now)
            else:
                self._handle_start(rr, now)
        return handled

    def _lease_of(self, rr: Reservation) -> Lease:
        return self.leases[rr.lease_id]

    def _handle_start(self, rr: Reservation, now: datetime) -> None:
        lease = self._lease_of(rr)
        rr.state = ReservationState.ACTIVE
        self.touch(lease)
        kind = rr.kind
        vm = rr.vm
        if kind is ReservationKind.VM:
            self.forget_future(lease)
            if rr.continues:
                pass   # its VMs arrived by live migration and run already
            elif lease.state is S.RESUMED_READY:
                self.set_state(lease, S.ACTIVE, now)
            else:
                self.set_state(lease, S.ACTIVE, now)
                if lease.start_time is None:
                    lease.start_time = now
                if not self._enact(Operation.START_VMS, lease, rr):
                    return
            if rr.premature_end is not None and rr.premature_end <= now:
                # (its work was done as it started: the early end, due at the same instant, came first)
                self.handle_premature_end(rr, now)
                return
        elif kind is ReservationKind.SHUTDOWN:
            if not self._enact(Operation.STOP_VMS, lease, rr):
                return
        elif kind is ReservationKind.SUSPEND:
            if vm is not None and rr is vm.post[0]:
                self.set_state(lease, S.SUSPENDING, now)
            if not self._enact(Operation.SUSPEND_VMS, lease, rr):
                return
        elif kind is ReservationKind.RESUME:
            if lease.state is not S.RESUMING:
                self.set_state(lease, S.RESUMING, now)
            if not self._enact(Operation.RESUME_VMS, lease, rr):
                return
        elif kind is ReservationKind.MIGRATE:
            # (a lease planned in the future stays so until its VMs start: its images moving does not
            # hand its place in the backfilling budget to another lease, and it may still be re-planned)
            if lease.state is not S.MIGRATING:
                self.set_state(lease, S.MIGRATING, now)
            if not self._enact(Operation.MIGRATE_IMAGES, lease, rr):
                return
        elif kind is ReservationKind.LIVE_MIGRATE:
            if not self._enact(Operation.LIVE_MIGRATE, lease, rr, now):
                return
        if rr.end <= now and rr in self.table:
            self._handle_end(rr, now)

    def _handle_end(self, rr: Reservation, now: datetime) -> None:
        lease = self._lease_of(rr)
        rr.state = ReservationState.DONE
        self.uncommit(rr)
        kind = rr.kind
        vm = rr.vm
        if kind is ReservationKind.VM:
            # (its planned run: an end handled late, as the daemon's step after a pause, or a test's leap in
            # time, must not count as work done, or a lease suspended there would owe less than nothing)
            lease.accumulated += min(now, rr.end) - rr.start
        elif kind is ReservationKind.SHUTDOWN:
            self._finish(lease, now)
        elif kind is ReservationKind.SUSPEND:
            if vm is not None and rr is vm.post[-1]:
                self.set_state(lease, S.SUSPENDED_PENDING, now)
                lease.suspensions += 1
                self.counters["suspensions"] += 1
                self.set_state(lease, S.SUSPENDED_QUEUED, now)
                self.enqueue(lease)
        elif kind is ReservationKind.RESUME:
            if vm is not None and rr is [p for p in vm.pre if p.kind is ReservationKind.RESUME][-1]:
                self.set_state(lease, S.RESUMED_READY, now)
        elif kind is ReservationKind.MIGRATE:
            lease.migrations += len(rr.transfers)
            self.counters["image_migrations"] += 1
            if vm is not None and rr is [p for p in vm.pre if p.kind is ReservationKind.MIGRATE][-1]:
                self.set_state(lease, S.SUSPENDED_SCHEDULED, now)
        elif kind is ReservationKind.LIVE_MIGRATE:
            lease.migrations += len(rr.transfers)
            self.counters["migrations"] += len(rr.transfers)
            predicted = rr.extra.get("predicted", {})
            self.counters["predicted_downtime_ms_total"] += sum(p["downtime_ms"] for p in predicted.values())

    def handle_premature_end(self, vm: Reservation, now: datetime) -> None:
        """The lease's work finished before its VM reservation did: stop it now, free the rest."""
        lease = self._lease_of(vm)
        self.touch(lease)
        open_vms = lease.open_vms()
        freed_until = open_vms[-1].final_end
        for later in [ov for ov in open_vms if ov is not vm and ov.start >= vm.end]:
            # an evacuation planned for after the real end is not needed any more
            for rr in later.all_parts():
                if rr in self.table:
                    self.uncommit(rr)
            lease.reservations.remove(later)
        for rr in vm.post:
            if rr in self.table:
                self.uncommit(rr)
        vm.post = []
        vm.premature_end = None
        self.counters["premature_ends"] += 1
        self.uncommit(vm)
        vm.end = now
        vm.state = ReservationState.DONE
        lease.accumulated += now - vm.start
        self._enact(Operation.STOP_VMS, lease, vm)
        if not lease.is_final:
            self._finish(lease, now)
        self.reevaluate(now, freed_until)

    def _finish(self, lease: Lease, now: datetime) -> None:
        self.forget_future(lease)
        self.set_state(lease, S.DONE, now)
        self.ended(lease)

    def ended(self, lease: Lease) -> None:
        if self.finished is not None:
            self.finished.append(lease)

    def retire(self, lease: Lease) -> None:
        """Forget a finished lease: nothing of it is left in the plan, so only its record goes."""
        if not lease.is_final:
            raise InconsistentSchedule(f"lease {lease.id} is {lease.state}: only a finished lease can be retired")
        del self.leases[lease.id]

    # -- enactment ------------------------------------------------------------------------------------------
    def _enact(self, operation: Operation, lease: Lease, rr: Reservation | None, now: datetime | None = None) -> bool:
        """Call the enactor; on failure fail the lease (or stop, per `on_enactment_error`). True if it went.
        A live migration that fails is not an error of the lease: its VMs are still running where they were,
        and the evacuation falls back to suspension or requeueing."""
        if rr is None:
            return True
        try:
            self._operations[operation](lease, rr)
            return True
        except EnactmentError as exc:
            enactment_error(self, operation, lease, rr, exc, now)
            return False

    def fail(self, lease: Lease, reason: str, now: datetime) -> None:
        self.touch(lease)
        corrections.cut_at_failure(self, lease, now)
        self.forget_future(lease)
        self.queue.remove(lease)
        lease.reason = reason
        if not lease.is_final:
            self.set_state(lease, S.FAILED, now)
            self.ended(lease)

    # -- drained hosts (the planning of a drain is `drain.plan_drain`) --------------------------------------
    def drain(self, host: str, by: datetime, now: datetime) -> DrainPlan:
        """Plan to empty `host` by `by` and keep it empty (`drain.plan_drain`)."""
        return plan_drain(self, host, by, now)

    def block_host(self, host: str, since: datetime) -> Reservation:
        return drain.block_host(self, host, since)

    def unblock_host(self, host: str) -> Reservation | None:
        return drain.unblock_host(self, host)

    def undrain(self, host: str, now: datetime) -> None:
        drain.undrain(self, host, now)

    # -- persistence, and corrections from outside (`corrections`) ------------------------------------------
    def restore(self, leases: list[Lease], future: Collection[int] = (), counters: dict | None = None) -> None:
        """Rebuild the scheduler from stored leases: their unfinished reservations go back into the slot
        table (keeping their ids) and the event heap, queued leases into the queue in submit order."""
        for lease in sorted(leases, key=lambda l: l.id):
            self.leases[lease.id] = lease
            self._next_id = max(self._next_id, lease.id + 1)
            if lease.is_final:
                continue
            if lease.state is S.PENDING:
                self.pending.append(lease)
            elif lease.state in (S.QUEUED, S.SUSPENDED_QUEUED):
                self.enqueue(lease)
            for vm in lease.open_vms():
                for rr in vm.all_parts():
                    if rr.state is not ReservationState.DONE and rr not in self.table:
                        self.commit(rr)
        self.vm.future_leases = {i for i in future if i in self.leases and not self.leases[i].is_final}
        if counters:
            self.counters.update({k: v for k, v in counters.items() if k in self.counters})
        self._queue_dirty = True

    def end_early(self, lease_id: int, now: datetime) -> Lease:
        return corrections.end_early(self, lease_id, now)

    def lose(self, lease_id: int, now: datetime, requeue: bool, reason: str) -> Lease:
        return corrections.lose(self, lease_id, now, requeue, reason)

    def relocate(self, lease_id: int, moved: dict[int, str], now: datetime) -> bool:
        return corrections.relocate(self, lease_id, moved, now)

    def extend(self, lease_id: int, by: timedelta, now: datetime) -> Lease:
        return corrections.extend(self, lease_id, by, now)

    def shorten(self, lease_id: int, by: timedelta, now: datetime) -> Lease:
        return corrections.shorten(self, lease_id, by, now)

    def planned_end(self, lease_id: int) -> datetime:
        return corrections.planned_end(self, lease_id)

    def enactment_failed(self, operation: Operation, lease_id: int, reservation_id: int | None, exc: EnactmentError,
                         now: datetime) -> bool:
        return corrections.enactment_failed(self, operation, lease_id, reservation_id, exc, now)

    def find_part(self, lease_id: int, reservation_id: int | None) -> Reservation | None:
        return corrections.find_part(self, lease_id, reservation_id)

    # -- introspection -----------------------------------------------------------------------------------------
    def active_leases(self) -> list[Lease]:
        return [l for l in self.leases.values() if not l.is_final]

    def idle(self) -> bool:
        """Nothing pending, queued or planned (a drained host's block is not a plan)."""
        return not self.pending and not self.queue and len(self.table) == len(self.blocks)
