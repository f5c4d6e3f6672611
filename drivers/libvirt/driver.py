"""`LibvirtDriver`: the `Driver` interface over libvirt, put together from the package's parts.

Each part owns one concern and is handed what it depends on: `Connections` (connection.py) makes every
libvirt call; `Lifecycle` finds, lists, starts and stops domains; `StateTransfer` saves, restores, copies
and removes memory images; `Migrations` live-migrates; host.py answers `host_info` and `check_host`.
"""

from __future__ import annotations

from drivers.base import (
    ByteProgress,
    Driver,
    HostCheck,
    HostInfo,
    ImageInfo,
    MigrationReport,
    OnTimeout,
    OperationReport,
    PairCheck,
    ProgressCallback,
    VMInfo,
    VMAddress,
    VMSpec,
)
from drivers.clock import Clock, RealClock
from drivers.downtime import DowntimeSchedule
from drivers.errors import DriverError
from drivers.inventory import HostConfig

from .connection import Connections, RetryPolicy, import_libvirt
from .block_migration import BlockMigration
from .console import wait_for_console_line
from .addresses import vm_addresses
from .host import read_host_info, run_host_checks
from .image_copy import ImageCopies
from .lifecycle import Lifecycle
from .migration import Migrations
from .pair_check import check_pair
from .state_transfer import StateTransfer
from .storage import Storage
from .transport import link_uri


class LibvirtDriver(Driver):
    """Drives the hosts of an inventory through libvirt (`test:///` URIs in tests).

    The keywords tune the failure handling: `retry_*` how transient libvirt errors are retried,
    `keepalive_*` how soon a dead link is noticed, `poll_interval_s` how often a shutdown or a migration
    is looked at, `downtime_*` how the allowed migration downtime is raised (Nova's steps), `ssh_timeout_s`
    how long an SSH connect may take, `connect_timeout_s` how long a libvirt connect may take before the
    call that waits for it fails (the host is unreachable; the connect goes on).
    """

    name = "libvirt"

    def __init__(
        self,
        hosts: list[HostConfig],
        *,
        clock: Clock | None = None,
        retry_attempts: int = 4,
        retry_wait_s: float = 0.5,
        retry_wait_max_s: float = 8.0,
        keepalive_interval_s: int = 5,
        keepalive_count: int = 3,
        poll_interval_s: float = 0.5,
        downtime_steps: int = 1,
        downtime_delay_s_per_gib: float = 75.0,
        ssh_timeout_s: float = 15.0,
        connect_timeout_s: float = 10.0,
    ):
        libvirt = import_libvirt()
        clock = clock if clock is not None else RealClock()
        self._connections = Connections(
            libvirt, hosts, clock=clock,
            retry=RetryPolicy(retry_attempts, retry_wait_s, retry_wait_max_s),
            keepalive_interval_s=keepalive_interval_s, keepalive_count=keepalive_count,
            connect_timeout_s=connect_timeout_s,
        )
        self._storage = Storage(self._connections)
        self._lifecycle = Lifecycle(self._connections, self._storage, clock, poll_interval_s)
        self._images = ImageCopies(self._connections, self._storage, ssh_timeout_s)
        self._state = StateTransfer(self._connections, self._lifecycle, ssh_timeout_s, self._checksum_if_ssh)
        self._blocks = BlockMigration(self._connections, self._storage)
        self._migrations = Migrations(self._connections, self._lifecycle,
                                      DowntimeSchedule(downtime_steps, downtime_delay_s_per_gib), poll_interval_s,
                                      self._blocks)

    # -- hosts -----------------------------------------------------------------------------------

    def hosts(self) -> list[str]:
        return self._connections.hosts()

    def add_host(self, config: HostConfig, vcpus: int, memory_mib: int) -> None:   # type: ignore[override]
        self._connections.add(config)

    def remove_host(self, host: str) -> None:
        self._connections.remove(host)

    def host_info(self, host: str) -> HostInfo:
        return read_host_info(self._connections, host)

    def check_host(self, host: str, timeout_s: float = 10.0) -> HostCheck:
        return run_host_checks(self._connections, host, timeout_s)

    def check_pair(self, source: str, destination: str, timeout_s: float = 30.0) -> PairCheck:
        return check_pair(self._connections, source, destination, timeout_s)

    def close(self) -> None:
        self._connections.close()

    # -- VMs -------------------------------------------------------------------------------------

    def list_vms(self, host: str) -> list[VMInfo]:
        return self._lifecycle.list_vms(host)

    def list_every_host(self) -> dict[str, list[VMInfo] | DriverError]:
        """Every host asked at once, each waited for no longer than the connect timeout (`Connections.ask_each`)."""
        return self._lifecycle.list_every_host()

    def domain_macs(self, host: str) -> set[str]:
        return self._lifecycle.domain_macs(host)

    def locate(self, vm: str) -> str | None:
        return self._lifecycle.locate(vm)

    def job(self, vm: str) -> str | None:
        lv = self._connections.libvirt
        kinds = {getattr(lv, f"VIR_DOMAIN_JOB_OPERATION_{name}", code): text
                 for name, code, text in (("SAVE", 2, "save"), ("RESTORE", 3, "restore"),
                                          ("MIGRATION_IN", 4, "migration-in"), ("MIGRATION_OUT", 5, "migration-out"))}
        for host in self._connections.hosts():
            try:
                stats = self._connections.call(host, f"job of {vm}", lambda c: c.lookupByName(vm).jobStats(0), vm,
                                                question=True)
            except DriverError:   # not there, or the host does not answer: nothing known of a job there
                continue
            if stats and stats.get("type", lv.VIR_DOMAIN_JOB_NONE) != lv.VIR_DOMAIN_JOB_NONE:
                return kinds.get(stats.get("operation"), "other")
        return None

    # (each operation's calls to a remote host wait on a connection no other call uses: `Connections.operation`)
    def start(self, spec: VMSpec, host: str) -> OperationReport:
        with self._connections.operation():
            return self._lifecycle.start(spec, host)

    def stop(self, vm: str, graceful_timeout: float = 30.0, host: str | None = None) -> OperationReport:
        with self._connections.operation():
            return self._lifecycle.stop(vm, graceful_timeout, host)

    def image_info(self, host: str, path: str) -> ImageInfo:
        return self._storage.image_info(host, path)

    def _checksum_if_ssh(self, host: str, path: str) -> str | None:
        """A copied memory image's checksum on `host` (over SSH, which copied it; libvirt cannot read it)."""
        return self._images.checksum(host, path)

    def shares_vm_storage(self, a: str, b: str) -> bool:
        return self._connections.host_config(a).shares_vm_disks_with(self._connections.host_config(b))

    def image_checksum(self, host: str, path: str) -> str | None:
        return self._images.checksum(host, path)

    def upload_image(self, host: str, path: str, source: str, progress: ByteProgress | None = None) -> str:
        with self._connections.operation():
            return self._images.upload(host, path, source, progress)

    def discard(self, vm: str, host: str) -> bool:
        with self._connections.operation():
            return self._lifecycle.discard(host, vm)

    def remove_vm_storage(self, vm: str, host: str, keep_disk: bool = False) -> list[str]:
        with self._connections.operation():
            return self._storage.remove_vm_volumes(host, vm, keep_disk=keep_disk)

    def vm_addresses(self, vm: str) -> list[VMAddress]:
        return vm_addresses(self._connections, self._lifecycle.find(vm), vm)

    def console_command(self, vm: str) -> list[str]:
        host = self._lifecycle.find(vm)
        return ["virsh", "-c", link_uri(self._connections.host_config(host)), "console", vm]

    def wait_for_console(self, vm: str, pattern: str, timeout_s: float) -> str | None:
        return wait_for_console_line(self._connections, self._lifecycle.find(vm), vm, pattern, timeout_s)

    # -- memory images ---------------------------------------------------------------------------

    def suspend(self, vm: str, state_path: str, bypass_cache: bool = False) -> OperationReport:
        with self._connections.operation():
            return self._state.suspend(vm, state_path, bypass_cache)

    def resume(self, vm: str, state_path: str, host: str) -> OperationReport:
        with self._connections.operation():
            return self._state.resume(vm, state_path, host)

    def move_state(self, state_path: str, src_host: str, dst_host: str) -> OperationReport:
        with self._connections.operation():
            return self._state.move_state(state_path, src_host, dst_host)

    def remove_state(self, state_path: str, host: str) -> None:
        with self._connections.operation():
            self._state.remove_state(state_path, host)

    # -- live migration --------------------------------------------------------------------------

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
        return self._migrations.migrate(vm, dst_host, max_downtime_ms, bandwidth_mib_s, timeout_s, on_timeout,
                                        progress)

    def completed_migration(self, vm: str, source: str) -> MigrationReport | None:
        return self._migrations.completed_migration(vm, source)

    def measured_dirty_rate(self, vm: str) -> float | None:
        return self._migrations.measured_dirty_rate(vm)

    def disk_allocation(self, vm: str) -> int | None:
        return self._blocks.allocation(vm, self._lifecycle.find(vm))

    def start_dirty_rate_measurement(self, vm: str, seconds: int) -> None:
        self._migrations.start_dirty_rate_measurement(vm, seconds)
