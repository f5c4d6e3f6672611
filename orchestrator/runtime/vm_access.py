"""Each VM of a lease as its host sees it now: host, state, MAC, addresses and the ssh line to use, and the
dirty rate the daemon last measured on it.

The hosts are asked through the configured driver (libvirt: the guest agent, else DHCP leases, else ARP;
simulated: addresses made from the MAC), so a dry run shows the same thing. ssh skips host-key checks as
kcli and Vagrant do for VMs: a VM's key is new at every lease, and its address was someone else's before.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from drivers.base import Driver, VMAddress
from drivers.errors import DriverError
from orchestrator.model.lease import Lease
from orchestrator.runtime.driver_enactor import vm_name

SSH_OPTIONS = ("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR")


@dataclass(frozen=True)
class VMAccess:
    """What a person needs to reach one VM of a lease."""

    vnode: int
    name: str
    host: str | None
    state: str
    mac: str | None
    addresses: tuple[VMAddress, ...]
    login_user: str
    dirty_rate_mib_s: float | None = None   # as the daemon last measured it on its host

    @property
    def address(self) -> str | None:
        ipv4 = [a.address for a in self.addresses if a.family == "ipv4"]
        found = ipv4 or [a.address for a in self.addresses]
        return found[0] if found else None

    def to_json(self) -> dict:
        command = self.ssh_command()
        return {"vm": self.name, "node": self.vnode, "host": self.host, "state": self.state, "mac": self.mac,
                "addresses": [{"address": a.address, "prefix": a.prefix, "family": a.family, "source": a.source,
                               "interface": a.interface, "mac": a.mac} for a in self.addresses],
                "login_user": self.login_user, "ssh": shlex.join(command) if command else None,
                "dirty_rate_mib_s": self.dirty_rate_mib_s}

    def ssh_command(self) -> list[str] | None:
        return None if self.address is None else ["ssh", *SSH_OPTIONS, f"{self.login_user}@{self.address}"]


def lease_vms(lease: Lease, driver: Driver) -> list[VMAccess]:
    """Each VM of the lease as its host sees it now (a host that does not answer: state "unreachable")."""
    guest = lease.request.guest
    image = lease.request.image
    user = (image.login_user if image is not None and image.login_user else None) or "root"
    vm = lease.last_vm
    planned = dict(vm.nodes) if vm is not None else {}
    found = []
    for vnode in range(lease.numnodes):
        name = vm_name(lease.id, vnode)
        host, state = planned.get(vnode), "not running"
        addresses: tuple[VMAddress, ...] = ()
        try:
            where = driver.locate(name)
            if where is not None:
                host = where
                state = next((i.state for i in driver.list_vms(where) if i.name == name), "gone")
                if state == "running":
                    addresses = tuple(driver.vm_addresses(name))
        except DriverError as exc:
            state = f"unreachable ({exc})"
        found.append(VMAccess(vnode, name, host, state, guest.mac(vnode) if guest else None, addresses, user,
                              lease.measured_dirty_rates.get(vnode)))
    return found


def vm_access_from_json(data: dict) -> VMAccess:
    """A VM as `VMAccess.to_json` wrote it (what the server sends)."""
    return VMAccess(vnode=data["node"], name=data["vm"], host=data["host"], state=data["state"], mac=data["mac"],
                    addresses=tuple(VMAddress(address=a["address"], prefix=a["prefix"], family=a["family"],
                                              source=a["source"], interface=a.get("interface") or "", mac=a.get("mac") or "")
                                    for a in data["addresses"]),
                    login_user=data["login_user"], dirty_rate_mib_s=data.get("dirty_rate_mib_s"))
