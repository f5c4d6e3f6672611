"""A host as a whole, as libvirt's node info tells it: capacity and versions (`read_host_info`)."""

from __future__ import annotations

from drivers.base import HostInfo
from drivers.errors import DriverError

from .connection import Connections


def format_version(number: int) -> str:
    """libvirt's packed version (major * 1e6 + minor * 1e3 + release) as text."""
    return f"{number // 1_000_000}.{number // 1000 % 1000}.{number % 1000}"


def read_host_info(connections: Connections, host: str) -> HostInfo:
    """Capacity and versions from libvirt's node info; an unreachable host gives `reachable=False`."""
    cfg = connections.host_config(host)
    try:
        info, kind, hv, lib = connections.call(
            host, "host info", lambda c: (c.getInfo(), c.getType(), c.getVersion(), c.getLibVersion())
        )
    except DriverError as exc:
        return HostInfo(host, cfg.uri, 0, 0, cfg.domain_type, reachable=False, error=str(exc))
    return HostInfo(
        name=host,
        uri=cfg.uri,
        vcpus=int(info[2]),
        memory_mib=int(info[1]),
        domain_type=cfg.domain_type,
        hypervisor=f"{kind} {format_version(hv)}",
        libvirt_version=format_version(lib),
    )
