"""What a submission did, as both the CLI and the API answer it: the lease's plan and the leases it preempted."""

from __future__ import annotations

from datetime import datetime

from orchestrator.model.lease import Lease
from orchestrator.model.reservations import Reservation
from orchestrator.model.states import LeaseState
from orchestrator.model.timeutil import iso


def when(value: datetime | None) -> str:
    """A time for people: ISO 8601 UTC to the second ("-" for none)."""
    return "-" if value is None else iso(value.replace(microsecond=0))


def hosts_of(rr: Reservation | None) -> list[str]:
    return [] if rr is None else sorted(set(rr.resources) | set(rr.nodes.values()))


def plan_snapshot(cluster) -> dict:
    """lease id -> what its current plan looks like, to tell which other leases a submission moved."""
    out = {}
    for lease in cluster.scheduler.leases.values():
        if lease.is_final:
            continue
        vm = lease.last_vm
        out[lease.id] = (lease.state, None if vm is None else (vm.id, vm.start, vm.end, vm.is_suspending))
    return out


def affected(cluster, before: dict, skip: int) -> list[dict]:
    """Leases whose plan or state changed because of the submission (preempted: suspended or requeued)."""
    out = []
    for lease_id, (state, plan) in sorted(before.items()):
        if lease_id == skip:
            continue
        lease = cluster.scheduler.leases[lease_id]
        vm = lease.last_vm
        now_plan = None if vm is None else (vm.id, vm.start, vm.end, vm.is_suspending)
        if lease.state is state and now_plan == plan:
            continue
        at = None
        if vm is not None and vm.is_suspending and vm in cluster.table:
            what, at = f"suspended at {when(vm.end)}", vm.end
        elif lease.state in (LeaseState.QUEUED, LeaseState.SUSPENDED_QUEUED):
            what = "requeued"
        elif vm is not None and vm in cluster.table:
            what, at = f"moved to {when(vm.start)} → {when(vm.end)} on {', '.join(hosts_of(vm))}", vm.start
        else:
            what = f"now {lease.state}"
        out.append({"id": lease_id, "state": lease.state.value, "change": what, "at": iso(at)})
    return out


def submit_answer(lease: Lease, affected: list[dict]) -> dict:
    vm = lease.last_vm
    return {
        "id": lease.id,
        "type": lease.type.value,
        "state": lease.state.value,
        "start": iso(vm.start) if vm is not None else None,
        "end": iso(vm.end) if vm is not None else None,
        "suspended_at_end": bool(vm is not None and vm.is_suspending),
        "hosts": hosts_of(vm),
        "reason": lease.reason,
        "preempted": affected,
    }
