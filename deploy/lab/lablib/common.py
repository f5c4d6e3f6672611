"""Where the lab lives and what it is called, and the small helpers every part uses (commands, pids, the lock)."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import IO, Any, NoReturn

HERE = Path(__file__).resolve().parents[1]
RUN = HERE / "run"
BRIDGE = "lwbr0"
GATEWAY = "10.77.0.1"
PREFIXLEN = 24
SUBNET = "10.77.0.0/24"
# An `unreachable` route for the lab subnet, below the bridge's own route (metric 0): while the lab is up
# the bridge wins; once it is down, a client that still talks to a lab address gets "no route to host"
# at once instead of its packets leaving through the default route. `up` adds it, `down` leaves it.
GUARD_METRIC = "4077"
NS_PREFIX = "lw-lab"
VETH_PREFIX = "lwveth"
SHARED_IMAGES = Path("/var/lib/libvirt/images")
STATE_DIR = "/var/lib/libvirt/qemu/save"
MAX_HOSTS = 20
# QEMU capabilities probed by one lab libvirtd, seeded into the next lab's hosts (libvirt re-probes
# by itself if QEMU, libvirt or the kernel changed, so a stale copy only costs time)
CAPS_CACHE = Path(os.environ.get("LEASEWISE_CACHE_DIR", "/var/cache/leasewise")) / "lab-qemu-capabilities"
TCP_WAIT_S = 90.0
DEFAULT_LINK_RATE = "1gbit"
# tbf's bucket: large enough for one GSO super-packet (64 KiB) several times over, small next to a
# second of traffic, so the rate holds over any interval a migration pass lasts
LINK_BURST = "256kb"
LINK_LATENCY = "50ms"
SSH_WAIT_S = 30.0
# Each host's bridge for VM NICs (its uplink eth0 is a port of it, and it holds the host's address)
VM_BRIDGE = "br0"
# The DHCP server for VMs on the lab network (dnsmasq in the root namespace, on lwbr0 only)
DHCP_FIRST = "10.77.0.100"
DHCP_LAST = "10.77.0.199"
DHCP_LEASE_TIME = "1h"
DNSMASQ_PID = RUN / "dnsmasq.pid"
DNSMASQ_LEASES = RUN / "dnsmasq.leases"
DNSMASQ_LOG = RUN / "dnsmasq.log"

# One lab per machine: `up` and `down` (and a whole lab test session, see tests/lab/conftest.py) hold this
# lock, so that two of them never tear each other's hosts down. A caller that already holds it (the test
# session calling `up`/`down`) says so with LEASEWISE_LAB_LOCK_HELD=1.
LOCK_FILE = Path("/run/lock/leasewise-lab.lock")
LOCK_HELD_ENV = "LEASEWISE_LAB_LOCK_HELD"
LOCK_WAIT_S = float(os.environ.get("LEASEWISE_LAB_LOCK_WAIT", "1200"))

# Debian packages the lab needs, and a binary that tells whether each is there.
PACKAGES = {
    "libvirt-daemon-system": "/usr/sbin/libvirtd",
    "libvirt-clients": "/usr/bin/virsh",
    "qemu-system-x86": "/usr/bin/qemu-system-x86_64",
    "qemu-utils": "/usr/bin/qemu-img",
    "openssh-server": "/usr/sbin/sshd",
    "openssh-client": "/usr/bin/ssh-keygen",
    "iproute2": "/usr/sbin/ip",
    "util-linux": "/usr/bin/nsenter",
    "dnsmasq-base": "/usr/sbin/dnsmasq",  # the binary alone: no service of its own in the root namespace
    "openssl": "/usr/bin/openssl",        # the tls transport's CA and certificates
}

# private directory under run/hostN -> where it is bind-mounted inside the host's mount namespace
DIR_BINDS = {
    "run": "/run/libvirt",
    "qemu": "/var/lib/libvirt/qemu",
    "cache": "/var/cache/libvirt",
    "log": "/var/log/libvirt",
    "etc": "/etc/libvirt",
}
#: `up --storage`: `shared` (default) keeps /var/lib/libvirt/images one directory every host sees, as NFS would;
#: `local` gives each host its own (run/hostN/images bound over it), as hosts with only their own disks
STORAGES = ("shared", "local")
DEFAULT_STORAGE = "shared"
STORAGE_FILE = RUN / "storage"
#: with local storage: the host's private directory bound over the image directory
LOCAL_IMAGES_BIND = ("images", str(SHARED_IMAGES))

#: a host's own /etc: a copy of this machine's made at `up`, with the host's own hosts, passwd, group and shadow
#: (bound over the whole directory first, then /etc/libvirt over it: a bind over a single file would be undone
#: the moment anything on this machine replaces that file, as useradd replaces /etc/passwd)
ETC_COPY = "rootetc"



# ----------------------------------------------------------------------------------------------- helpers

def write_storage(storage: str) -> None:
    STORAGE_FILE.write_text(storage + "\n")


def read_storage() -> str:
    """The storage of the lab that is up (shared for a lab brought up before storages were recorded)."""
    try:
        text = STORAGE_FILE.read_text().strip()
    except OSError:
        return DEFAULT_STORAGE
    return text if text in STORAGES else DEFAULT_STORAGE


def say(msg: str) -> None:
    print(f"lab: {msg}", flush=True)


def die(msg: str) -> NoReturn:
    print(f"lab: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def run(cmd: list[str], check: bool = True, timeout: float | None = 60, **kw: Any) -> subprocess.CompletedProcess[str]:
    kw.setdefault("stdin", subprocess.DEVNULL)
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    proc = subprocess.run(cmd, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        die(f"`{' '.join(cmd)}` failed ({proc.returncode}): {(proc.stderr or proc.stdout or '').strip()}")
    return proc


def quiet(cmd: list[str], timeout: float = 30) -> bool:
    try:
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=timeout).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def host_ip(n: int) -> str:
    return f"10.77.0.{10 + n}"


def host_name(n: int) -> str:
    return f"lab{n}"


def host_dir(n: int) -> Path:
    return RUN / f"host{n}"


def netns(n: int) -> str:
    return f"{NS_PREFIX}{n}"


def veth(n: int) -> str:
    return f"{VETH_PREFIX}{n}"


def host_uuid(n: int) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{host_name(n)}.leasewise-lab.invalid"))


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def pid_comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def existing_netns() -> list[str]:
    proc = run(["ip", "netns", "list"], check=False)
    names = [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]
    return [n for n in names if n.startswith(NS_PREFIX) and n[len(NS_PREFIX):].isdigit()]


def existing_links(prefix: str) -> list[str]:
    try:
        names = os.listdir("/sys/class/net")
    except OSError:
        return []
    return [n for n in names if n.startswith(prefix)]


def link_exists(name: str) -> bool:
    return quiet(["ip", "link", "show", "dev", name])


def lab_host_numbers() -> list[int]:
    """Every host number that has something left: a namespace, a veth or a run/hostN directory."""
    nums: set[int] = set()
    for ns in existing_netns():
        nums.add(int(ns[len(NS_PREFIX):]))
    for link in existing_links(VETH_PREFIX):
        suffix = link[len(VETH_PREFIX):]
        if suffix.isdigit():
            nums.add(int(suffix))
    if RUN.is_dir():
        for d in RUN.iterdir():
            if d.is_dir() and d.name.startswith("host") and d.name[4:].isdigit():
                nums.add(int(d.name[4:]))
    return sorted(nums)


def netns_pids(ns: str) -> list[int]:
    if ns not in existing_netns():
        return []
    proc = run(["ip", "netns", "pids", ns], check=False)
    return [int(p) for p in proc.stdout.split() if p.isdigit() and int(p) != os.getpid()]


def require_root() -> None:
    if os.geteuid() != 0:
        die("must run as root (namespaces, bridges and libvirtd need it)")


def acquire_lab_lock(what: str, wait_s: float = LOCK_WAIT_S) -> IO[str] | None:
    """Exclusive lock on the machine's lab, waiting up to `wait_s` seconds; returns the open file (keep it
    open to keep the lock), or None when the caller said it holds the lock already."""
    if os.environ.get(LOCK_HELD_ENV) == "1":
        return None
    LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    handle = open(LOCK_FILE, "a+")
    deadline = time.monotonic() + wait_s
    told = False
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if not told:
                handle.seek(0)
                holder = handle.read().strip() or "unknown"
                say(f"waiting (up to {wait_s:.0f} s) for the lab, in use by: {holder}")
                told = True
            if time.monotonic() > deadline:
                handle.seek(0)
                die(f"the lab is still in use after {wait_s:.0f} s by: {handle.read().strip() or 'unknown'} "
                    f"(lock {LOCK_FILE})")
            time.sleep(1.0)
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}: deploy/lab/lab {what}\n")
    handle.flush()
    return handle


def kill_pids(pids: list[int], what: str) -> None:
    pids = [p for p in pids if alive(p)]
    if not pids:
        return
    for sig, wait_s in ((signal.SIGTERM, 8.0), (signal.SIGKILL, 5.0)):
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            pids = [p for p in pids if alive(p)]
            if not pids:
                return
            time.sleep(0.1)
    if pids:
        say(f"warning: {what}: processes {pids} did not die")

