"""The driver interface: the only calls the orchestrator makes to touch hosts and VMs.

Both implementations (simulated, libvirt) must behave the same for every call;
`tests/drivers/test_driver_contract.py` runs one suite against both.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Literal, Protocol

from drivers.errors import DriverError
from drivers.gil_sharing import sharing_the_gil

if TYPE_CHECKING:  # pragma: no cover
    from drivers.cloudinit import SeedSpec
    from drivers.downtime import DowntimeSchedule


@dataclass(frozen=True)
class HostInfo:
    """Capacity and versions of one host, as the driver sees it now."""

    name: str
    uri: str
    vcpus: int
    memory_mib: int
    domain_type: str                 # "kvm" or "qemu" (TCG)
    hypervisor: str = ""             # e.g. "QEMU 7.2.0"
    libvirt_version: str = ""        # e.g. "9.0.0"
    reachable: bool = True
    error: str = ""                  # why it is unreachable


@dataclass(frozen=True)
class DiskSpec:
    """A VM's own disk: a qcow2 overlay backed by `base` (never opened read-write), created when the VM
    starts, following it through save/restore and migration, deleted when it stops unless `keep`."""

    base: str                        # the base image, on storage every host sees
    base_format: str = "qcow2"       # qcow2 | raw
    size_bytes: int | None = None    # the overlay's virtual size; None: the base's
    keep: bool = False


@dataclass(frozen=True)
class VMSpec:
    """Everything needed to define and start one VM; rendered to domain XML in one place.

    `disk` and `seed` are requests the driver turns into volumes on the host (`disk_image` and
    `seed_image` then name them); `disk_image` alone attaches a file as it is."""

    name: str
    vcpus: int
    memory_mib: int
    disk_image: str | None = None    # path of a qcow2/raw disk the domain opens
    kernel: str | None = None        # direct kernel boot (the lab's tiny guest)
    initrd: str | None = None
    cmdline: str | None = None
    network: str | None = None       # libvirt network name or bridge; None = the host's (if `mac` is set)
    network_type: str = "bridge"     # bridge | network
    mac: str | None = None           # a NIC with this MAC, on `network` or else on the host's network
    lease_id: str | None = None      # recorded in the domain's metadata so a restart can adopt it
    disk: DiskSpec | None = None     # an overlay of its own
    seed: SeedSpec | None = None     # a cloud-init NoCloud seed, attached as a read-only disk
    seed_image: str | None = None    # the seed's path once made
    guest_agent: bool = True         # a virtio channel for qemu-guest-agent (addresses, clean shutdown)
    # How fast the guest dirties memory, and the most it keeps dirtying (None = 90% of memory): the
    # simulated driver models it to time live migrations; real drivers ignore it.
    dirty_rate_mib_s: float = 0.0
    working_set_mib: float | None = None
    # How much of its disk (`disk` or `disk_image`) the guest has written, MiB: what the simulated driver's
    # block migration copies (None: its configured `overlay_mib`); real drivers read the overlay itself.
    disk_written_mib: float | None = None


#: the pre-flight checks of a host, in the order `Driver.check_host` answers them: the libvirt link's transport
#: and (over SSH) its host key first, then what is asked through it, then leasewise's own SSH
HOST_CHECKS = ("transport", "host key", "connect", "versions", "domain type", "image directory", "ssh",
               "clock skew")
#: the checks of an ordered pair of hosts (source -> destination), in the order `Driver.check_pair` answers them
PAIR_CHECKS = ("peer link", "migration port", "cpu")
#: clock skew above this fails the check (suspend/resume and reservations are planned to the second)
MAX_CLOCK_SKEW_S = 2.0
#: hosts listed between two pauses for the request threads in `Driver.list_every_host` (see gil_sharing)
HOSTS_PER_PAUSE = 50

#: PASS or FAIL; SKIP when a check does not apply (e.g. no ssh configured); "simulated" when there is no
#: real host to check
CheckStatus = Literal["PASS", "FAIL", "SKIP", "simulated"]


@dataclass(frozen=True)
class CheckItem:
    """One pre-flight check of a host: which, how it went, and the detail an operator reads."""

    check: str                       # one of HOST_CHECKS
    status: CheckStatus
    detail: str


@dataclass(frozen=True)
class HostCheck:
    """Whether a host is ready for leases: one item per check of HOST_CHECKS, in that order."""

    host: str
    items: tuple[CheckItem, ...]

    @property
    def failed(self) -> list[str]:
        """The checks that failed."""
        return [item.check for item in self.items if item.status == "FAIL"]

    @property
    def ok(self) -> bool:
        return not self.failed


@dataclass(frozen=True)
class PairCheck:
    """Whether a live migration from `source` to `destination` can run: one item per check of PAIR_CHECKS."""

    source: str
    destination: str
    items: tuple[CheckItem, ...]
    #: MiB of guest memory per second the probe migration moved, its fixed costs included (None: not measured)
    link_mib_s: float | None = None

    @property
    def failed(self) -> list[str]:
        return [item.check for item in self.items if item.status == "FAIL"]


@dataclass(frozen=True)
class ImageInfo:
    path: str
    format: str                      # qcow2 | raw | ...
    virtual_size: int                # bytes the guest sees


@dataclass(frozen=True)
class VMAddress:
    """One address of a VM's NIC, and where it was learnt (agent, lease, arp, simulated)."""

    mac: str
    address: str
    prefix: int
    family: Literal["ipv4", "ipv6"]
    source: str
    interface: str = ""


VMStateName = Literal["running", "paused", "shutoff", "saved", "crashed", "other"]


@dataclass(frozen=True)
class VMInfo:
    name: str
    host: str
    state: VMStateName
    vcpus: int
    memory_mib: int
    lease_id: str | None = None


@dataclass(frozen=True)
class OperationReport:
    """Measured cost of an operation: used to calibrate the scheduler's suspend/resume rates."""

    operation: str                   # start, stop, suspend, resume, move_state
    vm: str
    host: str
    wall_seconds: float
    bytes: int = 0                   # size of the saved memory image / bytes copied
    #: how move_state carried the bytes: "direct" (host to host), "relay" (through this machine), "shared"
    #: (nothing to copy: both hosts see the files); "" for the other operations
    route: str = ""


@dataclass(frozen=True)
class MigrationProgress:
    """One sample of a running live migration, fed to the progress callback."""

    elapsed_seconds: float
    memory_total: int                # bytes
    memory_processed: int
    memory_remaining: int
    dirty_rate_bytes_s: float
    iteration: int
    max_downtime_ms: float           # the value in force (Nova-style steps raise it)
    disk_processed: int = 0          # disk bytes copied so far (a block migration)

    @property
    def percent(self) -> float:
        if self.memory_total <= 0:
            return 100.0
        return min(100.0, 100.0 * self.memory_processed / self.memory_total)


OnTimeout = Literal["abort", "force"]


@dataclass(frozen=True)
class MigrationReport:
    vm: str
    source: str
    destination: str
    success: bool
    total_seconds: float             # from the start of the migration job to the VM running on the destination
    downtime_ms: float               # how long the guest was paused (the final stop-and-copy)
    iterations: int                  # passes over memory, first copy and stop-and-copy included (memory_iteration)
    bytes_transferred: int           # memory bytes sent (libvirt: memory_processed)
    memory_total: int = 0            # guest memory, bytes
    disk_bytes: int = 0              # disk bytes copied with it (a block migration; libvirt: disk_processed)
    outcome: Literal["completed", "forced", "aborted", "failed"] = "completed"
    error: str = ""
    samples: tuple[MigrationProgress, ...] = field(default=(), repr=False)


ProgressCallback = Callable[[MigrationProgress], None]
#: (bytes sent so far, bytes in all) of a file being copied to a host
ByteProgress = Callable[[int, int], None]


def validate_migration_args(
    max_downtime_ms: float, bandwidth_mib_s: float | None, timeout_s: float, on_timeout: str
) -> None:
    """The checks every `Driver.migrate` makes before touching anything; `ValueError` names the argument."""
    if not math.isfinite(max_downtime_ms) or max_downtime_ms <= 0:
        raise ValueError(f"max_downtime_ms must be greater than 0 (got {max_downtime_ms})")
    if bandwidth_mib_s is not None and (not math.isfinite(bandwidth_mib_s) or bandwidth_mib_s <= 0):
        raise ValueError(f"bandwidth_mib_s must be greater than 0 (got {bandwidth_mib_s})")
    if not math.isfinite(timeout_s) or timeout_s <= 0:
        raise ValueError(f"timeout_s must be greater than 0 (got {timeout_s})")
    if on_timeout not in ("abort", "force"):
        raise ValueError(f"on_timeout must be 'abort' or 'force' (got {on_timeout!r})")


class MigrationRound(Protocol):
    seconds: float
    mib: float


class MigrationCost(Protocol):
    """What a migration model answers: the passes of one pre-copy migration and what they add up to."""

    total_seconds: float
    downtime_ms: float
    transferred_mib: float
    outcome: str
    rounds: tuple[MigrationRound, ...]
    remaining_mib: float
    disk_seconds: float      # the disk's copy before the memory passes (a block migration)

    @property
    def passes(self) -> int: ...


class MigrationModel(Protocol):
    """Times a pre-copy migration; the simulated driver is given the planner's model so a dry run moves
    VMs as the plan expects (the model itself is planning's: `orchestrator.planning.precopy`)."""

    def __call__(self, memory_mib: float, bandwidth_mib_s: float, dirty_rate_mib_s: float, max_downtime_ms: float,
                 *, working_set_mib: float | None = None, timeout_s: float | None = None,
                 on_timeout: Literal["abort", "force"] = "abort", overhead_s: float = 0.0,
                 dirty_factor: float = 1.0, switchover_ms: float = 0.0,
                 downtime_schedule: DowntimeSchedule | None = None, disk_mib: float = 0.0) -> MigrationCost: ...


class HostEntry(Protocol):
    """A host as the inventory describes it (`drivers.inventory.HostConfig`, which builds on this module,
    so it is named here by what every driver reads of it)."""

    @property
    def name(self) -> str: ...

    @property
    def uri(self) -> str: ...


class Driver(ABC):
    """Manages named hosts and the VMs of leases on them.

    The hosts can change while the driver runs (a server's `host add` and `host remove`): `add_host` and
    `remove_host` may be called from one thread while others run operations."""

    name: str = "abstract"

    @abstractmethod
    def hosts(self) -> list[str]:
        """Names of the hosts this driver manages."""

    @abstractmethod
    def add_host(self, config: HostEntry, vcpus: int, memory_mib: int) -> None:
        """Manage one more host from now on: `config` says how to reach it, `vcpus` and `memory_mib` are
        its capacity as the store has it (the simulated driver's hardware; a real host is asked, so the
        libvirt driver ignores them). `ValueError` when a host of that name is managed already."""

    @abstractmethod
    def remove_host(self, host: str) -> None:
        """Manage `host` no more: it is not listed, and a call naming it raises `UnknownHost`. A real host
        keeps what runs there (only the driver lets go of it); a simulated one goes with its VMs and save
        images. `UnknownHost` when it is not managed."""

    @abstractmethod
    def host_info(self, host: str) -> HostInfo:
        """Capacity and versions; an unreachable host gives `reachable=False` rather than raising."""

    @abstractmethod
    def start(self, spec: VMSpec, host: str) -> OperationReport:
        """Define and start a VM; `VMAlreadyExists` if a VM of that name exists on the host."""

    @abstractmethod
    def stop(self, vm: str, graceful_timeout: float = 30.0, host: str | None = None) -> OperationReport:
        """Graceful shutdown, then destroy after `graceful_timeout` seconds; undefines the VM. `host`: the
        copy on that host (a host that was unreachable may come back with a VM that runs elsewhere now);
        default: wherever the VM is."""

    @abstractmethod
    def suspend(self, vm: str, state_path: str, bypass_cache: bool = False) -> OperationReport:
        """Save the VM's memory to `state_path` on its host and stop it (libvirt `save`)."""

    @abstractmethod
    def resume(self, vm: str, state_path: str, host: str) -> OperationReport:
        """Restore a VM saved at `state_path` on `host` (libvirt `restore`)."""

    @abstractmethod
    def move_state(self, state_path: str, src_host: str, dst_host: str) -> OperationReport:
        """Copy a saved memory image between hosts (SFTP); no copy when both see the same storage."""

    @abstractmethod
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
        """Pre-copy live migration. Raises `MigrationFailed` (VM still running on the source) on failure.
        `bandwidth_mib_s`: the most the migration may use (libvirt's VIR_MIGRATE_PARAM_BANDWIDTH), never
        faster than the link; None: no limit."""

    @abstractmethod
    def list_vms(self, host: str) -> list[VMInfo]:
        """What really exists on the host (for reconciliation after a restart)."""

    def list_every_host(self) -> dict[str, list[VMInfo] | DriverError]:
        """What every host runs (its `list_vms`), or the error it gave, in the order of `hosts()`: the
        daemon's look, once a poll interval. Here one host after another, the GIL let go every few hosts
        (`drivers.gil_sharing`): right for hosts that answer at once. A driver whose hosts are reached over
        a network asks them all at once instead, and waits for them no longer than a deadline: one host that
        never answers must not hold up the look at all the others."""
        listings: dict[str, list[VMInfo] | DriverError] = {}
        for host in sharing_the_gil(self.hosts(), HOSTS_PER_PAUSE):
            try:
                listings[host] = self.list_vms(host)
            except DriverError as exc:
                listings[host] = exc
        return listings

    @abstractmethod
    def check_host(self, host: str, timeout_s: float = 10.0) -> HostCheck:
        """The pre-flight checks of HOST_CHECKS; a check that cannot be made is an item, never an exception
        (only `UnknownHost` is raised). `timeout_s` bounds each contact with the host."""

    def check_pair(self, source: str, destination: str, timeout_s: float = 30.0) -> PairCheck:
        """The checks of PAIR_CHECKS for a live migration from `source` to `destination`; like `check_host`,
        a check that cannot be made is an item, never an exception (only `UnknownHost` is raised)."""
        return PairCheck(source, destination, tuple(CheckItem(name, "SKIP", f"the {self.name} driver checks no "
                                                                           "host pairs") for name in PAIR_CHECKS))

    @abstractmethod
    def remove_state(self, state_path: str, host: str) -> None:
        """Delete a save image on `host` (e.g. a calibration's); nothing to do when it is not there."""

    @abstractmethod
    def measured_dirty_rate(self, vm: str) -> float | None:
        """How fast the VM's guest dirties memory, MiB/s, as last measured; None when never measured (or
        a measurement is still running)."""

    @abstractmethod
    def disk_allocation(self, vm: str) -> int | None:
        """Bytes the VM's writable disks on its host's own storage hold (their allocation, not their size):
        what a block migration copies. None when it has none there (or the driver cannot tell)."""

    def start_dirty_rate_measurement(self, vm: str, seconds: int) -> None:
        """Start measuring how fast the VM dirties memory over `seconds`; `measured_dirty_rate` has the
        answer afterwards. Costs the guest little (pages are sampled), but not nothing: call it seldom."""

    def image_info(self, host: str, path: str) -> ImageInfo:
        """What `host` sees at `path` (a base image): format and virtual size; `OperationFailed` naming the
        problem when it cannot read it."""
        raise NotImplementedError(f"{self.name} driver cannot read images")

    def image_checksum(self, host: str, path: str) -> str | None:
        """The SHA-256 (hex) of the file at `path` on `host`, computed there (over leasewise's own SSH when
        the host has it, else read back through the driver's link); None when `host` has no such file."""
        raise NotImplementedError(f"{self.name} driver cannot checksum images")

    def upload_image(self, host: str, path: str, source: str, progress: ByteProgress | None = None) -> str:
        """Copy this machine's file `source` to `path` on `host` (its directory made if missing) through the
        driver's own link to the host, `progress(sent, total)` told as bytes go; then the SHA-256 `host`
        computes of what it stored, which must be the source's (`OperationFailed`, and the copy deleted,
        when it is not). A file already at `path` is replaced."""
        raise NotImplementedError(f"{self.name} driver cannot copy images")

    def vm_addresses(self, vm: str) -> list[VMAddress]:
        """The VM's network addresses: from the guest agent, else the DHCP leases, else ARP (libvirt's
        `interfaceAddresses` sources, in that order); empty when none answers yet."""
        return []

    def console_command(self, vm: str) -> list[str]:
        """A command line that attaches a terminal to the VM's serial console."""
        raise NotImplementedError(f"{self.name} driver has no console")

    def wait_for_console(self, vm: str, pattern: str, timeout_s: float) -> str | None:
        """The first line the VM prints on its serial console from now on that matches the regular
        expression `pattern`, or None after `timeout_s` (a guest that printed nothing)."""
        raise NotImplementedError(f"{self.name} driver has no console")

    def discard(self, vm: str, host: str) -> bool:
        """Destroy (if it runs) and undefine `vm` on `host`, leaving its storage alone: a VM a lost host
        kept (shut off by a power cut, or run on through a network cut) after its lease moved on; a copy
        started elsewhere since may use the same shared disk. False when `host` has no such VM."""
        raise NotImplementedError(f"{self.name} driver cannot discard VMs")

    def domain_macs(self, host: str) -> set[str]:
        """The MAC addresses of every domain's NICs on `host` (leasewise's or not): an installation draws its
        MAC prefix clear of them."""
        return set()

    def shares_vm_storage(self, a: str, b: str) -> bool:
        """Whether a VM's disks on host `a` are where host `b` sees them too (so a VM that moves between them
        takes no copy along, and leaves none behind)."""
        return True

    def remove_vm_storage(self, vm: str, host: str, keep_disk: bool = False) -> list[str]:
        """Delete what a VM left on `host`'s storage (its overlay unless `keep_disk`, its seed); returns the
        paths deleted. Nothing to do when there is none."""
        return []

    def job(self, vm: str) -> str | None:
        """The long operation the hypervisor is doing to `vm` now, started by whoever: "migration-out",
        "migration-in", "save", "restore" or "other"; None when it does nothing (or the driver's operations
        cannot outlive their call, as the simulated driver's). A daemon started again after a crash asks,
        so as to wait for what its predecessor began rather than do it twice."""
        return None

    def completed_migration(self, vm: str, source: str) -> MigrationReport | None:
        """What the last live migration that brought `vm` (from `source`) to the host it runs on measured, as
        the hypervisor keeps it (libvirt: the destination's completed job statistics), or None when nothing
        is kept (the hypervisor restarted since, or another job followed). For a migration that ended while
        no daemon watched it: its duration, downtime and bytes are real, its start and end are not known."""
        return None

    def locate(self, vm: str) -> str | None:
        """The host a VM runs (or is defined) on, or None."""
        for host in self.hosts():
            try:
                if any(info.name == vm for info in self.list_vms(host)):
                    return host
            except Exception:  # an unreachable host cannot be where we find it
                continue
        return None

    def close(self) -> None:
        """Release connections."""
