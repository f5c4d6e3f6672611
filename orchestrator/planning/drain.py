"""Draining a host: emptying it by a given time and keeping it empty, planned like any other change.

Running VMs move live to other hosts (with `preemption_mode = migrate-first`, when an evacuation fits),
else are suspended, else requeued when their lease is preemptible; leases planned on the host but not
started go elsewhere (best-effort leases back to the queue, advance reservations placed again). What can
do neither keeps the host until it ends. The host is then held whole from the drain on (`block_host`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from orchestrator.model.errors import (
    InconsistentSchedule,
    InvalidRequest,
    NotSchedulable,
)
from orchestrator.model.lease import Lease, LeaseType
from orchestrator.model.reservations import Reservation, ReservationKind
from orchestrator.model.states import LeaseState as S
from orchestrator.model.timeutil import FOREVER, iso
from orchestrator.planning.planner import Planner


@dataclass
class DrainPlan:
    """What a drain does: when the host becomes unavailable, and what happens to each lease on it."""

    host: str
    unavailable_from: datetime
    leases: dict[int, str]


def plan_drain(scheduler: Planner, host: str, by: datetime, now: datetime) -> DrainPlan:
    """Plan to empty `host` by `by` and keep it empty: running VMs are live-migrated elsewhere (with
    `migrate-first`), else suspended, else requeued when preemptible; leases planned on it are
    re-planned elsewhere. What can do neither (a running advance reservation with nowhere to go, or
    one planned that fits nowhere else) keeps the host until it ends: the host is unavailable from
    the latest of those ends and `by`."""
    if host not in scheduler.table.hosts:
        raise InvalidRequest("host", f"no host named {host!r}")
    if host in scheduler.blocks:
        raise InvalidRequest("host", f"{host} is already drained (from {iso(scheduler.blocks[host].start)})")
    nexttime = now + scheduler.config.non_schedulable_interval
    by = max(by, nexttime)
    ids = sorted({rr.lease_id for rr in scheduler.table.reservations_overlapping(by, FOREVER, {host})})
    outcome: dict[int, str] = {}
    kept_until = by
    planned_later: list[Lease] = []
    for lease in (scheduler.leases[i] for i in ids):
        vm = lease.running_vm
        if vm is None or lease.state is not S.ACTIVE or len(lease.open_vms()) > 1:
            if lease.state in (S.SCHEDULED, S.SUSPENDED_SCHEDULED):
                planned_later.append(lease)
            else:   # mid-way through an overhead (suspending, resuming, migrating): let it finish
                kept_until = max(kept_until, lease.open_vms()[-1].final_end)
                outcome[lease.id] = f"keeps {host} until {iso(lease.open_vms()[-1].final_end)}"
            continue
        scheduler.unplan(lease)
        if scheduler.config.preemption_mode == "migrate-first":
            evacuation = scheduler.evacuation.plan(lease, vm, by, {host}, nexttime)
            if evacuation is not None:
                scheduler.commit_evacuation(lease, evacuation)
                migration = evacuation.migration
                outcome[lease.id] = (f"live-migrates to {', '.join(sorted({d for _, d in migration.transfers.values()}))}"
                                     f" {iso(migration.start)} → {iso(migration.end)}")
                continue
        if lease.preemptible:
            if scheduler.vm.may_suspend(lease) and scheduler.vm.can_suspend_by(lease, vm, min(vm.final_end, by), now):
                scheduler.vm.plan_suspension(lease, vm, min(vm.final_end, by))
                scheduler.replan(lease)
                outcome[lease.id] = f"suspends by {iso(min(vm.final_end, by))}"
            else:
                scheduler.requeue(lease, now)
                outcome[lease.id] = "requeued (its VMs are stopped)"
            continue
        scheduler.replan(lease)
        kept_until = max(kept_until, vm.final_end)
        outcome[lease.id] = f"keeps {host} until {iso(vm.final_end)} (not preemptible, nowhere to go)"
    # leases planned on the host but not started: the best-effort ones go back to the queue (placed
    # again once the host is blocked); reservations are placed again, on it only before the block
    ars = []
    for lease in planned_later:
        scheduler.drop_plan(lease, now)
        if lease.type is LeaseType.BEST_EFFORT:
            scheduler.set_state(lease, S.QUEUED if lease.state is S.SCHEDULED else S.SUSPENDED_QUEUED, now)
            scheduler.enqueue(lease)
            outcome[lease.id] = "re-planned on other hosts"
        else:
            ars.append(lease)
    block = scheduler.block_host(host, kept_until)
    for lease in ars:
        try:
            scheduler.place(lease, nexttime, now)
            outcome[lease.id] = f"re-planned on {', '.join(_planned_vm(lease).hosts)}"
        except NotSchedulable:
            # no room elsewhere: it keeps its host, which is then unavailable only after it
            scheduler.unblock_host(host)
            scheduler.place(lease, nexttime, now)
            kept_until = max(kept_until, _planned_vm(lease).final_end)
            block = scheduler.block_host(host, kept_until)
            outcome[lease.id] = f"keeps {host} until {iso(kept_until)} (fits nowhere else)"
    return DrainPlan(host=host, unavailable_from=block.start, leases=outcome)


def _planned_vm(lease: Lease) -> Reservation:
    """The lease's last VM reservation, which a lease just scheduled has."""
    vm = lease.last_vm
    if vm is None:
        raise InconsistentSchedule(f"lease {lease.id} was scheduled but has no VM reservation")
    return vm


def block_host(scheduler: Planner, host: str, since: datetime) -> Reservation:
    """Hold all of `host` from `since` on (a drained host); nothing may be planned there then."""
    block = Reservation(lease_id=0, kind=ReservationKind.UNAVAILABLE, start=since, end=FOREVER,
                        resources={host: scheduler.table.capacity(host)})
    scheduler.table.add(block)
    scheduler.blocks[host] = block
    return block


def unblock_host(scheduler: Planner, host: str) -> Reservation | None:
    """Take a drained host's block out of the plan (the block, or None if the host had none)."""
    block = scheduler.blocks.pop(host, None)
    if block is not None:
        scheduler.table.remove(block)
    return block


def undrain(scheduler: Planner, host: str, now: datetime) -> None:
    """Make a drained host available again: leases planned in the future may move earlier onto it (leases
    that moved away and run elsewhere stay where they are)."""
    if scheduler.unblock_host(host) is None:
        raise InvalidRequest("host", f"{host} is not drained")
    scheduler.reevaluate(now, FOREVER)
