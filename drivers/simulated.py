"""A driver with no hosts behind it: VMs, save images and migrations live in memory, on a simulated clock.

It lets the scheduler and the daemon run end to end in tests and in `leasewise simulate`: every
operation advances the `SimulatedClock` by what it would cost (never sleeps): by default the rates and
fixed costs of `SimulatedDriverConfig`, or, given `times` (an `OperationTimes`) and a migration model,
exactly what the planner reserved for it, so a dry run tells the truth about the plan. Failures are injected
from configuration, drawn from a `random.Random(seed)` this instance owns so a run can be replayed.
It follows the libvirt driver call for call (the contract tests hold both to it), including libvirt's
quirks that matter to callers: a saved VM stays defined ("saved") on its host until it is resumed or
stopped, and a save image is only visible on the host that wrote it unless it is on shared storage.

With a `state_file` the simulated hosts outlive the process: every VM (with its state) and every save
image is read from that JSON file when the driver is built and written back, atomically (a temporary
file, then `os.replace`), after each operation that changes them, so a daemon restarted after a crash
sees the same "hosts". Only one driver process may write a given file at a time. The clock is never
stored: it stays the caller's. The hosts themselves (their capacities) are the caller's too, given when the
driver is built (the store's) and as they are added and removed while it runs; a removed host takes its
VMs and save images with it, so the file never names a host the driver was not given.
"""

from __future__ import annotations

import json
import math
import os
import functools
import random
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol, get_args

from .base import (
    HOST_CHECKS,
    CheckItem,
    DiskSpec,
    Driver,
    HostCheck,
    HostEntry,
    HostInfo,
    ImageInfo,
    MigrationModel,
    MigrationProgress,
    MigrationReport,
    OnTimeout,
    OperationReport,
    ProgressCallback,
    VMAddress,
    VMInfo,
    VMSpec,
    VMStateName,
    validate_migration_args,
)
from .clock import UTC, SimulatedClock, as_utc
from .cloudinit import SeedSpec
from .domain_xml import render_domain_xml
from .downtime import DowntimeSchedule
from .errors import (
    HostUnreachable,
    MigrationFailed,
    OperationFailed,
    UnknownHost,
    VMAlreadyExists,
    VMNotFound,
)
from .files import write_whole
from .inventory import is_under

MIB = 1024 * 1024
ZERO = timedelta(0)
STATE_FORMAT = "leasewise-simulated-hosts"
STATE_VERSION = 1
QCOW2_MAGIC = b"QFI\xfb"
#: where the simulated hosts say they keep the VMs' overlays (nothing is written there)
SIMULATED_DISK_DIR = "/var/lib/libvirt/images/leasewise-vms"
OPERATIONS = frozenset({"start", "stop", "suspend", "resume", "move_state", "migrate"})


@dataclass(frozen=True)
class HostCapacity:
    vcpus: int
    memory_mib: int


@dataclass(frozen=True)
class SimulatedDriverConfig:
    """How long operations take and how they fail. Rates are MiB/s of guest memory.

    `host_down_at` maps a host to the moment it stops answering: operations that start on it from then on
    raise `HostUnreachable`, until its `host_up_at` if it has one (as a libvirtd restarted: the VMs on it
    ran on meanwhile). `failure_probability` makes each operation in
    `failing_operations` fail (after taking its full time, changing nothing) with that probability.
    """

    start_time: timedelta = timedelta(seconds=5)
    stop_time: timedelta = timedelta(seconds=2)
    suspend_rate_mib_s: float = 200.0
    suspend_overhead: timedelta = timedelta(seconds=1)
    resume_rate_mib_s: float = 200.0
    resume_overhead: timedelta = timedelta(seconds=1)
    transfer_rate_mib_s: float = 100.0        # move_state between hosts
    transfer_overhead: timedelta = ZERO
    migration_bandwidth_mib_s: float = 100.0  # used when migrate() is not given a bandwidth
    migration_overhead: timedelta = ZERO
    dirty_factor: float = 1.0
    migration_switchover_ms: float = 0.0      # fixed part of every migration's pause
    downtime_schedule: DowntimeSchedule = DowntimeSchedule()
    shared_storage: tuple[str, ...] = ()
    domain_type: str = "kvm"
    host_down_at: Mapping[str, datetime] = field(default_factory=dict)
    host_up_at: Mapping[str, datetime] = field(default_factory=dict)
    failure_probability: float = 0.0
    failing_operations: frozenset[str] = OPERATIONS
    seed: int | None = 0

    def __post_init__(self) -> None:
        for name in ("start_time", "stop_time", "suspend_overhead", "resume_overhead", "transfer_overhead",
                     "migration_overhead"):
            value = getattr(self, name)
            if not isinstance(value, timedelta) or value < ZERO:
                raise ValueError(f"{name} must be a timedelta >= 0 (got {value!r})")
        for name in ("suspend_rate_mib_s", "resume_rate_mib_s", "transfer_rate_mib_s", "migration_bandwidth_mib_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be greater than 0 (got {value})")
        if not math.isfinite(self.dirty_factor) or self.dirty_factor < 0:
            raise ValueError(f"dirty_factor must be a finite number >= 0 (got {self.dirty_factor})")
        if not 0.0 <= self.failure_probability <= 1.0:
            raise ValueError(f"failure_probability must be within [0, 1] (got {self.failure_probability})")
        unknown = set(self.failing_operations) - OPERATIONS
        if unknown:
            raise ValueError(f"failing_operations: unknown operation {sorted(unknown)[0]!r}")
        down = {host: as_utc(when, f"host_down_at[{host}]") for host, when in dict(self.host_down_at).items()}
        object.__setattr__(self, "host_down_at", MappingProxyType(down))
        up = {host: as_utc(when, f"host_up_at[{host}]") for host, when in dict(self.host_up_at).items()}
        for host, when in up.items():
            if host not in down or when <= down[host]:
                raise ValueError(f"host_up_at[{host}] must come after that host's host_down_at")
        object.__setattr__(self, "host_up_at", MappingProxyType(up))
        object.__setattr__(self, "failing_operations", frozenset(self.failing_operations))
        object.__setattr__(self, "shared_storage", tuple(self.shared_storage))


class OperationTimes(Protocol):
    """Seconds each operation takes on the simulated hosts (live migrations have their `MigrationModel`).
    The orchestrator passes the planner's cost model (orchestrator/runtime/driver_factory.py)."""

    def start(self, spec: VMSpec) -> float: ...

    def stop(self, spec: VMSpec) -> float: ...

    def suspend(self, spec: VMSpec) -> float: ...

    def resume(self, spec: VMSpec) -> float: ...

    def move_state(self, size_bytes: int, shared: bool) -> float:
        """A memory image of `size_bytes` from one host to another; `shared`: on storage both see."""
        ...


@dataclass(frozen=True)
class RatedTimes:
    """`OperationTimes` from a `SimulatedDriverConfig`'s own rates and fixed costs (the default)."""

    config: SimulatedDriverConfig

    def start(self, spec: VMSpec) -> float:
        return self.config.start_time.total_seconds()

    def stop(self, spec: VMSpec) -> float:
        return self.config.stop_time.total_seconds()

    def suspend(self, spec: VMSpec) -> float:
        return self.config.suspend_overhead.total_seconds() + spec.memory_mib / self.config.suspend_rate_mib_s

    def resume(self, spec: VMSpec) -> float:
        return self.config.resume_overhead.total_seconds() + spec.memory_mib / self.config.resume_rate_mib_s

    def move_state(self, size_bytes: int, shared: bool) -> float:
        if shared:   # nothing to copy
            return 0.0
        return self.config.transfer_overhead.total_seconds() + size_bytes / MIB / self.config.transfer_rate_mib_s


@dataclass
class _VM:
    spec: VMSpec
    host: str
    state: VMStateName


@dataclass(frozen=True)
class _StateFile:
    spec: VMSpec
    size_bytes: int


_VM_STATES = frozenset(get_args(VMStateName))
_SPEC_FIELDS = frozenset(f.name for f in fields(VMSpec))


def _spec_from_json(data: object) -> VMSpec:
    if not isinstance(data, dict):
        raise ValueError(f"bad VM spec {data!r}")
    unknown = sorted(set(data) - _SPEC_FIELDS)
    if unknown:
        raise ValueError(f"VM spec has unknown key {unknown[0]!r}")
    values = dict(data)
    if isinstance(values.get("disk"), dict):
        values["disk"] = DiskSpec(**values["disk"])
    if isinstance(values.get("seed"), dict):
        values["seed"] = SeedSpec(**{**values["seed"], "ssh_keys": tuple(values["seed"].get("ssh_keys", ()))})
    return VMSpec(**values)


def _capacity(host: str, cap: HostCapacity | tuple[int, int]) -> HostCapacity:
    cap = cap if isinstance(cap, HostCapacity) else HostCapacity(*cap)
    if cap.vcpus < 1 or cap.memory_mib < 1:
        raise ValueError(f"host {host}: capacity must be at least 1 vCPU and 1 MiB (got {cap})")
    return cap


def probe_image(path: str) -> ImageInfo:
    """Format and virtual size of a disk image file on this machine (qcow2 by its header, else raw): what
    the simulated hosts, which see this machine's files, read there."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(32)
            size = os.fstat(handle.fileno()).st_size
    except FileNotFoundError:
        raise OperationFailed(f"image {path}: no such file") from None
    except IsADirectoryError:
        raise OperationFailed(f"image {path}: is a directory") from None
    except OSError as exc:
        raise OperationFailed(f"image {path}: cannot be read ({exc.strerror or exc})") from None
    if header[:4] == QCOW2_MAGIC and len(header) >= 32:
        return ImageInfo(path, "qcow2", int.from_bytes(header[24:32], "big"))
    return ImageInfo(path, "raw", size)


class SimulatedDriver(Driver):
    """The full `Driver` interface over in-memory hosts with fixed capacities."""

    name = "simulated"

    def __init__(
        self,
        hosts: Mapping[str, HostCapacity | tuple[int, int]],
        clock: SimulatedClock | None = None,
        config: SimulatedDriverConfig | None = None,
        state_file: str | os.PathLike[str] | None = None,
        *,
        migration_model: MigrationModel,
        times: OperationTimes | None = None,
    ):
        if not hosts:
            raise ValueError("hosts must name at least one host")
        self._capacity = {host: _capacity(host, cap) for host, cap in hosts.items()}
        self.clock = clock if clock is not None else SimulatedClock(datetime.now(UTC))
        self.config = config if config is not None else SimulatedDriverConfig()
        self._migration_model = migration_model
        self._times: OperationTimes = times if times is not None else RatedTimes(self.config)
        unknown = set(self.config.host_down_at) - set(self._capacity)
        if unknown:
            raise ValueError(f"host_down_at names unknown host {sorted(unknown)[0]!r}")
        self._rng = random.Random(self.config.seed)
        self._lock = threading.RLock()   # one operation at a time changes the hosts (see _serialised)
        self._depth = 0
        self._vms: dict[str, _VM] = {}
        # Save images: key (host, path) for host-local files, (None, path) for shared storage.
        self._files: dict[tuple[str | None, str], _StateFile] = {}
        self._disks: dict[str, bool] = {}   # VM -> its overlay is kept when it stops
        self._spec_json: dict[int, tuple[VMSpec, dict[str, Any]]] = {}   # id(spec) -> (spec, its JSON)
        self.state_file: Path | None = Path(state_file) if state_file is not None else None
        if self.state_file is not None:
            self._load()

    @classmethod
    def for_hosts(
        cls,
        capacities: Mapping[str, tuple[int, int]],
        clock: SimulatedClock | None = None,
        config: SimulatedDriverConfig | None = None,
        state_file: str | os.PathLike[str] | None = None,
        *,
        migration_model: MigrationModel,
        times: OperationTimes | None = None,
    ) -> "SimulatedDriver":
        """A driver over the hosts a store knows: name -> (vcpus, memory MiB), e.g.
        `{h.name: (h.vcpus, h.memory_mib) for h in store.hosts()}`."""
        return cls(dict(capacities), clock, config, state_file, migration_model=migration_model, times=times)

    # -- persistence -----------------------------------------------------------------------------

    def _load(self) -> None:
        path = self.state_file
        assert path is not None
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return  # a new file: written at the first change
        except OSError as exc:
            raise ValueError(f"simulated state file {path}: cannot be read ({exc.strerror or exc})") from None
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
                raise ValueError(f"not a {STATE_FORMAT} file")
            if data.get("version") != STATE_VERSION:
                raise ValueError(f"version {data.get('version')!r} is not supported (expected {STATE_VERSION})")
            vms = {}
            if not isinstance(data["vms"], dict):
                raise ValueError("vms must map VM names to VMs")
            for name, entry in data["vms"].items():
                spec = _spec_from_json(entry["spec"])
                if spec.name != name:
                    raise ValueError(f"VM {name!r} holds the spec of {spec.name!r}")
                host, state = entry["host"], entry["state"]
                if host not in self._capacity:
                    raise ValueError(f"VM {spec.name!r} is on host {host!r}, which this driver does not manage "
                                     f"(hosts: {', '.join(self._capacity)})")
                if state not in _VM_STATES:
                    raise ValueError(f"VM {spec.name!r} has unknown state {state!r}")
                vms[spec.name] = _VM(spec, host, state)
            files = {}
            for entry in data["images"]:
                host, image_path, size = entry["host"], entry["path"], entry["size_bytes"]
                if not isinstance(image_path, str) or (host is not None and not isinstance(host, str)):
                    raise ValueError(f"bad save image entry {entry!r}")
                if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                    raise ValueError(f"save image {image_path}: bad size {size!r}")
                files[(host, image_path)] = _StateFile(_spec_from_json(entry["spec"]), size)
            disks = data.get("disks", {})
            if not isinstance(disks, dict) or not all(isinstance(v, bool) for v in disks.values()):
                raise ValueError("disks must map VM names to true/false")
        except (ValueError, KeyError, TypeError) as exc:
            problem = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc)
            raise ValueError(f"simulated state file {path}: {problem}") from None
        self._vms, self._files, self._disks = vms, files, dict(disks)

    def _state_json(self) -> dict[str, Any]:
        # (a spec is frozen: its JSON is made once, not at every write of a file listing every VM)
        known, self._spec_json = self._spec_json, {}

        def spec_json(spec: VMSpec) -> dict[str, Any]:
            cached = known.get(id(spec))
            if cached is None or cached[0] is not spec:
                cached = (spec, asdict(spec))
            self._spec_json[id(spec)] = cached
            return cached[1]

        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "vms": {name: {"host": vm.host, "state": vm.state, "spec": spec_json(vm.spec)}
                    for name, vm in self._vms.items()},
            "disks": self._disks,
            "images": [{"host": host, "path": image_path, "size_bytes": image.size_bytes,
                        "spec": spec_json(image.spec)}
                       for (host, image_path), image in self._files.items()],
        }

    def _save(self) -> None:
        """Write the state next to the file, then rename it over the file: a reader (or a process that
        starts after a crash) sees the old state or the new one, never a mix. One line (the C encoder:
        the file is rewritten after every operation)."""
        path = self.state_file
        assert path is not None
        write_whole(path, json.dumps(self._state_json(), sort_keys=True, separators=(",", ":")))

    @contextmanager
    def _changing(self, what: str, *hosts: str) -> Iterator[None]:
        """Around a change of VMs or save images on `hosts`: with a state file, write it after the change,
        and undo the change in memory when the file cannot be written (the operation then did not happen).
        An operation that waited on the clock (letting go of the lock) may find one of `hosts` removed
        meanwhile: `UnknownHost`, and it did not happen either."""
        for host in hosts:
            self._known(host)
        if self.state_file is None:
            yield
            return
        vms = {name: replace(vm) for name, vm in self._vms.items()}
        files = dict(self._files)
        disks = dict(self._disks)
        try:
            yield
            self._save()
        except BaseException as exc:
            self._vms, self._files, self._disks = vms, files, disks
            if isinstance(exc, OSError):
                raise OperationFailed(f"{what}: cannot write the simulated state file {self.state_file}: "
                                      f"{exc.strerror or exc}") from exc
            raise

    # -- hosts -----------------------------------------------------------------------------------

    def hosts(self) -> list[str]:
        return list(self._capacity)

    def add_host(self, config: HostEntry, vcpus: int, memory_mib: int) -> None:
        """The capacity is the new host's hardware; an empty host, so nothing is written."""
        if config.name in self._capacity:
            raise ValueError(f"host {config.name!r} is managed already")
        self._capacity[config.name] = _capacity(config.name, (vcpus, memory_mib))

    def remove_host(self, host: str) -> None:
        """The host's VMs (their disks) and the save images only it sees go with it."""
        self._known(host)
        with self._changing(f"remove host {host}"):
            for name in [name for name, vm in self._vms.items() if vm.host == host]:
                del self._vms[name]
                self._disks.pop(name, None)
            self._files = {key: image for key, image in self._files.items() if key[0] != host}
        del self._capacity[host]

    def _known(self, host: str) -> HostCapacity:
        try:
            return self._capacity[host]
        except KeyError:
            raise UnknownHost(f"unknown host {host!r} (known: {', '.join(self._capacity)})") from None

    def _is_down(self, host: str) -> bool:
        when = self.config.host_down_at.get(host)
        if when is None:
            return False
        now = self.clock.now()
        back = self.config.host_up_at.get(host)
        return when <= now and (back is None or now < back)

    def _up(self, host: str) -> HostCapacity:
        cap = self._known(host)
        if self._is_down(host):
            raise HostUnreachable(f"host {host} is down (since {self.config.host_down_at[host].isoformat()})")
        return cap

    def host_info(self, host: str) -> HostInfo:
        cap = self._known(host)
        down = self._is_down(host)
        return HostInfo(
            name=host,
            uri=f"simulated:///{host}",
            vcpus=cap.vcpus,
            memory_mib=cap.memory_mib,
            domain_type=self.config.domain_type,
            hypervisor="simulated",
            reachable=not down,
            error=f"host {host} is down" if down else "",
        )

    def check_host(self, host: str, timeout_s: float = 10.0) -> HostCheck:
        """Nothing to contact: every check is "simulated", except that a host that is down fails to connect."""
        info = self.host_info(host)
        items = {name: CheckItem(name, "simulated", "simulated (simulated driver: nothing contacted)")
                 for name in HOST_CHECKS}
        if not info.reachable:
            items["connect"] = CheckItem("connect", "FAIL", f"{info.uri}: {info.error}")
            items["versions"] = CheckItem("versions", "FAIL", "not connected")
            items["domain type"] = CheckItem("domain type", "FAIL", "not connected")
        return HostCheck(host, tuple(items.values()))

    def _free(self, host: str) -> tuple[int, int]:
        cap = self._capacity[host]
        used = [vm.spec for vm in self._vms.values() if vm.host == host and vm.state in ("running", "paused")]
        return cap.vcpus - sum(s.vcpus for s in used), cap.memory_mib - sum(s.memory_mib for s in used)

    def _fits(self, spec: VMSpec, host: str) -> str | None:
        """Why `spec` does not fit on `host` now, or None."""
        vcpus, memory = self._free(host)
        if spec.vcpus > vcpus:
            return f"host {host} has {vcpus} free vCPUs, {spec.name} needs {spec.vcpus}"
        if spec.memory_mib > memory:
            return f"host {host} has {memory} MiB free, {spec.name} needs {spec.memory_mib}"
        return None

    # -- time and failures -----------------------------------------------------------------------

    def _spend(self, seconds: float) -> float:
        self._sleep_until(self.clock.now() + timedelta(seconds=seconds))
        return seconds

    def _sleep_until(self, when: datetime) -> None:
        """Wait on the clock; on a clock that moves by itself, other threads' operations go on meanwhile
        (the lock is let go while waiting, as a real host's operations overlap)."""
        if not getattr(self.clock, "moves_by_itself", False):
            self.clock.sleep_until(when)
            return
        depth = self._depth
        self._depth = 0   # (whoever takes the lock meanwhile counts from nothing)
        for _ in range(depth):
            self._lock.release()
        try:
            self.clock.sleep_until(when)
        finally:
            for _ in range(depth):
                self._lock.acquire()
            self._depth = depth

    def _injected_failure(self, operation: str) -> bool:
        p = self.config.failure_probability
        return p > 0 and operation in self.config.failing_operations and self._rng.random() < p

    # -- VMs -------------------------------------------------------------------------------------

    def _vm(self, vm: str) -> _VM:
        try:
            record = self._vms[vm]
        except KeyError:
            raise VMNotFound(f"VM {vm!r} not found on any host") from None
        self._up(record.host)
        return record

    def start(self, spec: VMSpec, host: str) -> OperationReport:
        self._up(host)
        render_domain_xml(spec, self.config.domain_type)  # the same acceptance rules as the libvirt driver
        if spec.dirty_rate_mib_s < 0:
            raise ValueError(f"dirty_rate_mib_s must not be negative (got {spec.dirty_rate_mib_s})")
        if spec.working_set_mib is not None and not 0 <= spec.working_set_mib <= spec.memory_mib:
            raise ValueError(f"working_set_mib must be within [0, memory_mib] (got {spec.working_set_mib})")
        if spec.name in self._vms:
            raise VMAlreadyExists(f"VM {spec.name!r} already exists on {self._vms[spec.name].host}")
        why = self._fits(spec, host)
        if why:
            raise OperationFailed(f"start {spec.name} on {host}: {why}")
        seconds = self._spend(self._times.start(spec))
        if self._injected_failure("start"):
            raise OperationFailed(f"start {spec.name} on {host}: injected failure")
        if spec.disk is not None and os.path.isfile(spec.disk.base):
            # (a base image this machine does not have is on the simulated hosts' storage: taken as given)
            base = probe_image(spec.disk.base)
            if spec.disk.size_bytes is not None and spec.disk.size_bytes < base.virtual_size:
                raise OperationFailed(f"disk_size: {spec.disk.size_bytes} bytes is smaller than the image "
                                      f"({base.virtual_size} bytes)")
        with self._changing(f"start {spec.name} on {host}", host):
            self._vms[spec.name] = _VM(spec, host, "running")
            if spec.disk is not None:
                self._disks[spec.name] = spec.disk.keep
        return OperationReport("start", spec.name, host, seconds)

    # -- what a person uses: disks, addresses, the console ----------------------------------------

    def image_info(self, host: str, path: str) -> ImageInfo:
        self._up(host)
        return probe_image(path)

    def remove_vm_storage(self, vm: str, host: str, keep_disk: bool = False) -> list[str]:
        self._up(host)
        if vm not in self._disks or keep_disk or self._disks[vm]:
            return []
        with self._changing(f"delete the disk of {vm}"):
            del self._disks[vm]
        return [f"{SIMULATED_DISK_DIR}/{vm}.qcow2"]

    def disks(self) -> list[str]:
        """The VMs whose disk overlays exist (tests look at what a lease leaves behind)."""
        return sorted(self._disks)

    def vm_addresses(self, vm: str) -> list[VMAddress]:
        """A running VM with a NIC answers with an address from 10.0.0.0/8 made of its MAC, as a DHCP
        server with a fixed host per MAC would give it: the same across suspension and migration."""
        record = self._vm(vm)
        mac = record.spec.mac
        if record.state != "running" or mac is None:
            return []
        octets = [int(x, 16) for x in mac.split(":")[3:]]
        return [VMAddress(mac=mac, address=f"10.{octets[0]}.{octets[1]}.{octets[2] or 1}", prefix=8,
                          family="ipv4", source="simulated", interface="eth0")]

    def console_command(self, vm: str) -> list[str]:
        record = self._vm(vm)
        return ["virsh", "-c", f"simulated://{record.host}", "console", vm]

    def stop(self, vm: str, graceful_timeout: float = 30.0, host: str | None = None) -> OperationReport:
        if host is not None and vm in self._vms and self._vms[vm].host != host:
            self._up(host)
            raise VMNotFound(f"VM {vm!r} not found on {host}")
        record = self._vm(vm)
        active = record.state in ("running", "paused")
        seconds = self._spend(self._times.stop(record.spec) if active else 0.0)
        if self._injected_failure("stop"):
            raise OperationFailed(f"stop {vm} on {record.host}: injected failure")
        with self._changing(f"stop {vm} on {record.host}", record.host):
            del self._vms[vm]
            if not self._disks.get(vm, True):   # the overlay goes with the VM, unless the lease keeps it
                del self._disks[vm]
        return OperationReport("stop", vm, record.host, seconds)

    def guest_poweroff(self, vm: str) -> None:
        """The guest shuts itself down (not an operation of the driver's): the VM stays defined on its
        host as "shutoff", as a persistent libvirt domain does, until it is stopped. Takes no time."""
        record = self._vms.get(vm)
        if record is None:
            raise VMNotFound(f"VM {vm!r} not found on any host")
        if record.state not in ("running", "paused"):
            raise OperationFailed(f"{vm} on {record.host} is not running ({record.state})")
        with self._changing(f"power off {vm} on {record.host}"):
            record.state = "shutoff"

    def list_vms(self, host: str) -> list[VMInfo]:
        self._up(host)
        return [
            VMInfo(name, vm.host, vm.state, vm.spec.vcpus, vm.spec.memory_mib, vm.spec.lease_id)
            for name, vm in self._vms.items()
            if vm.host == host
        ]

    def locate(self, vm: str) -> str | None:
        record = self._vms.get(vm)
        return None if record is None or self._is_down(record.host) else record.host

    # -- save images -----------------------------------------------------------------------------

    def _file_key(self, host: str, path: str) -> tuple[str | None, str]:
        return (None, path) if is_under(path, self.config.shared_storage) else (host, path)

    def state_file_exists(self, host: str, path: str) -> bool:
        """Whether `host` sees a save image at `path` (tests and the simulator's own checks)."""
        return self._file_key(host, path) in self._files

    def suspend(self, vm: str, state_path: str, bypass_cache: bool = False) -> OperationReport:
        record = self._vm(vm)
        if record.state not in ("running", "paused"):
            raise OperationFailed(f"suspend {vm} on {record.host}: VM is not running ({record.state})")
        size = record.spec.memory_mib * MIB
        seconds = self._spend(self._times.suspend(record.spec))
        if self._injected_failure("suspend"):
            raise OperationFailed(f"suspend {vm} on {record.host}: injected failure")
        with self._changing(f"suspend {vm} on {record.host}", record.host):
            self._files[self._file_key(record.host, state_path)] = _StateFile(record.spec, size)
            record.state = "saved"
        return OperationReport("suspend", vm, record.host, seconds, size)

    def resume(self, vm: str, state_path: str, host: str) -> OperationReport:
        self._up(host)
        image = self._files.get(self._file_key(host, state_path))
        if image is None:
            raise OperationFailed(f"resume {vm} on {host}: no save image at {state_path} on {host}")
        if image.spec.name != vm:
            raise OperationFailed(f"resume {vm} on {host}: {state_path} holds VM {image.spec.name!r}")
        current = self._vms.get(vm)
        if current is not None and current.state in ("running", "paused"):
            raise VMAlreadyExists(f"VM {vm!r} is already running on {current.host}")
        why = self._fits(image.spec, host)
        if why:
            raise OperationFailed(f"resume {vm} on {host}: {why}")
        seconds = self._spend(self._times.resume(image.spec))
        if self._injected_failure("resume"):
            raise OperationFailed(f"resume {vm} on {host}: injected failure")
        # As the libvirt driver does: the VM now lives on `host`; a stale saved definition elsewhere goes.
        with self._changing(f"resume {vm} on {host}", host):
            self._vms[vm] = _VM(image.spec, host, "running")
        return OperationReport("resume", vm, host, seconds, image.size_bytes)

    def move_state(self, state_path: str, src_host: str, dst_host: str) -> OperationReport:
        self._up(src_host)
        self._up(dst_host)
        if src_host == dst_host:
            return OperationReport("move_state", "", dst_host, 0.0, 0)
        if is_under(state_path, self.config.shared_storage):   # the destination sees it already
            shared = self._files.get((None, state_path))
            size = shared.size_bytes if shared is not None else 0
            return OperationReport("move_state", "", dst_host, self._spend(self._times.move_state(size, True)), 0)
        image = self._files.get((src_host, state_path))
        if image is None:
            raise OperationFailed(f"move_state: no save image at {state_path} on {src_host}")
        seconds = self._spend(self._times.move_state(image.size_bytes, False))
        if self._injected_failure("move_state"):
            raise OperationFailed(f"move_state {state_path} {src_host} -> {dst_host}: injected failure")
        with self._changing(f"move_state {state_path} {src_host} -> {dst_host}", src_host, dst_host):
            self._files[(dst_host, state_path)] = image
        return OperationReport("move_state", "", dst_host, seconds, image.size_bytes)

    def remove_state(self, state_path: str, host: str) -> None:
        self._up(host)
        key = self._file_key(host, state_path)
        if key in self._files:
            with self._changing(f"remove {state_path} on {host}"):
                del self._files[key]

    # -- live migration --------------------------------------------------------------------------

    def start_dirty_rate_measurement(self, vm: str, seconds: int) -> None:
        self._vm(vm)   # the rate is the spec's: nothing to sample, but the VM must exist

    def measured_dirty_rate(self, vm: str) -> float | None:
        """The rate the guest dirties memory at here: its spec's, scaled as the migrations see it."""
        spec = self._vm(vm).spec
        return spec.dirty_rate_mib_s * self.config.dirty_factor

    def migrate(
        self,
        vm: str,
        dst_host: str,
        max_downtime_ms: float = 300.0,
        bandwidth_mib_s: float | None = None,
        timeout_s: float = 600.0,
        on_timeout: OnTimeout = "abort",
        progress: ProgressCallback | None = None,
    ) -> MigrationReport:
        """Times the migration with the pre-copy model; one progress sample per pass over memory."""
        validate_migration_args(max_downtime_ms, bandwidth_mib_s, timeout_s, on_timeout)
        record = self._vm(vm)
        self._known(dst_host)
        src = record.host
        spec = record.spec
        memory_total = spec.memory_mib * MIB

        def failure(message: str, outcome: str = "failed", **fields: object) -> MigrationFailed:
            report = MigrationReport(
                vm=vm, source=src, destination=dst_host, success=False, total_seconds=0.0, downtime_ms=0.0,
                iterations=0, bytes_transferred=0, memory_total=memory_total, outcome=outcome, error=message,
            )
            report = replace(report, **fields)
            return MigrationFailed(f"migrate {vm} {src} -> {dst_host}: {message}", report)

        if dst_host == src:
            raise failure(f"{vm} is already on {dst_host}")
        if record.state != "running":
            raise failure(f"{vm} is not running ({record.state})")
        if self._is_down(dst_host):
            raise failure(f"destination {dst_host} is down")
        why = self._fits(spec, dst_host)
        if why:
            raise failure(why)

        result = self._migration_model(
            spec.memory_mib,
            bandwidth_mib_s if bandwidth_mib_s is not None else self.config.migration_bandwidth_mib_s,
            spec.dirty_rate_mib_s,
            max_downtime_ms,
            working_set_mib=spec.working_set_mib,
            timeout_s=timeout_s,
            on_timeout=on_timeout,
            overhead_s=self.config.migration_overhead.total_seconds(),
            dirty_factor=self.config.dirty_factor,
            switchover_ms=self.config.migration_switchover_ms,
            downtime_schedule=self.config.downtime_schedule,
        )
        start = self.clock.now()
        self._spend(self.config.migration_overhead.total_seconds())
        samples: list[MigrationProgress] = []
        sent = 0.0
        dirty_bytes_s = spec.dirty_rate_mib_s * self.config.dirty_factor * MIB
        for index, (seconds, mib) in enumerate(result.rounds):
            self._spend(seconds)
            sent += mib
            is_last = index + 1 == len(result.rounds)
            left = (0.0 if result.outcome != "aborted" else result.remaining_mib) if is_last else result.rounds[index + 1].mib
            sample = MigrationProgress(
                elapsed_seconds=(self.clock.now() - start).total_seconds(),
                memory_total=memory_total,
                memory_processed=round(sent * MIB),
                memory_remaining=round(left * MIB),
                dirty_rate_bytes_s=dirty_bytes_s,
                iteration=index + 1,
                max_downtime_ms=max_downtime_ms,
            )
            samples.append(sample)
            if progress is not None:
                progress(sample)
        self._sleep_until(start + timedelta(seconds=result.total_seconds))

        measured = dict(
            total_seconds=result.total_seconds,
            downtime_ms=result.downtime_ms,
            iterations=result.passes,
            bytes_transferred=round(result.transferred_mib * MIB),
            samples=tuple(samples),
        )
        if result.outcome == "aborted":
            raise failure(f"did not converge within {timeout_s:g} s; aborted", "aborted", **measured)
        if self._injected_failure("migrate"):
            raise failure("injected failure", **measured)
        with self._changing(f"migrate {vm} {src} -> {dst_host}", src, dst_host):
            record.host = dst_host
        return MigrationReport(
            vm=vm, source=src, destination=dst_host, success=True, memory_total=memory_total,
            outcome=result.outcome, **measured,  # type: ignore[arg-type]
        )



def _serialised(method):
    """Run a driver method holding the driver's lock (several threads may share one simulated driver)."""

    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._lock:
            self._depth += 1
            try:
                return method(self, *args, **kwargs)
            finally:
                self._depth -= 1

    return locked


for _name, _method in list(vars(SimulatedDriver).items()):
    if callable(_method) and not _name.startswith("_") and not isinstance(_method, (classmethod, staticmethod, type)):
        setattr(SimulatedDriver, _name, _serialised(_method))
del _name, _method
