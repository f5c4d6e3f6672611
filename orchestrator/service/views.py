"""A lease as a client shows it, whether a server or the local store answered: the window it runs in, its
summary (a row of `lease list --json`), its request and its plan (`lease show --json`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from orchestrator.model.lease import Lease
from orchestrator.model.reservations import Reservation
from orchestrator.model.timeutil import iso
from orchestrator.state.answers import hosts_of

__all__ = ["hosts_of", "lease_summary", "lease_window", "plan_json", "plan_rows", "request_json"]


def lease_window(lease: Lease) -> tuple[datetime | None, datetime | None]:
    """(start, end) to show: when it first ran (or is planned to), and when it ended (or is planned to)."""
    first = lease.reservations[0] if lease.reservations else None
    last = lease.last_vm
    start = lease.start_time or (first.first_start if first is not None else lease.request.start)
    if lease.is_final:
        end = lease.end_time
    elif last is not None:
        end = last.end
    else:
        end = lease.request.end
    return start, end


def _num(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def lease_summary(lease: Lease) -> dict[str, Any]:
    start, end = lease_window(lease)
    node = lease.request.nodes[0]
    return {
        "id": lease.id,
        "name": lease.request.name,
        "user": lease.request.user,
        "type": lease.type.value,
        "state": lease.state.value,
        "nodes": lease.numnodes,
        "cpus": _num(node.vcpus),
        "memory_mib": _num(node.memory),
        "start": iso(start),
        "end": iso(end),
        "hosts": hosts_of(lease.last_vm),
        "reason": lease.reason,
    }


def request_json(lease: Lease) -> dict[str, Any]:
    req = lease.request
    image = None
    if req.image is not None:
        image = {k: v for k, v in (("disk", req.image.disk), ("kernel", req.image.kernel),
                                   ("initrd", req.image.initrd), ("cmdline", req.image.cmdline)) if v is not None}
    return {
        "type": req.type.value,
        "nodes": req.numnodes,
        "cpus": _num(req.nodes[0].vcpus),
        "memory_mib": _num(req.nodes[0].memory),
        "duration_s": req.duration.total_seconds(),
        "start": iso(req.start),
        "preemptible": req.preemptible,
        "image": image,
        "user": req.user,
        "name": req.name,
        "dirty_rate_mib_s": req.dirty_rate_mib_s,
        "submit_time": iso(req.submit_time),
        "placement": None if req.placement is None else req.placement.to_json(),
    }


def plan_rows(lease: Lease) -> list[Reservation]:
    """Every reservation of the lease's plan, each VM's with its parts (suspensions, migrations...)."""
    return [rr for vm in lease.reservations for rr in vm.all_parts()]


def plan_json(rr: Reservation) -> dict[str, Any]:
    return {"id": rr.id, "kind": rr.kind.value, "state": rr.state.value, "start": iso(rr.start),
            "end": iso(rr.end), "hosts": hosts_of(rr)}
