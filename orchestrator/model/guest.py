"""What a lease's VMs are given besides CPU and memory: a disk of their own, a way in, and a network.

Frozen and validated once, like the rest of a request. The MAC addresses are assigned when the lease is
stored (one per VM, from a counter in the store, under the installation's own random prefix), so a VM keeps
its MAC, and with it its DHCP address, across suspend/resume and migration, and two installations (or a
store made again) on one network do not hand out the same ones.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Collection
from dataclasses import dataclass

from orchestrator.model.errors import InvalidRequest

#: libvirt's and QEMU's own prefix, under which stores made before per-installation prefixes handed out MACs
#: (libvirt gives domains defined without a MAC one under it: a drawn prefix is never this one)
LEGACY_MAC_PREFIX = "52:54:00"
MAC_COUNT = 1 << 24
_MAC = re.compile(r"[0-9a-f]{2}(:[0-9a-f]{2}){5}")


def is_vm_mac(mac: str) -> bool:
    """A MAC leasewise may give a VM: lower-case, unicast and locally administered (never real hardware's)."""
    return isinstance(mac, str) and _MAC.fullmatch(mac) is not None and int(mac[:2], 16) & 0b11 == 0b10


def draw_mac_prefix(avoid: Collection[str] = (), random_bits: Callable[[int], int] = secrets.randbits) -> str:
    """A random prefix (three octets) for an installation's VMs: locally administered and unicast, neither
    libvirt's own nor one of `avoid` (the prefixes the hosts' domains use already)."""
    while True:
        bits = random_bits(24)
        prefix = f"{(bits >> 16 & 0xFC) | 0x02:02x}:{bits >> 8 & 0xFF:02x}:{bits & 0xFF:02x}"
        if prefix != LEGACY_MAC_PREFIX and prefix not in avoid:
            return prefix
_HOSTNAME_PREFIX = re.compile(r"[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?")


def mac_address(prefix: str, number: int) -> str:
    """The `number`-th MAC under `prefix` (0 <= number < 2**24)."""
    if not 0 <= number < MAC_COUNT:
        raise ValueError(f"MAC number out of range: {number}")
    return f"{prefix}:{number >> 16 & 0xFF:02x}:{number >> 8 & 0xFF:02x}:{number & 0xFF:02x}"


@dataclass(frozen=True, slots=True)
class GuestSetup:
    """The guest side of a lease request (everything optional: a lease without it boots its image bare)."""

    ssh_keys: tuple[str, ...] = ()          # OpenSSH public key lines, injected through cloud-init
    user_data: str | None = None            # the user's own #cloud-config, passed through
    hostname_prefix: str | None = None      # VM n is named PREFIX-n inside the guest (else its VM name)
    network: bool = True                    # one NIC on the host's network; False: no NIC at all
    disk_size_mib: int | None = None        # grow each VM's overlay to this size (None: the image's size)
    keep_disks: bool = False                # keep the overlays when the lease ends
    macs: tuple[str, ...] = ()              # one per VM, assigned by the store

    def __post_init__(self) -> None:
        object.__setattr__(self, "ssh_keys", tuple(self.ssh_keys))
        object.__setattr__(self, "macs", tuple(self.macs))
        if self.hostname_prefix is not None and not _HOSTNAME_PREFIX.fullmatch(self.hostname_prefix):
            raise InvalidRequest("hostname_prefix", f"{self.hostname_prefix!r} is not a hostname prefix "
                                 "(lower-case letters, digits and '-', at most 42 characters)")
        if self.disk_size_mib is not None and (isinstance(self.disk_size_mib, bool) or self.disk_size_mib <= 0):
            raise InvalidRequest("disk_size", f"must be positive (got {self.disk_size_mib})")
        for mac in self.macs:
            if not is_vm_mac(mac):
                raise InvalidRequest("macs", f"{mac!r} is not a locally administered unicast MAC address")
        if len(set(self.macs)) != len(self.macs):
            raise InvalidRequest("macs", "the same MAC address twice")
        for key in self.ssh_keys:
            if not isinstance(key, str) or not key.strip() or "\n" in key.strip():
                raise InvalidRequest("ssh_keys", "each key must be one public key line")

    def hostname(self, vm_name: str, vnode: int) -> str:
        """The name the guest calls itself: PREFIX-vnode, else the VM's own name."""
        return f"{self.hostname_prefix}-{vnode}" if self.hostname_prefix else vm_name

    def mac(self, vnode: int) -> str | None:
        return self.macs[vnode] if vnode < len(self.macs) else None

    def as_dict(self) -> dict:
        return {"ssh_keys": list(self.ssh_keys), "user_data": self.user_data,
                "hostname_prefix": self.hostname_prefix, "network": self.network,
                "disk_size_mib": self.disk_size_mib, "keep_disks": self.keep_disks, "macs": list(self.macs)}

    @classmethod
    def from_dict(cls, data: dict) -> "GuestSetup":
        return cls(ssh_keys=tuple(data.get("ssh_keys", ())), user_data=data.get("user_data"),
                   hostname_prefix=data.get("hostname_prefix"), network=bool(data.get("network", True)),
                   disk_size_mib=data.get("disk_size_mib"), keep_disks=bool(data.get("keep_disks", False)),
                   macs=tuple(data.get("macs", ())))
