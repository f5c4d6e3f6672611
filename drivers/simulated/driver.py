"""`SimulatedDriver`: the `Driver` interface over in-memory hosts with fixed capacities (see the package's
docstring for what it models). Every public method holds the driver's `OperationLock` (lock.py)."""

from __future__ import annotations

import math
import os
import random
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from drivers.base import (
    ByteProgress,
    HOST_CHECKS,
    PAIR_CHECKS,
    CheckItem,
    Driver,
    HostCheck,
    HostEntry,
    HostInfo,
    ImageInfo,
    MigrationModel,
    MigrationReport,
    OnTimeout,
    OperationReport,
    PairCheck,
    ProgressCallback,
    VMAddress,
    VMInfo,
    VMSpec,
    validate_migration_args,
)
from drivers.clock import UTC, SimulatedClock
from drivers.domain_xml import render_domain_xml
from drivers.errors import HostUnreachable, OperationFailed, UnknownHost, VMAlreadyExists, VMNotFound
from drivers.files import file_sha256
from drivers.inventory import is_under

from .config import MIB, HostCapacity, OperationTimes, RatedTimes, SimulatedDriverConfig, host_capacity
from drivers.image_file import probe_image
from .lock import OperationLock
from .migration import SimulatedMigration, migration_cost, run_passes
from .state_file import HostsState, ImageKey, SaveImage, SimulatedVM, StateFile

#: where the simulated hosts say they keep the VMs' overlays (nothing is written there)
SIMULATED_DISK_DIR = "/var/lib/libvirt/images/leasewise-vms"


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
        self._capacity = {host: host_capacity(host, cap) for host, cap in hosts.items()}
        self.clock = clock if clock is not None else SimulatedClock(datetime.now(UTC))
        self.config = config if config is not None else SimulatedDriverConfig()
        self._migration_model = migration_model
        self._times: OperationTimes = times if times is not None else RatedTimes(self.config)
        unknown = set(self.config.host_down_at) - set(self._capacity)
        if unknown:
            raise ValueError(f"host_down_at names unknown host {sorted(unknown)[0]!r}")
        self._rng = random.Random(self.config.seed)
        self._lock = OperationLock()
        self._state = HostsState()
        self._powered_off: set[str] = set()   # the hosts of `power_lost` whose VMs were stopped already
        #: VM -> its last completed live migration (kept in memory only, as libvirtd keeps its statistics)
        self._completed: dict[str, MigrationReport] = {}
        self.state_file: Path | None = Path(state_file) if state_file is not None else None
        self._file = StateFile(self.state_file) if self.state_file is not None else None
        if self._file is not None:
            self._state = self._file.load(self._capacity) or self._state

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
    ) -> SimulatedDriver:
        """A driver over the hosts a store knows: name -> (vcpus, memory MiB), e.g.
        `{h.name: (h.vcpus, h.memory_mib) for h in store.hosts()}`."""
        return cls(dict(capacities), clock, config, state_file, migration_model=migration_model, times=times)

    # -- changes, kept in the state file ---------------------------------------------------------

    @contextmanager
    def _changing(self, what: str, *hosts: str) -> Iterator[None]:
        """Around a change of VMs or save images on `hosts`: with a state file, write what changed after the
        change, and undo the change in memory when the file cannot be written (the operation then did not
        happen). A change made inside another (a power cut noticed while a VM resumes) is part of the outer
        one. An operation that waited on the clock (letting go of the lock) may find one of `hosts` removed
        meanwhile: `UnknownHost`, and it did not happen either."""
        for host in hosts:
            self._known(host)
        state = self._state
        if state.changing:
            yield
            return
        state.begin()
        try:
            yield
            if self._file is not None:
                self._file.save(state.changes(), state)
        except BaseException as exc:
            state.undo()
            if isinstance(exc, OSError) and self._file is not None:
                raise OperationFailed(f"{what}: cannot write the simulated state file {self.state_file}: "
                                      f"{exc.strerror or exc}") from exc
            raise
        else:
            state.keep()

    # -- hosts -----------------------------------------------------------------------------------

    def hosts(self) -> list[str]:
        with self._lock.held():
            return list(self._capacity)

    def add_host(self, config: HostEntry, vcpus: int, memory_mib: int) -> None:
        """The capacity is the new host's hardware; an empty host, so nothing is written."""
        with self._lock.held():
            if config.name in self._capacity:
                raise ValueError(f"host {config.name!r} is managed already")
            self._capacity[config.name] = host_capacity(config.name, (vcpus, memory_mib))

    def remove_host(self, host: str) -> None:
        """The host's VMs (their disks) and the save images only it sees go with it."""
        with self._lock.held():
            self._known(host)
            with self._changing(f"remove host {host}"):
                state = self._state
                for name in [name for name, vm in state.vms.items() if vm.host == host]:
                    del state.vms[name]
                    state.disks.pop(name, None)
                _forget_host(state.images, host)
                _forget_host(state.left, host)
                _forget_host(state.base_copies, host)
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
        if when <= now and host in self.config.power_lost and host not in self._powered_off:
            self._lose_power(host)
        back = self.config.host_up_at.get(host)
        return when <= now and (back is None or now < back)

    def _lose_power(self, host: str) -> None:
        """The VMs running on `host` stop where they are (noticed at the first look after the power cut)."""
        self._powered_off.add(host)
        with self._changing(f"power cut on {host}"):
            _stop_on(self._state.vms, host)
            _stop_on(self._state.left, host)

    def _up(self, host: str) -> HostCapacity:
        cap = self._known(host)
        if self._is_down(host):
            raise HostUnreachable(f"host {host} is down (since {self.config.host_down_at[host].isoformat()})")
        return cap

    def host_info(self, host: str) -> HostInfo:
        with self._lock.held():
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
        with self._lock.held():
            info = self.host_info(host)
            items = {name: CheckItem(name, "simulated", "simulated (simulated driver: nothing contacted)")
                     for name in HOST_CHECKS}
            if not info.reachable:
                items["connect"] = CheckItem("connect", "FAIL", f"{info.uri}: {info.error}")
                items["versions"] = CheckItem("versions", "FAIL", "not connected")
                items["domain type"] = CheckItem("domain type", "FAIL", "not connected")
            return HostCheck(host, tuple(items.values()))

    def check_pair(self, source: str, destination: str, timeout_s: float = 30.0) -> PairCheck:
        """Nothing to contact: "simulated", except that a pair with a host that is down fails its link."""
        with self._lock.held():
            items = {name: CheckItem(name, "simulated", "simulated (simulated driver: nothing contacted)")
                     for name in PAIR_CHECKS}
            down = [h for h in (source, destination) if self._known(h) and self._is_down(h)]
            if down:
                items["peer link"] = CheckItem("peer link", "FAIL", f"host {down[0]} is down")
            return PairCheck(source, destination, tuple(items.values()))

    def _free(self, host: str) -> tuple[int, int]:
        cap = self._capacity[host]
        used = [vm.spec for vm in self._state.on_host(host) if vm.state in ("running", "paused")]
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
        with self._lock.let_go():
            self.clock.sleep_until(when)

    def _injected_failure(self, operation: str) -> bool:
        p = self.config.failure_probability
        return p > 0 and operation in self.config.failing_operations and self._rng.random() < p

    # -- VMs -------------------------------------------------------------------------------------

    def _vm(self, vm: str) -> SimulatedVM:
        try:
            record = self._state.vms[vm]
        except KeyError:
            raise VMNotFound(f"VM {vm!r} not found on any host") from None
        self._up(record.host)
        return record

    def start(self, spec: VMSpec, host: str) -> OperationReport:
        with self._lock.held():
            self._up(host)
            render_domain_xml(spec, self.config.domain_type)  # the same acceptance rules as the libvirt driver
            if spec.dirty_rate_mib_s < 0:
                raise ValueError(f"dirty_rate_mib_s must not be negative (got {spec.dirty_rate_mib_s})")
            if spec.working_set_mib is not None and not 0 <= spec.working_set_mib <= spec.memory_mib:
                raise ValueError(f"working_set_mib must be within [0, memory_mib] (got {spec.working_set_mib})")
            if spec.disk_written_mib is not None and not (math.isfinite(spec.disk_written_mib)
                                                          and spec.disk_written_mib >= 0):
                raise ValueError(f"disk_written_mib must be a finite number >= 0 (got {spec.disk_written_mib})")
            if spec.name in self._state.vms and not self._is_down(self._state.vms[spec.name].host):
                raise VMAlreadyExists(f"VM {spec.name!r} already exists on {self._state.vms[spec.name].host}")
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
                self._leave_behind(spec.name)
                self._state.vms[spec.name] = SimulatedVM(spec, host, "running")
                if spec.disk is not None:
                    self._state.disks[spec.name] = spec.disk.keep
            return OperationReport("start", spec.name, host, seconds)

    def _leave_behind(self, vm: str) -> None:
        """The VM is started again while the host it was on is down: that host keeps its copy (libvirt's
        one definition per host), which it shows once it answers again."""
        record = self._state.vms.pop(vm, None)
        if record is not None:
            self._state.left[(record.host, vm)] = record

    # -- what a person uses: disks, addresses, the console ----------------------------------------

    def image_info(self, host: str, path: str) -> ImageInfo:
        with self._lock.held():
            self._up(host)
            return probe_image(path)

    def image_checksum(self, host: str, path: str) -> str | None:
        """A copy uploaded to `host`, else this machine's file when `path` is on the shared storage."""
        with self._lock.held():
            self._up(host)
            copied = self._state.base_copies.get((host, path))
        if copied is not None:
            return copied
        if is_under(path, self.config.shared_storage) and os.path.isfile(path):
            return file_sha256(path)
        return None

    def upload_image(self, host: str, path: str, source: str, progress: ByteProgress | None = None) -> str:
        """Recorded as held by `host` (nothing is written), after the time a memory image of its size takes."""
        try:
            digest = file_sha256(source, progress)
            size = os.path.getsize(source)
        except OSError as exc:
            raise OperationFailed(f"image {source}: cannot be read here ({exc.strerror or exc})") from None
        with self._lock.held():
            self._up(host)
            self._spend(self._times.move_state(size, False))
            with self._changing(f"copy {source} to {path} on {host}", host):
                self._state.base_copies[(host, path)] = digest
        return digest

    def discard(self, vm: str, host: str) -> bool:
        with self._lock.held():
            self._up(host)
            if (host, vm) in self._state.left:
                with self._changing(f"discard {vm} on {host}", host):
                    del self._state.left[(host, vm)]
                return True
            record = self._state.vms.get(vm)
            if record is None or record.host != host:
                return False
            with self._changing(f"discard {vm} on {host}", host):
                del self._state.vms[vm]
            return True

    def remove_vm_storage(self, vm: str, host: str, keep_disk: bool = False) -> list[str]:
        with self._lock.held():
            self._up(host)
            disks = self._state.disks
            if vm not in disks or keep_disk or disks[vm]:
                return []
            with self._changing(f"delete the disk of {vm}"):
                del self._state.disks[vm]
            return [f"{SIMULATED_DISK_DIR}/{vm}.qcow2"]

    def disks(self) -> list[str]:
        """The VMs whose disk overlays exist (tests look at what a lease leaves behind)."""
        with self._lock.held():
            return sorted(self._state.disks)

    def vm_addresses(self, vm: str) -> list[VMAddress]:
        """A running VM with a NIC answers with an address from 10.0.0.0/8 made of its MAC, as a DHCP
        server with a fixed host per MAC would give it: the same across suspension and migration."""
        with self._lock.held():
            record = self._vm(vm)
            mac = record.spec.mac
            if record.state != "running" or mac is None:
                return []
            return [VMAddress(mac=mac, address=simulated_address(mac), prefix=8, family="ipv4", source="simulated",
                              interface="eth0")]

    def domain_macs(self, host: str) -> set[str]:
        with self._lock.held():
            self._up(host)
            return {r.spec.mac for r in self._state.vms.values() if r.host == host and r.spec.mac is not None}

    def console_command(self, vm: str) -> list[str]:
        with self._lock.held():
            record = self._vm(vm)
            return ["virsh", "-c", f"simulated://{record.host}", "console", vm]

    def stop(self, vm: str, graceful_timeout: float = 30.0, host: str | None = None) -> OperationReport:
        with self._lock.held():
            vms = self._state.vms
            if host is not None and (host, vm) in self._state.left:
                self._up(host)
                copy = self._state.left[(host, vm)]
                seconds = self._spend(self._stop_time(copy, graceful_timeout))
                with self._changing(f"stop {vm} on {host}", host):
                    del self._state.left[(host, vm)]
                return OperationReport("stop", vm, host, seconds)
            if host is not None and vm in vms and vms[vm].host != host:
                self._up(host)
                raise VMNotFound(f"VM {vm!r} not found on {host}")
            record = self._vm(vm)
            seconds = self._spend(self._stop_time(record, graceful_timeout))
            if self._injected_failure("stop"):
                raise OperationFailed(f"stop {vm} on {record.host}: injected failure")
            with self._changing(f"stop {vm} on {record.host}", record.host):
                del self._state.vms[vm]
                if not self._state.disks.get(vm, True):   # the overlay goes with the VM, unless the lease keeps it
                    del self._state.disks[vm]
            return OperationReport("stop", vm, record.host, seconds)

    def _stop_time(self, record: SimulatedVM, graceful_timeout: float) -> float:
        """A running VM's shutdown, cut at `graceful_timeout` where libvirt's destroy would end it (a kill,
        `graceful_timeout` 0, takes no time); a VM that is not running has nothing to shut down."""
        if record.state not in ("running", "paused"):
            return 0.0
        return min(self._times.stop(record.spec), max(graceful_timeout, 0.0))

    def guest_poweroff(self, vm: str) -> None:
        """The guest shuts itself down (not an operation of the driver's): the VM stays defined on its
        host as "shutoff", as a persistent libvirt domain does, until it is stopped. Takes no time."""
        with self._lock.held():
            record = self._state.vms.get(vm)
            if record is None:
                raise VMNotFound(f"VM {vm!r} not found on any host")
            if record.state not in ("running", "paused"):
                raise OperationFailed(f"{vm} on {record.host} is not running ({record.state})")
            with self._changing(f"power off {vm} on {record.host}"):
                self._state.vms[vm] = replace(record, state="shutoff")

    def list_vms(self, host: str) -> list[VMInfo]:
        with self._lock.held():
            self._up(host)
            return [VMInfo(vm.spec.name, vm.host, vm.state, vm.spec.vcpus, vm.spec.memory_mib, vm.spec.lease_id)
                    for vm in self._state.on_host(host)]

    def locate(self, vm: str) -> str | None:
        with self._lock.held():
            record = self._state.vms.get(vm)
            return None if record is None or self._is_down(record.host) else record.host

    # -- save images -----------------------------------------------------------------------------

    def _image_key(self, host: str, path: str) -> ImageKey:
        return (None, path) if is_under(path, self.config.shared_storage) else (host, path)

    def state_file_exists(self, host: str, path: str) -> bool:
        """Whether `host` sees a save image at `path` (tests and the simulator's own checks)."""
        with self._lock.held():
            return self._image_key(host, path) in self._state.images

    def suspend(self, vm: str, state_path: str, bypass_cache: bool = False) -> OperationReport:
        with self._lock.held():
            record = self._vm(vm)
            if record.state not in ("running", "paused"):
                raise OperationFailed(f"suspend {vm} on {record.host}: VM is not running ({record.state})")
            size = record.spec.memory_mib * MIB
            seconds = self._spend(self._times.suspend(record.spec))
            if self._injected_failure("suspend"):
                raise OperationFailed(f"suspend {vm} on {record.host}: injected failure")
            with self._changing(f"suspend {vm} on {record.host}", record.host):
                self._state.images[self._image_key(record.host, state_path)] = SaveImage(record.spec, size)
                self._state.vms[vm] = replace(record, state="saved")
            return OperationReport("suspend", vm, record.host, seconds, size)

    def resume(self, vm: str, state_path: str, host: str) -> OperationReport:
        with self._lock.held():
            self._up(host)
            image = self._state.images.get(self._image_key(host, state_path))
            if image is None:
                raise OperationFailed(f"resume {vm} on {host}: no save image at {state_path} on {host}")
            if image.spec.name != vm:
                raise OperationFailed(f"resume {vm} on {host}: {state_path} holds VM {image.spec.name!r}")
            current = self._state.vms.get(vm)
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
                if current is not None and self._is_down(current.host):
                    self._leave_behind(vm)
                self._state.vms[vm] = SimulatedVM(image.spec, host, "running")
            return OperationReport("resume", vm, host, seconds, image.size_bytes)

    def move_state(self, state_path: str, src_host: str, dst_host: str) -> OperationReport:
        with self._lock.held():
            self._up(src_host)
            self._up(dst_host)
            if src_host == dst_host:
                return OperationReport("move_state", "", dst_host, 0.0, 0, route="shared")
            if is_under(state_path, self.config.shared_storage):   # the destination sees it already
                shared = self._state.images.get((None, state_path))
                size = shared.size_bytes if shared is not None else 0
                return OperationReport("move_state", "", dst_host, self._spend(self._times.move_state(size, True)), 0,
                                       route="shared")
            image = self._state.images.get((src_host, state_path))
            if image is None:
                raise OperationFailed(f"move_state: no save image at {state_path} on {src_host}")
            seconds = self._spend(self._times.move_state(image.size_bytes, False))
            if self._injected_failure("move_state"):
                raise OperationFailed(f"move_state {state_path} {src_host} -> {dst_host}: injected failure")
            with self._changing(f"move_state {state_path} {src_host} -> {dst_host}", src_host, dst_host):
                self._state.images[(dst_host, state_path)] = image
            # (simulated hosts always reach each other: the copy goes host to host)
            return OperationReport("move_state", "", dst_host, seconds, image.size_bytes, route="direct")

    def remove_state(self, state_path: str, host: str) -> None:
        with self._lock.held():
            self._up(host)
            key = self._image_key(host, state_path)
            if key in self._state.images:
                with self._changing(f"remove {state_path} on {host}"):
                    del self._state.images[key]

    # -- live migration --------------------------------------------------------------------------

    def start_dirty_rate_measurement(self, vm: str, seconds: int) -> None:
        with self._lock.held():
            self._vm(vm)   # the rate is the spec's: nothing to sample, but the VM must exist

    def measured_dirty_rate(self, vm: str) -> float | None:
        """The rate the guest dirties memory at here: its spec's, scaled as the migrations see it."""
        with self._lock.held():
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
        with self._lock.held():
            validate_migration_args(max_downtime_ms, bandwidth_mib_s, timeout_s, on_timeout)
            record = self._vm(vm)
            self._known(dst_host)
            src = record.host
            spec = record.spec
            attempt = SimulatedMigration(vm, src, dst_host, spec.memory_mib * MIB)
            if dst_host == src:
                raise attempt.failed(f"{vm} is already on {dst_host}")
            if record.state != "running":
                raise attempt.failed(f"{vm} is not running ({record.state})")
            if self._is_down(dst_host):
                raise attempt.failed(f"destination {dst_host} is down")
            why = self._fits(spec, dst_host)
            if why:
                raise attempt.failed(why)
            disk_mib = self._overlay_mib(spec)   # (the overlay goes first: a block migration)
            cost = migration_cost(self._migration_model, spec, self.config, bandwidth_mib_s, max_downtime_ms,
                                  timeout_s, on_timeout, disk_mib)
            figures = run_passes(cost, spec, self.config, max_downtime_ms, self.clock, self._spend,
                                 self._sleep_until, progress, disk_mib)
            if cost.outcome == "aborted":
                raise attempt.failed(f"did not converge within {timeout_s:g} s; aborted", "aborted", figures)
            if self._injected_failure("migrate"):
                raise attempt.failed("injected failure", figures=figures)
            with self._changing(f"migrate {vm} {src} -> {dst_host}", src, dst_host):
                self._state.vms[vm] = replace(record, host=dst_host)
            report = self._completed[vm] = attempt.report(cost.outcome, figures)
            return report

    def completed_migration(self, vm: str, source: str) -> MigrationReport | None:
        report = self._completed.get(vm)
        if report is None or report.source != source or self.locate(vm) != report.destination:
            return None
        return report


    def _overlay_mib(self, spec: VMSpec) -> float:
        """MiB of a VM's overlay on its host's own storage (0 when it has none, or the hosts share them): what
        its guest wrote, when the spec says, else the configured `overlay_mib`."""
        if not self.config.local_vm_disks or (spec.disk is None and spec.disk_image is None):
            return 0.0
        if spec.disk_written_mib is not None:
            return spec.disk_written_mib
        return self.config.overlay_mib if spec.disk is not None else 0.0

    def disk_allocation(self, vm: str) -> int | None:
        with self._lock.held():
            mib = self._overlay_mib(self._vm(vm).spec)
        return round(mib * MIB) if mib else None

    def shares_vm_storage(self, a: str, b: str) -> bool:
        return not self.config.local_vm_disks


def simulated_address(mac: str) -> str:
    """The 10.0.0.0/8 address a simulated VM has: its MAC's last three octets as a number n, one address each
    (10.0.0.1 for n = 0, never the network's or the broadcast address), as DHCP with a host per MAC gives."""
    n = int(mac.replace(":", "")[-6:], 16) % ((1 << 24) - 2) + 1
    return f"10.{n >> 16}.{n >> 8 & 0xFF}.{n & 0xFF}"




_Name = TypeVar("_Name")                          # a VM's name, or (host, name)
_Key = TypeVar("_Key", bound=tuple[Any, ...])     # (host, ...)
_Entry = TypeVar("_Entry")


def _forget_host(entries: dict[_Key, _Entry], host: str) -> None:
    """Every entry kept by (host, ...) for `host` goes (the host was removed)."""
    for key in [key for key in entries if key[0] == host]:
        del entries[key]


def _stop_on(vms: dict[_Name, SimulatedVM], host: str) -> None:
    """The running and paused VMs of `vms` on `host` are shut off where they are (a power cut)."""
    for name, vm in vms.items():
        if vm.host == host and vm.state in ("running", "paused"):
            vms[name] = replace(vm, state="shutoff")
