"""How leases give way to an advance reservation (or a drain) that needs their hosts, and how a placement
that would be suspended moves live instead: preemption's side of the lease scheduler.

A victim's plan is taken out of the table first; the new lease goes in; then each victim in turn is
evacuated live to other hosts (`migrate-first`), else suspended to be done when its hosts are needed, else
requeued, against the table as it then is. While one victim is handled, the others still hold what they
have until they give way (`hold`).
"""

from __future__ import annotations

import logging
from datetime import datetime

from orchestrator.model.errors import InconsistentSchedule
from orchestrator.model.lease import Lease
from orchestrator.model.reservations import Reservation, ReservationKind, ReservationState
from orchestrator.model.states import LeaseState as S
from orchestrator.model.timeutil import parse_time
from orchestrator.planning.planner import Planner

log = logging.getLogger("orchestrator.planning.lease_scheduler")


def hold(s: Planner, victim: Lease, at: datetime, needed: set[str]) -> list[Reservation]:
    """What a victim (its plan out of the table) holds until it gives way, as placeholders in the
    table: each part of its plan, on the `needed` hosts only until `at`."""
    holds = []
    for vm in victim.open_vms():
        for rr in vm.all_parts():
            if rr.state is ReservationState.DONE:
                continue
            for hosts, end in (({h for h in rr.resources if h in needed}, min(rr.end, at)),
                               ({h for h in rr.resources if h not in needed}, rr.end)):
                if hosts and end > rr.start:
                    holds.append(s.table.add(Reservation(
                        lease_id=victim.id, kind=ReservationKind.UNAVAILABLE, start=rr.start, end=end,
                        resources={h: rr.resources[h] for h in hosts})))
    return holds

def evacuation_instead_of_suspension(s: Planner, lease: Lease, vm: Reservation,
                                      nexttime: datetime) -> Reservation | None:
    """With `migrate-first`, a placement that must leave some of its hosts before the lease is done
    (`vm` planned to be suspended there) moves those VMs live to hosts free until its end instead,
    when the pre-copy model says the move fits in time: `vm` is cut at the switch-over, and the
    continuation (its live migration before it, its shutdown after) is returned. None otherwise, and
    `vm` keeps its suspension."""
    if s.config.preemption_mode != "migrate-first" or not vm.is_suspending:
        return None
    needed_by = vm.final_end
    node = lease.request.uniform
    # (a lookup first: usually the site has no room then for even one of the VMs that must move)
    room = None if node is None else s.table.room_total(node, needed_by, in_passing=True)
    if room == 0:
        return None
    end = vm.start + lease.remaining + s.vm.overheads.shutdown_time(lease)
    avoid = {host for host, amount in vm.resources.items()
             if not s.table.fits(host, amount, needed_by, end)}
    if not avoid or (room is not None and room < sum(host in avoid for host in vm.nodes.values())):
        return None
    # (the planner changes `vm` only when it finds an evacuation)
    evacuation = s.evacuation.plan(lease, vm, needed_by, avoid, nexttime)
    if evacuation is None:
        return None
    log.info("lease %s: live migration %s-%s planned instead of a suspension", lease.id,
             evacuation.migration.start, evacuation.migration.end)
    s.vm.plan_shutdown(lease, evacuation.continuation)
    return evacuation.continuation

# -- preemption ------------------------------------------------------------------------------------------
def preempt(s: Planner, lease: Lease, at: datetime, needed: set[str], now: datetime) -> None:
    """Make `lease` (its plan already out of the table) give way on the `needed` hosts from `at`:
    evacuate its VMs live (`migrate-first`), else suspend it to be done by then, else requeue it."""
    vm = lease.last_vm
    if vm is None:
        raise InconsistentSchedule(f"lease {lease.id} chosen for preemption has no planned VM reservation")
    vms = lease.open_vms()
    forgotten = len(vms) == 2 and vms[1].pre[0].state is ReservationState.SCHEDULED and vms[1].start >= at
    if forgotten:
        # needed before a planned live migration would have switched over: the lease stays where it
        # is and is suspended there, as planned before the live migration was, when that still
        # fits; else it gives way from those hosts (it may hold them until the switch-over only,
        # so no second evacuation); a continuation that has begun by then is suspended itself below
        if stay_and_suspend(s, lease, now):
            return
        vm = vms[0]
    if (s.config.preemption_mode == "migrate-first" and lease.state is S.ACTIVE and lease.running_vm is vm
            and not forgotten):
        evacuation = s.evacuation.plan(lease, vm, at, needed, now + s.config.non_schedulable_interval)
        if evacuation is not None:
            log.info("lease %s preempted at %s (live migration %s-%s)", lease.id, at,
                     evacuation.migration.start, evacuation.migration.end)
            s.commit_evacuation(lease, evacuation)
            return
    requeue = (
        (vm.state is ReservationState.SCHEDULED and vm.start >= at)
        or not s.vm.may_suspend(lease)
        or lease.state not in (S.ACTIVE, S.SCHEDULED, S.RESUMED_READY)
        or not s.vm.can_suspend_by(lease, vm, min(vm.final_end, at), now)
    )
    log.info("lease %s preempted at %s (%s)", lease.id, at, "requeue" if requeue else "suspend")
    if requeue:
        s.requeue(lease, now)
        return
    s.vm.plan_suspension(lease, vm, min(vm.final_end, at))
    s.replan(lease)

def stay_and_suspend(s: Planner, lease: Lease, now: datetime) -> bool:
    """Drop the lease's evacuation (its plan out of the table, the live migration not begun) and plan
    its VMs to be suspended on the hosts they are on, by the time those hosts are needed. True when
    that plan fits and is back in the table; else the first VM reservation is left without its
    post-overheads, for the caller to re-plan."""
    vm, continuation = lease.open_vms()
    needed_by = parse_time(continuation.pre[0].extra["needed_by"], "needed_by")
    lease.reservations.remove(continuation)
    vm.end = max(vm.end, needed_by)
    vm.post = []
    if s.vm.may_suspend(lease) and s.vm.can_suspend_by(lease, vm, needed_by, now):
        s.vm.plan_suspension(lease, vm, needed_by)
        if all(s.table.fits(host, amount, max(rr.start, now), rr.end)
               for rr in vm.all_parts() for host, amount in rr.resources.items() if rr.end > now):
            s.replan(lease)
            return True
    return False
