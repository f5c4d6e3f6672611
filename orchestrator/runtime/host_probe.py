"""What `host list` shows of each host: its capacity, the leases on it now and planned, and (libvirt)
whether it answers, asked of every host at once within a timeout. The CLI on a local store and the server
build the same rows."""

from __future__ import annotations

from datetime import datetime
from functools import partial
from typing import Any

from drivers.base import HostInfo
from drivers.deadline import answers_within
from drivers.inventory import HostConfig
from orchestrator.model.reservations import ReservationState
from orchestrator.model.timeutil import iso


def _libvirt_host_info(cfg: HostConfig) -> HostInfo:
    from orchestrator.runtime.driver_factory import make_driver

    driver = make_driver("libvirt", [cfg], retry_attempts=1)
    try:
        return driver.host_info(cfg.name)
    finally:
        driver.close()


def probe_hosts(configs: list[HostConfig], timeout: float) -> dict[str, HostInfo]:
    """Capacity and versions of each host through the libvirt driver, in parallel, within `timeout`."""
    answers = answers_within({c.name: partial(_libvirt_host_info, c) for c in configs}, timeout)
    infos: dict[str, HostInfo] = {}
    for cfg in configs:
        answer = answers[cfg.name]
        if answer.value is not None:
            infos[cfg.name] = answer.value
        else:
            error = (f"no answer within {timeout:g} s" if answer.timed_out
                     else str(answer.error) or type(answer.error).__name__)
            infos[cfg.name] = HostInfo(cfg.name, cfg.uri, 0, 0, cfg.domain_type, reachable=False, error=error)
    return infos


def leases_on_hosts(cluster, now: datetime) -> dict[str, dict[str, list[int]]]:
    """host -> {"now": lease ids holding it now, "planned": lease ids with reservations on it later}."""
    out: dict[str, dict[str, list[int]]] = {h: {"now": [], "planned": []} for h in cluster.hosts}
    for lease, rr in cluster.plan(start=now):
        if rr not in cluster.table:
            continue
        current = rr.state is ReservationState.ACTIVE or rr.start <= now < rr.end
        for host in rr.resources:
            if host not in out:
                continue
            bucket = out[host]["now" if current else "planned"]
            if lease.id not in bucket:
                bucket.append(lease.id)
    for lists in out.values():
        lists["planned"] = [i for i in lists["planned"] if i not in lists["now"]]
    return out


def host_rows(records, usage: dict[str, dict[str, list[int]]], infos: dict[str, HostInfo] | None) -> list[dict[str, Any]]:
    """`host list --json`'s rows (with reachable/versions when `infos`: the libvirt driver's answers)."""
    rows = []
    for r in records:
        row: dict[str, Any] = {
            "name": r.name, "uri": r.config.uri, "domain_type": r.config.domain_type, "vcpus": r.vcpus,
            "memory_mib": r.memory_mib, "available": r.available, "leases_now": usage[r.name]["now"],
            "leases_planned": usage[r.name]["planned"], "added_at": iso(r.added_at),
            "properties": dict(r.config.properties),
        }
        if infos is not None:
            info = infos[r.name]
            row.update(reachable=info.reachable, hypervisor=info.hypervisor or None,
                       libvirt_version=info.libvirt_version or None, error=info.error or None)
        rows.append(row)
    return rows
