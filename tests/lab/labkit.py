"""Helpers of the lab tier (tests/lab): paths, imports that fail with a clear message, the guest, its console."""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "deploy" / "lab" / "lab"
LAB_RUN = REPO / "deploy" / "lab" / "run"
INVENTORY = LAB_RUN / "inventory.toml"
GUEST_BUILD = REPO / "deploy" / "guest" / "build"
GUEST_DIR = Path(os.environ.get("LEASEWISE_GUEST_DIR", "/var/lib/libvirt/images/leasewise-guest"))
SHARED_DIR = Path("/var/lib/libvirt/images")
LAB_HOSTS = 3
#: the transport the lab tier brings the lab up with (CI: ssh, what a real cluster uses); the tls tests bring it
#: up over tls for their module and back over this afterwards
LAB_TRANSPORT = os.environ.get("LEASEWISE_LAB_TRANSPORT", "ssh")
VM_PREFIX = "lwtest-"
TEST_VM_PREFIXES = (VM_PREFIX, "lwct-")  # ours, and tests/drivers/test_driver_contract.py's (cleaned after each test)

GUEST_MEMORY_MIB = 256

# The machine's one lab is shared with anyone else running deploy/lab/lab or this tier: the session holds
# the lab's lock (the same one deploy/lab/lab takes) from `up` to `down`.
LAB_LOCK = Path("/run/lock/leasewise-lab.lock")
LAB_LOCK_WAIT_S = float(os.environ.get("LEASEWISE_LAB_LOCK_WAIT", "1200"))


# --------------------------------------------------------------------------------------------- helpers

def _missing(what: str, fix: str) -> None:
    pytest.fail(f"lab tier cannot run: {what}. {fix}", pytrace=False)


EVENT_LOOP_THREAD = "leasewise-libvirt-events"  # the driver runs libvirt's event loop in a thread of this name


def import_libvirt():
    try:
        import libvirt  # noqa: PLC0415
    except ImportError:
        _missing("libvirt-python is not installed", "Run deploy/install.sh (pip install -e '.[test,libvirt]').")
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)  # errors are raised; do not also print them
    return libvirt


def ensure_event_loop(libvirt) -> None:
    """libvirt's default event loop in a daemon thread: keepalive needs it, so that a call to a host that
    vanished fails within seconds instead of waiting for TCP to give up."""
    if any(t.name == EVENT_LOOP_THREAD for t in threading.enumerate()):
        return
    libvirt.virEventRegisterDefaultImpl()

    def run() -> None:
        while True:
            if libvirt.virEventRunDefaultImpl() < 0:
                time.sleep(1.0)

    threading.Thread(target=run, name=EVENT_LOOP_THREAD, daemon=True).start()


def open_conn(libvirt, uri: str):
    """A raw libvirt connection with keepalive (5 s, 3 misses)."""
    ensure_event_loop(libvirt)
    conn = libvirt.open(uri)
    conn.setKeepAlive(5, 3)
    return conn


def import_inventory():
    try:
        from drivers.inventory import load_inventory  # noqa: PLC0415
    except ImportError as exc:
        _missing(f"drivers.inventory cannot be imported ({exc})", "drivers/inventory.py is part of the project.")
    return load_inventory


def import_driver():
    """drivers.libvirt.LibvirtDriver, failing with a clear message while it does not exist."""
    try:
        from drivers.libvirt import LibvirtDriver  # noqa: PLC0415
    except ImportError as exc:
        _missing(f"drivers.libvirt cannot be imported ({exc})",
                 "drivers/libvirt/ (the libvirt driver) is part of the project.")
    return LibvirtDriver


def hold_lab_lock():
    """Take the lab's lock for this session (waiting while another session or `lab up` holds it)."""
    LAB_LOCK.parent.mkdir(parents=True, exist_ok=True)
    handle = open(LAB_LOCK, "a+")
    deadline = time.monotonic() + LAB_LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                handle.seek(0)
                holder = handle.read().strip() or "unknown"
                handle.close()
                _missing(f"the lab is in use by another session after {LAB_LOCK_WAIT_S:.0f} s ({holder})",
                         f"Wait for it, or remove the lab it holds with deploy/lab/lab down (lock {LAB_LOCK}).")
            time.sleep(1.0)
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}: pytest lab session\n")
    handle.flush()
    return handle


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ, LEASEWISE_LAB_LOCK_HELD="1")  # this session holds the lab's lock
    return subprocess.run([str(c) for c in cmd], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout, env=env)


def lab_down() -> None:
    proc = _run([LAB, "down"], timeout=180)
    if proc.returncode != 0:
        raise RuntimeError(f"deploy/lab/lab down failed:\n{proc.stdout}{proc.stderr}")


def lab_command(*args: str, timeout: float = 300) -> str:
    """`deploy/lab/lab ARGS` (the session holds the lab's lock), which must succeed; its output."""
    proc = _run([LAB, *args], timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"deploy/lab/lab {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


@dataclass
class Lab:
    inventory: Path
    hosts: list                       # list[drivers.inventory.HostConfig]
    names: list[str]
    uris: dict[str, str]              # the URI leasewise opens to each (its link_uri: key and known_hosts added)
    run_dir: Path
    transport: str = "tcp"
    timings: dict[str, float] = field(default_factory=dict)
    generation: int = 0               # one more each time the lab is brought up again (connections are stale)

    def load(self, transport: str) -> None:
        """Read the inventory `deploy/lab/lab up` wrote: the hosts and how they are reached."""
        from drivers.inventory import load_inventory  # noqa: PLC0415
        from drivers.libvirt.transport import link_uri  # noqa: PLC0415

        self.hosts = load_inventory(self.inventory)
        self.names = [h.name for h in self.hosts]
        self.uris = {h.name: link_uri(h) for h in self.hosts}
        self.transport = transport
        self.generation += 1

    def up(self, transport: str, storage: str = "shared") -> None:
        """The lab brought up again (replacing the one up) over `transport`, its image directory `storage`
        (shared by the hosts, or each host's own: local)."""
        lab_command("up", "-n", str(LAB_HOSTS), "--transport", transport, "--storage", storage, timeout=1800)
        self.load(transport)

    def crash(self, name: str) -> None:
        """Host `name` loses its power (`deploy/lab/lab crash`): its VMs and daemons are killed at once."""
        lab_command("crash", name)

    def boot(self, name: str) -> None:
        """Host `name` comes back after a crash, empty (`deploy/lab/lab boot`)."""
        lab_command("boot", name)

    def cut(self, name: str) -> None:
        """Host `name` drops every packet (`deploy/lab/lab cut`): nothing answers, its VMs run on."""
        lab_command("cut", name)

    def mend(self, name: str) -> None:
        """Host `name` answers again (`deploy/lab/lab mend`)."""
        lab_command("mend", name)

    def host_dir(self, name: str) -> Path:
        """Where host `name`'s private directories live in the root namespace (run/hostN)."""
        return self.run_dir / f"host{name.removeprefix('lab')}"

    def stop_libvirtd(self, name: str) -> None:
        """Host `name`'s libvirtd dies (SIGKILL, as a crash): its VMs' QEMU processes run on, the host
        answers no one until `start_libvirtd`."""
        pid = int((self.host_dir(name) / "libvirtd.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)

    def start_libvirtd(self, libvirt, name: str) -> None:
        """Host `name`'s libvirtd again, in the host's namespaces, as `deploy/lab/lab up` started it; back
        when it answers (it finds the VMs that ran on meanwhile)."""
        hd = self.host_dir(name)
        holder = (hd / "holder.pid").read_text().strip()
        listen = [] if self.transport == "ssh" else ["--listen"]   # (over ssh: its socket only)
        with open(hd / "libvirtd.out", "ab") as log:
            subprocess.run(["nsenter", "-t", holder, "-m", "-u", "-n", "libvirtd", "-d", *listen, "-p",
                            str(hd / "libvirtd.pid")], stdout=log, stderr=log, check=True, timeout=60)
        deadline = time.monotonic() + 60
        while True:
            try:
                open_conn(libvirt, self.uris[name]).close()
                return
            except Exception:
                assert time.monotonic() < deadline, f"libvirtd on {name} did not answer again within 60 s"
                time.sleep(0.5)

    def private_path(self, name: str, path: str) -> Path:
        """The root namespace's view of `path` as host `name` sees it (only for its private binds)."""
        binds = {"/var/lib/libvirt/qemu": "qemu", "/run/libvirt": "run", "/var/log/libvirt": "log",
                 "/etc/libvirt": "etc"}
        for inside, sub in binds.items():
            if path == inside or path.startswith(inside + "/"):
                return self.host_dir(name) / sub / path[len(inside):].lstrip("/")
        raise ValueError(f"{path} is not private to a lab host")


class LabConnections(Mapping):
    """host name -> a raw libvirt connection to it (how the tests look at hosts without the driver), opened
    on first use and opened again once the lab was brought up again (`Lab.up`)."""

    def __init__(self, libvirt, lab: Lab):
        self._libvirt = libvirt
        self._lab = lab
        self._opened: dict[str, object] = {}
        self._generation = lab.generation

    def _fresh(self) -> None:
        if self._generation != self._lab.generation:
            self.close()
            self._generation = self._lab.generation

    def __getitem__(self, name: str):
        self._fresh()
        conn = self._opened.get(name)
        if conn is not None:
            try:
                alive = conn.isAlive()
            except self._libvirt.libvirtError:
                alive = False
            if not alive:   # (its host's libvirtd was restarted, or the host crashed and was booted)
                self._opened.pop(name)
                conn = None
        if conn is None:
            conn = self._opened[name] = open_conn(self._libvirt, self._lab.uris[name])
        return conn

    def __iter__(self):
        return iter(self._lab.names)

    def __len__(self) -> int:
        return len(self._lab.names)

    def close(self) -> None:
        for conn in self._opened.values():
            try:
                conn.close()
            except Exception:
                pass
        self._opened = {}


def guest_spec(name: str, mib: int = 64, pps: int = 0, memory_mib: int = GUEST_MEMORY_MIB, lease_id=None):
    """The lab's tiny guest: direct kernel boot, dirtier working set `mib` MiB dirtied at `pps` pages/s."""
    from drivers.base import VMSpec  # noqa: PLC0415

    return VMSpec(
        name=name,
        vcpus=1,
        memory_mib=memory_mib,
        kernel=str(GUEST_DIR / "vmlinuz"),
        initrd=str(GUEST_DIR / "initrd.img"),
        cmdline=f"console=ttyS0 quiet dirtier.mib={mib} dirtier.pps={pps} dirtier.report=1",
        lease_id=lease_id,
    )


# ------------------------------------------------------------------------------------- guest console

class Console:
    """Reads a running domain's serial console (the dirtier prints a status line every second)."""

    def __init__(self, libvirt, uri: str, name: str):
        self._libvirt = libvirt
        self._conn = open_conn(libvirt, uri)
        self._stream = self._conn.newStream(0)
        self._conn.lookupByName(name).openConsole(None, self._stream, libvirt.VIR_DOMAIN_CONSOLE_FORCE)
        self._chunks: list[str] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            try:
                data = self._stream.recv(4096)
            except self._libvirt.libvirtError:
                return
            if not isinstance(data, bytes) or not data:
                return
            with self._lock:
                self._chunks.append(data.decode(errors="replace"))

    @property
    def text(self) -> str:
        with self._lock:
            return "".join(self._chunks)

    def wait_for(self, pattern: str, timeout: float, since: int = 0) -> re.Match:
        """First match of `pattern` in the output after offset `since`; fails after `timeout` seconds."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(self.text, since)
            if m:
                return m
            if time.monotonic() > deadline:
                raise AssertionError(f"console: no {pattern!r} within {timeout:.0f} s; got:\n{self.text[-1500:]}")
            time.sleep(0.1)

    def close(self) -> None:
        try:
            self._stream.abort()
        except self._libvirt.libvirtError:
            pass
        self._thread.join(5)
        try:
            self._conn.close()
        except self._libvirt.libvirtError:
            pass


DIRTIER_LINE = r"dirtier: t=(\d+)s mib=(\d+) pps=(\d+) dirtied=(\d+) rate=(\d+) pages/s"


def domain_state(libvirt, conn, name: str) -> str | None:
    """'running', 'paused', 'shutoff', ... as libvirt itself says, or None when the host has no such domain."""
    try:
        dom = conn.lookupByName(name)
        state = dom.state()[0]
    except libvirt.libvirtError:   # (also: undefined between the two calls, e.g. migrated away)
        return None
    return {
        libvirt.VIR_DOMAIN_RUNNING: "running",
        libvirt.VIR_DOMAIN_PAUSED: "paused",
        libvirt.VIR_DOMAIN_SHUTOFF: "shutoff",
        libvirt.VIR_DOMAIN_SHUTDOWN: "shutdown",
        libvirt.VIR_DOMAIN_CRASHED: "crashed",
        libvirt.VIR_DOMAIN_PMSUSPENDED: "pmsuspended",
    }.get(state, f"state-{state}")


def remove_lease_domains(libvirt, conns) -> None:
    """Destroy and undefine every leasewise VM (lw-*) on the lab hosts: a test leaves nothing behind."""
    for conn in conns.values():
        try:
            domains = conn.listAllDomains(0)
        except libvirt.libvirtError:   # (a host that does not answer)
            continue
        for dom in domains:
            if dom.name().startswith("lw-"):
                if dom.isActive():
                    try:
                        dom.destroy()
                    except libvirt.libvirtError:   # (it stopped meanwhile: a daemon stopping its VMs)
                        if dom.isActive():
                            raise
                dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE)


def daemon_config(path, scheduling: str = "", daemon: str = "") -> None:
    """A config for the daemon on the lab: the libvirt driver, a 1 s poll, a 3 s graceful stop, 5 s shutdowns
    planned, and the test's own `[daemon]` and `[scheduling]` lines."""
    path.write_text('[daemon]\ndriver = "libvirt"\npoll_interval = "1s"\ngraceful_timeout = "3s"\n' + daemon +
                    '[scheduling]\nshutdown_time = "5s"\n' + scheduling)


#: the CLI as a user runs it, from this checkout
CLI = [sys.executable, "-c", "from orchestrator.cli import main; main()"]


def leasewise(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`leasewise ARGS`, which must succeed (its output in the failure message)."""
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO)
    assert done.returncode == 0, f"leasewise {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done


def imported_site(lab, tmp_path: Path) -> list[str]:
    """A fresh store with every lab host imported (1 vCPU, 1 GiB each) and the lab daemon's config: the
    --state and --config options for every command."""
    state, config = tmp_path / "state.sqlite", tmp_path / "leasewise.toml"
    daemon_config(config)
    common = ["--state", str(state), "--config", str(config)]
    leasewise("host", "import", str(lab.inventory), "--cpus", "1", "--memory", "1024", *common, timeout=120)
    return common


def host_check(common: list[str], host: str) -> tuple[int, dict]:
    """`leasewise host check HOST --json`: its exit code (0, or 1 when a check failed) and what it printed."""
    import json  # noqa: PLC0415

    done = subprocess.run([*CLI, "host", "check", host, "--json", *common], capture_output=True, text=True,
                          timeout=300, cwd=REPO)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return done.returncode, json.loads(done.stdout)


@dataclass
class EvacuationSite:
    """The lab set up for a best-effort VM to be live-migrated out of an AR's way: hosts `first` and
    `second` are big enough for a 512 MiB node of the AR, `small` only for the 256 MiB best-effort VM."""

    first: str
    second: str
    small: str
    state: Path
    common: list[str]          # --state and --config, for every command
    guest: list[str]           # the tiny guest's boot options, its dirtier touching `dirtier_mib` MiB once


def evacuation_site(lab, tmp_path: Path, bandwidth_mib_s: float, margin: str, dirtier_mib: int,
                    measure_dirty_rates: bool = True) -> EvacuationSite:
    """Three lab hosts imported into a fresh store with migrate-first preemption at `bandwidth_mib_s`
    (libvirt's limit too), the third declared small. Without `measure_dirty_rates` the planner keeps to the
    declared dirty rate (a measurement taken while the guest touches its memory would forbid the migration)."""
    from orchestrator.state.store import Store

    if len(lab.names) < 3:
        pytest.fail("this test needs three lab hosts (deploy/lab/lab up -n 3)")
    first, second, small = lab.names[:3]
    state = tmp_path / "state.sqlite"
    config = tmp_path / "leasewise.toml"
    daemon_config(config, f'preemption_mode = "migrate-first"\nlive_migration_bandwidth = {bandwidth_mib_s}\n'
                          f'live_migration_margin = "{margin}"\n',
                  daemon='' if measure_dirty_rates else 'dirty_rate_interval = "0s"\n')
    common = ["--state", str(state), "--config", str(config)]
    guest = ["--kernel", str(GUEST_DIR / "vmlinuz"), "--initrd", str(GUEST_DIR / "initrd.img"),
             "--cmdline", f"console=ttyS0 quiet dirtier.mib={dirtier_mib} dirtier.pps=0"]
    leasewise("host", "import", str(lab.inventory), "--cpus", "1", "--memory", "1024", *common)
    with Store.open(state) as store:
        store.update_host_capacity(small, 1, 384)   # room for the 256 MiB VM, not for a 512 MiB node of the AR
    return EvacuationSite(first, second, small, state, common, guest)


def run_cli(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    """`leasewise ARGS` from this checkout; with `check`, it must succeed (its output in the failure message)."""
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO)
    if check:
        assert done.returncode == 0, \
            f"leasewise {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def stop_processes(session: subprocess.Popen | None, daemon: subprocess.Popen) -> None:
    """What a test started, gone: an ssh session killed, the daemon stopped (killed if it will not stop)."""
    if session is not None and session.poll() is None:
        session.kill()
    if daemon.poll() is None:
        daemon.terminate()
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()


def held_ssh_session(vm: str, key: Path, common: list[str], seconds: int = 150) -> subprocess.Popen:
    """`leasewise lease ssh VM` held open for `seconds`, printing "alive" at the end if it lasted (a session
    that dies, e.g. in a migration, ends within 30 s and says so, rather than hanging)."""
    return subprocess.Popen(
        [*CLI, "lease", "ssh", vm, "-i", str(key), "-o", "BatchMode=yes", "-o", "ServerAliveInterval=5",
         "-o", "ServerAliveCountMax=6", *common, "--", "sh", "-c",
         f"'for i in $(seq 1 {seconds}); do sleep 1; done; echo alive'"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
