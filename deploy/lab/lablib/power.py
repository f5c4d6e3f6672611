"""A lab host that loses its power, and comes back.

`crash` kills every process of the host at once with SIGKILL (its QEMU processes, libvirtd, virtlogd, sshd:
all but the holder of its namespaces), as a power cut would: its VMs are gone, its address answers nothing
but "connection refused". `boot` brings it back as a reboot would: /run/libvirt is empty again (the
running domains' state is lost with the power), the definitions of persistent domains in /etc/libvirt are
still there (shut off), and its daemons start again; no VM runs on it.
"""

from __future__ import annotations

import os
import shutil
import signal
import time

from .common import alive, die, host_dir, host_name, netns, netns_pids, read_pid, say
from .hosts import start_daemons
from .reach import wait_libvirt, wait_ssh


def host_number(name: str, hosts: list[int]) -> int:
    """`lab2` -> 2, for a host of the lab that is up."""
    for n in hosts:
        if host_name(n) == name:
            return n
    die(f"no lab host named {name!r} (the lab has {', '.join(host_name(n) for n in hosts) or 'none'})")


def crash(n: int) -> list[int]:
    """SIGKILL to all of host n's processes but its namespaces' holder, at once; their pids."""
    holder = read_pid(host_dir(n) / "holder.pid")
    if holder is None or not alive(holder):
        die(f"{host_name(n)} is not up (no namespace holder)")
    victims = [pid for pid in netns_pids(netns(n)) if pid != holder]
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in victims) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [pid for pid in victims if alive(pid)]
    if left:
        die(f"{host_name(n)}: processes {left} survived SIGKILL")
    say(f"crash: {host_name(n)} lost its power ({len(victims)} processes killed)")
    return victims


def boot(n: int, transport: str) -> None:
    """Host n after a power cut: empty /run/libvirt, its daemons started again, answering over `transport`."""
    hd = host_dir(n)
    holder = read_pid(hd / "holder.pid")
    if holder is None or not alive(holder):
        die(f"{host_name(n)} is not up (no namespace holder)")
    running = [pid for pid in (read_pid(hd / f) for f in ("libvirtd.pid", "virtlogd.pid", "sshd.pid")) if alive(pid)]
    if running:
        die(f"{host_name(n)} is running (pids {running}): `crash` it first")
    for entry in (hd / "run").iterdir():   # (tmpfs on a real host: gone with the power)
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    for pidfile in ("libvirtd.pid", "virtlogd.pid", "sshd.pid"):
        (hd / pidfile).unlink(missing_ok=True)
    start_daemons(n, holder, transport)
    wait_libvirt([n], transport)
    wait_ssh([n])
    say(f"boot: {host_name(n)} is back (no VM runs on it; domain definitions it had are kept)")
