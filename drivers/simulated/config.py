"""What the simulated hosts are and how long their operations take: their capacities, the driver's
configuration (rates, fixed costs, injected failures, hosts that go down), and the operation times it spends
on its clock (its own rates by default, or the planner's cost model)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Protocol

from drivers.base import VMSpec
from drivers.clock import as_utc
from drivers.downtime import DowntimeSchedule

MIB = 1024 * 1024
ZERO = timedelta(0)
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
    ran on meanwhile). A host in `power_lost` loses its power then instead: the VMs running there stop,
    their definitions left shut off (as libvirt's persistent domains after a reboot); a save image stays.
    `failure_probability` makes each operation in
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
    migration_bandwidth_mib_s: float = 100.0  # the link's: migrate()'s bandwidth is a limit below it
    migration_overhead: timedelta = ZERO
    dirty_factor: float = 1.0
    migration_switchover_ms: float = 0.0      # fixed part of every migration's pause
    downtime_schedule: DowntimeSchedule = DowntimeSchedule()
    shared_storage: tuple[str, ...] = ()
    #: each host keeps its VMs' overlays on its own storage (no shared storage): a live migration of a VM with
    #: a disk copies its overlay first (a block migration), `overlay_mib` of it, timed by the same model
    local_vm_disks: bool = False
    overlay_mib: float = 0.0
    domain_type: str = "kvm"
    host_down_at: Mapping[str, datetime] = field(default_factory=dict)
    host_up_at: Mapping[str, datetime] = field(default_factory=dict)
    power_lost: frozenset[str] = frozenset()
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
        if not math.isfinite(self.overlay_mib) or self.overlay_mib < 0:
            raise ValueError(f"overlay_mib must be a finite number >= 0 (got {self.overlay_mib})")
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
        object.__setattr__(self, "power_lost", frozenset(self.power_lost))
        if not self.power_lost <= set(down):
            raise ValueError(f"power_lost[{sorted(self.power_lost - set(down))[0]}] needs that host's host_down_at")
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




def host_capacity(host: str, cap: HostCapacity | tuple[int, int]) -> HostCapacity:
    """A host's capacity as given (a `HostCapacity` or `(vcpus, memory MiB)`), checked."""
    cap = cap if isinstance(cap, HostCapacity) else HostCapacity(*cap)
    if cap.vcpus < 1 or cap.memory_mib < 1:
        raise ValueError(f"host {host}: capacity must be at least 1 vCPU and 1 MiB (got {cap})")
    return cap
