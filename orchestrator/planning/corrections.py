"""Corrections to the plan from the world outside it: an operation that failed on the hosts, VMs that ended
early, vanished or were moved by hand, a lease made longer or shorter. The daemon reports them; the lease scheduler
(its methods of the same names) hands them here.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import datetime, timedelta

from orchestrator.model.errors import InconsistentSchedule, InvalidRequest
from orchestrator.model.lease import Lease, LeaseType
from orchestrator.model.quota import duration_text
from orchestrator.model.reservations import Reservation, ReservationKind, ReservationState
from orchestrator.model.states import LeaseState as S
from orchestrator.model.timeutil import ZERO, ceil_time, end_of
from orchestrator.planning.enactment import EnactmentError, Operation
from orchestrator.planning.mapper import Mapping
from orchestrator.planning.planner import Planner
from orchestrator.planning.victims import stay_and_suspend

log = logging.getLogger("orchestrator.planning.lease_scheduler")


def enactment_error(s: Planner, operation: Operation, lease: Lease, rr: Reservation, exc: EnactmentError,
                     now: datetime | None) -> None:
    s.touch(lease)
    if operation is Operation.LIVE_MIGRATE and now is not None:
        log.warning("lease %s: live migration failed (%s): falling back", lease.id, exc)
        # (a migration that ran until it was aborted ended after the step began: plan from then,
        # in whole seconds like the rest of the plan)
        failed_at = exc.at or now
        migration_failed(s, lease, rr, max(now, ceil_time(failed_at)))
        return
    if s.config.on_enactment_error == "stop":
        raise exc
    log.error("lease %s: %s failed: %s", lease.id, operation.value, exc)
    at = rr.start
    if lease.history and lease.history[-1][0] > at:   # (found out after the lease moved on)
        at = lease.history[-1][0]
    s.fail(lease, f"{operation.value}: {exc}", at)

def cut_at_failure(s: Planner, lease: Lease, at: datetime) -> None:
    """A lease that fails at `at` held its hosts until then: what of its plan had begun is cut there, as a
    cancellation cuts it, and done; what had not begun is only taken out of the plan. Its hosts are free
    from `at` to the whole second (plans are in whole seconds, and a request made in that second plans
    from its start), so its record never claims a host it held beyond that, where others may be placed."""
    cut = at.replace(microsecond=0)
    for vm in lease.open_vms():   # (two while it was being evacuated)
        for rr in vm.all_parts():
            if rr in s.table:
                s.uncommit(rr)
            if rr.state is ReservationState.ACTIVE:
                rr.end = max(rr.start, min(rr.end, cut))
                rr.state = ReservationState.DONE

def enactment_failed(s: Planner, operation: Operation, lease_id: int, reservation_id: int | None, exc: EnactmentError,
                     now: datetime) -> bool:
    """An operation that ran after the step that asked for it (off the store's lock) failed: the same
    outcome as if it had failed in the step, unless the lease has moved on (finished, or that part of
    its plan is gone), which is returned as False and changes nothing."""
    lease = s.leases.get(lease_id)
    rr = find_part(s, lease_id, reservation_id)
    if lease is None or lease.is_final or rr is None:
        return False
    if operation is Operation.LIVE_MIGRATE:
        vms = lease.open_vms()
        if rr.vm is None or rr.vm not in vms or len(vms) < 2:
            return False   # the evacuation is no longer planned (cancelled, requeued...)
    enactment_error(s, operation, lease, rr, exc, now)
    return True

def find_part(s: Planner, lease_id: int, reservation_id: int | None) -> Reservation | None:
    """The reservation with this id in the lease's plan (None if the lease or the part is gone, or no part
    is named)."""
    lease = s.leases.get(lease_id)
    if lease is None or reservation_id is None:
        return None
    return next((p for vm in lease.reservations for p in vm.all_parts() if p.id == reservation_id), None)

def migration_failed(s: Planner, lease: Lease, migration: Reservation, now: datetime) -> None:
    """The VMs stayed on their hosts: drop the evacuation, then suspend them on those hosts in time
    for whatever needed the hosts, or requeue the lease when that cannot be done."""
    continuation = migration.vm
    vms = lease.open_vms()
    if continuation is None or continuation not in vms or len(vms) < 2:
        raise InconsistentSchedule(f"lease {lease.id}: failed live migration {migration!r} is not part "
                                   f"of an evacuation")
    s.counters["failed_migrations"] += 1
    s.unplan(lease)
    if not stay_and_suspend(s, lease, now):
        s.requeue(lease, now)

def lose(s: Planner, lease_id: int, now: datetime, requeue: bool, reason: str) -> Lease:
    """The lease's VMs vanished from the hosts (found at reconciliation): fail it, or requeue it from
    scratch."""
    lease = s.lease(lease_id)
    if requeue and lease.type is LeaseType.BEST_EFFORT:
        s.drop_plan(lease, now)
        lease.accumulated = ZERO
        lease.reason = reason
        target = S.QUEUED
        if lease.state not in (S.ACTIVE, S.RESUMING, S.RESUMED_READY, S.SCHEDULED):
            target = S.FAILED
        s.set_state(lease, target, now)
        if target is S.FAILED:
            s.ended(lease)
        if target is S.QUEUED:
            lease.requeues += 1
            s.enqueue(lease)
    else:
        s.fail(lease, reason, now)
    return lease

def relocate(s: Planner, lease_id: int, moved: dict[int, str], now: datetime) -> bool:
    """Some of a running lease's VMs are found on other hosts than the plan's (moved by hand, or by a
    live migration the plan had given up): the plan follows them, as if they had run there all along,
    when those hosts have the room until the lease ends and nothing but its shutdown is planned for it
    (no evacuation or suspension under way). False, the plan unchanged, otherwise."""
    lease = s.lease(lease_id)
    vms = lease.open_vms()
    if lease.state is not S.ACTIVE or len(vms) != 1 or any(p.kind is not ReservationKind.SHUTDOWN
                                                            for p in vms[0].post):
        return False
    vm = vms[0]
    nodes = {**vm.nodes, **moved}
    held = Mapping(nodes, vm.end).per_host(lease)
    parts = [vm, *vm.post]
    s.unplan(lease)
    room = all(s.table.fits(host, amount, max(rr.start, now), max(rr.end, now))
               for rr in parts for host, amount in held.items())
    if room:
        for rr in parts:
            rr.nodes, rr.resources = dict(nodes), dict(held)
    s.replan(lease)
    return room

def extend(s: Planner, lease_id: int, by: timedelta, now: datetime) -> Lease:
    """Lengthen a lease by `by`; refused, with the reason, when its hosts cannot hold it longer."""
    lease = s.lease(lease_id)
    if by <= ZERO:
        raise InvalidRequest("by", f"must be positive (got {by})")
    if lease.is_final:
        raise InvalidRequest("lease", f"lease {lease_id} is already {lease.state}")
    request = dataclasses.replace(lease.request, duration=lease.request.duration + by)
    s.touch(lease)
    vm = lease.last_vm
    if lease.state in (S.PENDING, S.QUEUED, S.SUSPENDED_QUEUED) or vm is None or vm not in s.table:
        lease.request = request
        return lease
    if vm.is_suspending:
        raise InvalidRequest("by", f"lease {lease_id} is planned to be suspended at {vm.end.isoformat()}; "
                                   "it will run longer when it resumes")
    shutdown = vm.post[0] if vm.post else None
    old_end = vm.final_end
    new_end = end_of(old_end, by, "duration")
    for host, amount in vm.resources.items():
        if not s.table.fits(host, amount, old_end, new_end):
            raise InvalidRequest("by", f"cannot extend lease {lease_id} by {by}: host {host} is reserved "
                                       f"between {old_end.isoformat()} and {new_end.isoformat()}")
    lease.request = request
    if shutdown is not None:
        s.uncommit(shutdown)
    s.uncommit(vm)
    vm.end += by
    if shutdown is not None:
        shutdown.start += by
        shutdown.end += by
    s.commit(vm)
    if shutdown is not None:
        s.commit(shutdown)
    return lease

def planned_end(s: Planner, lease_id: int) -> datetime:
    """When the lease's plan ends it (its shutdown's end): `InvalidRequest` when it has no such end (not
    planned yet, or planned to be suspended: its end comes with its resumption)."""
    lease = s.lease(lease_id)
    if lease.is_final:
        raise InvalidRequest("lease", f"lease {lease_id} is already {lease.state}")
    vm = lease.last_vm
    if lease.state in (S.PENDING, S.QUEUED, S.SUSPENDED_QUEUED) or vm is None or vm not in s.table:
        raise InvalidRequest("end", f"lease {lease_id} is {lease.state}: it has no planned end yet (change its "
                                    "duration with --by instead)")
    if vm.is_suspending:
        raise InvalidRequest("end", f"lease {lease_id} is planned to be suspended at {vm.end.isoformat()}: its "
                                    "end is planned when it resumes (change its duration with --by instead)")
    return vm.final_end


def end_early(s: Planner, lease_id: int, now: datetime) -> Lease:
    """The lease's VMs stopped by themselves before its planned end (seen on the hosts): done now."""
    lease = s.lease(lease_id)
    vm = lease.running_vm
    if lease.state is not S.ACTIVE or vm is None:
        raise InvalidRequest("lease", f"lease {lease_id} is {lease.state}, not running")
    s.handle_premature_end(vm, now)
    return lease


def shorten(s: Planner, lease_id: int, by: timedelta, now: datetime) -> Lease:
    """Make a lease shorter by `by`: its planned end comes earlier (a lease planned to be suspended that
    would now finish before the suspension ends then instead), or, not planned yet, it will run less. What
    it frees goes at once to the leases planned after it and the queue. Refused, with the reason, when it
    would end before it started or at or before now."""
    lease = s.lease(lease_id)
    if by <= ZERO:
        raise InvalidRequest("by", f"must be positive (got {by})")
    if lease.is_final:
        raise InvalidRequest("lease", f"lease {lease_id} is already {lease.state}")
    duration = lease.request.duration - by
    if duration <= lease.accumulated:
        raise InvalidRequest("by", f"lease {lease_id} has run {duration_text(lease.accumulated)} of its "
                                   f"{duration_text(lease.request.duration)}: it cannot be shortened by "
                                   f"{duration_text(by)} (cancel it instead)")
    request = dataclasses.replace(lease.request, duration=duration)
    s.touch(lease)
    vm = lease.last_vm
    if lease.state in (S.PENDING, S.QUEUED, S.SUSPENDED_QUEUED) or vm is None or vm not in s.table:
        lease.request = request
        return lease
    shutdown = s.vm.overheads.shutdown_time(lease)
    if vm.is_suspending:
        run = duration - lease.accumulated
        if vm.start + run >= vm.end:   # (still more to run than this stretch: it resumes for less)
            lease.request = request
            return lease
        new_end = vm.start + run + shutdown
    else:
        new_end = vm.final_end - by
    old_end = vm.final_end
    earliest = max(vm.start, now)
    if new_end - shutdown <= earliest:
        raise InvalidRequest("by", f"lease {lease_id} would end at {new_end.isoformat()}, before "
                                   f"{'now' if earliest == now else 'it starts'} ({earliest.isoformat()}): "
                                   "cancel it instead")
    lease.request = request
    for rr in vm.all_parts():
        if rr in s.table:
            s.uncommit(rr)
    vm.end = new_end
    s.vm.plan_shutdown(lease, vm)
    s.replan(lease)
    s.reevaluate(now, old_end)
    return lease
