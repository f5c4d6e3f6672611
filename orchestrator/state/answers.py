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


def moved_entry(lease: Lease, table) -> dict:
    """How a submission's answer names a lease whose plan or state it changed (preempted: suspended or
    requeued; or moved)."""
    vm = lease.last_vm
    at = None
    if vm is not None and vm.is_suspending and vm in table:
        what, at = f"suspended at {when(vm.end)}", vm.end
    elif lease.state in (LeaseState.QUEUED, LeaseState.SUSPENDED_QUEUED):
        what = "requeued"
    elif vm is not None and vm in table:
        what, at = f"moved to {when(vm.start)} → {when(vm.end)} on {', '.join(hosts_of(vm))}", vm.start
    else:
        what = f"now {lease.state}"
    return {"id": lease.id, "state": lease.state.value, "change": what, "at": iso(at)}


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
