"""A host lost (it lost its power, or stopped answering for longer than the daemon waits): what the plan does.

Every lease with something planned on the host from now on moves off it, and the host is held whole from
now on (as a drained one is), so that nothing is planned there until it answers again:

- a best-effort lease is requeued: the VMs it still has elsewhere are killed, and it starts again from its
  image when it is placed (the work it had done is lost, and counted); a suspended one goes back to the
  queue with its memory image, which it resumes from once a plan can reach it;
- an advance reservation or immediate lease that was running there fails (its VMs are gone: what it
  guaranteed cannot be kept), as does one whose suspension was under way there;
- one only planned there (not started) is placed again on the other hosts at its own times, and fails when
  it fits nowhere else.

Read by the daemon (orchestrator/runtime/host_watch.py), which tells the owners (a failed lease's `ended`
notice) and logs what it cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from orchestrator.model.errors import NotSchedulable
from orchestrator.model.lease import Lease, LeaseType
from orchestrator.model.states import LeaseState as S
from orchestrator.model.timeutil import FOREVER, ZERO
from orchestrator.planning.lease_scheduler import LeaseScheduler

#: states in which a lease's VMs run (their work is lost with the host)
_RUNNING = (S.ACTIVE, S.RESUMING, S.RESUMED_READY)


@dataclass(frozen=True)
class LeaseLoss:
    """What the loss of a host did to one lease."""

    lease_id: int
    outcome: str                  # "requeued", "failed", "re-planned"
    detail: str                   # in words, for the event log and the owner
    lost_work: timedelta = ZERO   # run time done and lost (a requeued lease starts again from its image)


@dataclass(frozen=True)
class HostLoss:
    host: str
    at: datetime
    leases: list[LeaseLoss] = field(default_factory=list)


def lose_host(scheduler: LeaseScheduler, host: str, at: datetime, reason: str) -> HostLoss:
    """Move everything off `host` from `at` on (see the module docstring) and hold it; `reason` says why
    (`host lab2 has not answered for 45 s`), as the failed leases give it."""
    table = scheduler.table
    ids = sorted({rr.lease_id for rr in table.reservations_overlapping(at, FOREVER, {host})
                  if rr.lease_id in scheduler.leases})
    losses: list[LeaseLoss] = []
    later: list[Lease] = []
    for lease in (scheduler.leases[i] for i in ids):
        if lease.is_final:
            continue
        if lease.type is LeaseType.BEST_EFFORT and lease.state is not S.SUSPENDING:
            lost = _work_done(lease, at) if lease.state in _RUNNING else ZERO
            scheduler.requeue(lease, at)
            said = (f"{reason}: requeued; it starts again from its image" if lost or lease.state is S.QUEUED
                    else f"{reason}: requeued with its memory image")
            losses.append(LeaseLoss(lease.id, "requeued", said, lost))
        elif lease.state is S.SCHEDULED:
            scheduler.drop_plan(lease, at)
            later.append(lease)
        else:
            lost = _work_done(lease, at) if lease.state in _RUNNING else ZERO
            said = f"{reason}: its VMs there are gone"
            scheduler.fail(lease, said, at)
            losses.append(LeaseLoss(lease.id, "failed", said, lost))
    hold(scheduler, host, at)
    nexttime = at + scheduler.config.non_schedulable_interval
    for lease in later:
        try:
            scheduler.place(lease, nexttime, at)
        except NotSchedulable as exc:
            said = f"{reason}: it fits on no other host ({exc})"
            scheduler.fail(lease, said, at)
            losses.append(LeaseLoss(lease.id, "failed", said))
            continue
        vm = lease.last_vm
        where = ", ".join(vm.hosts) if vm is not None else "?"
        losses.append(LeaseLoss(lease.id, "re-planned", f"{reason}: re-planned on {where}"))
    # (the queue is looked at again: the plans taken off the table told the scheduler, `table.listen`)
    return HostLoss(host, at, losses)


def _work_done(lease: Lease, at: datetime) -> timedelta:
    """The run time the lease has to its credit at `at` (what a restart from its image loses)."""
    vm = lease.running_vm
    running = max(at - vm.start, ZERO) if vm is not None else ZERO
    return lease.accumulated + running


def hold(scheduler: LeaseScheduler, host: str, at: datetime) -> None:
    """The host held whole from `at` on (a drained host's hold from a later time is brought forward)."""
    held = scheduler.blocks.get(host)
    if held is not None:
        if held.start <= at:
            return
        scheduler.table.remove(held)
        del scheduler.blocks[host]
    scheduler.block_host(host, at)
