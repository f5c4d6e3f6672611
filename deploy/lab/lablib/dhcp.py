"""The VMs' DHCP server: one dnsmasq in the root namespace, on the lab's bridge only."""

from __future__ import annotations

import os
import time
from pathlib import Path

from .common import (BRIDGE, DHCP_FIRST, DHCP_LAST, DHCP_LEASE_TIME, DNSMASQ_LEASES, DNSMASQ_LOG, DNSMASQ_PID,
                     alive, die, pid_comm, read_pid, run)

# ------------------------------------------------------------------------------------------------- dhcp

def dnsmasq_pids() -> list[int]:
    """The lab's dnsmasq: the pid in run/dnsmasq.pid, and any dnsmasq serving the lab's bridge, whichever
    checkout's lab started it (there is one lwbr0 per machine: `down` or `up` from another checkout must not
    leave a second DHCP server behind on it)."""
    pids: set[int] = set()
    pid = read_pid(DNSMASQ_PID)
    if pid and alive(pid) and pid_comm(pid) == "dnsmasq":
        pids.add(pid)
    marker = f"--interface={BRIDGE}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or pid_comm(int(entry)) != "dnsmasq":
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in argv and alive(int(entry)):
            pids.add(int(entry))
    return sorted(pids)


def start_dhcp() -> int:
    """dnsmasq on lwbr0 only, as DHCP server for the VMs' range: no DNS, no router (the lab has neither)."""
    run(["dnsmasq", "--conf-file=/dev/null", "--no-hosts", "--no-resolv", "--port=0",
         f"--interface={BRIDGE}", "--bind-interfaces", "--except-interface=lo",
         f"--dhcp-range={DHCP_FIRST},{DHCP_LAST},255.255.255.0,{DHCP_LEASE_TIME}",
         "--dhcp-option=option:router",  # an option without a value: none is sent
         "--dhcp-authoritative",  # a client asking for an address it had in an earlier lab hears NAK at once
         # a client is its MAC (the VM's identity in its domain XML): a VM made anew with the same MAC (a new
         # machine id, so a new DHCP client id) gets the same address, and one lease, not a second
         "--dhcp-ignore-clid",
         f"--dhcp-leasefile={DNSMASQ_LEASES}", f"--pid-file={DNSMASQ_PID}",
         f"--log-facility={DNSMASQ_LOG}", "--log-dhcp"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pid = read_pid(DNSMASQ_PID)
        if pid and alive(pid):
            return pid
        time.sleep(0.05)
    die(f"dnsmasq did not come up in 10 s; see {DNSMASQ_LOG}")
    return 0


def dhcp_leases() -> list[list[str]]:
    """run/dnsmasq.leases: per lease [expiry (epoch s), MAC, IP, hostname or *, client id]."""
    try:
        return [line.split() for line in DNSMASQ_LEASES.read_text().splitlines() if len(line.split()) >= 4]
    except OSError:
        return []

