"""A VM's network addresses, asked of libvirt the way `virsh domifaddr` does.

The guest agent knows every address the guest has; a libvirt network's DHCP leases know those it handed
out; the host's ARP table knows those that talked recently. They are asked in that order and the first
that answers wins, so a VM without an agent (or before it runs) still shows its address.
"""

from __future__ import annotations

import logging
from typing import Any

from drivers.base import VMAddress

from .connection import Connections

log = logging.getLogger(__name__)

_SOURCES = (("agent", "VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_AGENT"),
            ("lease", "VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_LEASE"),
            ("arp", "VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_ARP"))


def parse_interfaces(answer: dict[str, Any], source: str, ipv4_family: int) -> list[VMAddress]:
    """libvirt's `interfaceAddresses` answer as `VMAddress`es, loopback left out."""
    found = []
    for interface, details in sorted((answer or {}).items()):
        mac = (details.get("hwaddr") or "").lower()
        if interface == "lo" or mac in ("", "00:00:00:00:00:00"):
            continue
        for addr in details.get("addrs") or ():
            found.append(VMAddress(mac=mac, address=addr["addr"], prefix=int(addr.get("prefix", 0)),
                                   family="ipv4" if addr.get("type") == ipv4_family else "ipv6",
                                   source=source, interface=interface))
    return found


def vm_addresses(connections: Connections, host: str, vm: str) -> list[VMAddress]:
    """The addresses of `vm` on `host`, from the first source that answers (see the module docstring)."""
    lv = connections.libvirt

    def ask(conn: Any) -> list[VMAddress]:
        dom = conn.lookupByName(vm)
        if not dom.isActive():
            return []
        for source, constant in _SOURCES:
            try:
                answer = dom.interfaceAddresses(getattr(lv, constant), 0)
            except lv.libvirtError as exc:   # no agent, not a libvirt network, ...: try the next source
                log.debug("%s: no addresses from %s: %s", vm, source, exc.get_error_message())
                continue
            found = parse_interfaces(answer, source, lv.VIR_IP_ADDR_TYPE_IPV4)
            if found:
                return found
        return []

    return connections.call(host, f"addresses of {vm}", ask, vm)
