"""The one place the orchestrator makes a driver: from the driver's name, the hosts and the configuration.

`drivers.registry.create_driver` maps a name to an implementation; this module decides what each one is
given. The simulated driver gets the planner's pre-copy model and the hosts' shared storage, and, to
enact a plan (`leasewise run`), the planner's cost of every other operation too (`PlannedTimes`, with
the same parameters: configured or calibrated), so on it planned and enacted times agree; the libvirt
driver gets the hosts' connection settings and its tuning. Nothing else in the orchestrator constructs a
driver.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from drivers.base import Driver
from drivers.clock import Clock
from drivers.inventory import HostConfig
from drivers.registry import DRIVER_NAMES, create_driver
from drivers.base import VMSpec
from drivers.simulated import SimulatedDriverConfig
from orchestrator.config import SchedulingConfig
from orchestrator.planning.overheads import Overheads
from orchestrator.planning.precopy import predict_precopy

__all__ = ["DRIVER_NAMES", "PlannedTimes", "make_driver", "simulated_config"]

MIB = 1024 * 1024

#: where the simulated driver keeps save images visible to every host when no host names shared storage
DEFAULT_SHARED_STORAGE = ("/var/lib/libvirt/images",)


def simulated_config(scheduling: SchedulingConfig | None = None, hosts: Sequence[HostConfig] = (),
                     **changes: Any) -> SimulatedDriverConfig:
    """The simulated driver's settings: its hosts' shared storage, and with `scheduling`, the configured
    cost model's values as the simulated hardware's true parameters (what `calibrate --dry-run` fits)."""
    shared = tuple(dict.fromkeys(prefix for host in hosts for prefix in host.shared_storage))
    values: dict[str, Any] = {"shared_storage": shared or DEFAULT_SHARED_STORAGE}
    if scheduling is not None:
        values.update(
            migration_bandwidth_mib_s=scheduling.live_bandwidth,
            migration_overhead=scheduling.live_migration_overhead,
            dirty_factor=scheduling.live_migration_dirty_factor,
            migration_switchover_ms=scheduling.live_migration_switchover_ms,
            downtime_schedule=scheduling.downtime_schedule,
            suspend_rate_mib_s=scheduling.suspend_rate,
            suspend_overhead=scheduling.enactment_overhead,
            resume_rate_mib_s=scheduling.resume_rate,
            resume_overhead=scheduling.enactment_overhead,
        )
    values.update(changes)
    return SimulatedDriverConfig(**values)


class PlannedTimes:
    """The simulated driver's operation times: what the planner reserves for each (orchestrator.planning.
    overheads), per VM. A start costs nothing (a VM reservation begins with its VMs running); a stop takes
    `shutdown_time` and a suspension or resumption its memory at the rate, rounded up to whole seconds as
    planned, each plus `enactment_overhead`; a memory image moves at `migration_bandwidth`, also between
    hosts that share its storage (instantly with `migration = "yes-notransfer"`, as planned). Live migrations are the pre-copy model's, given the same parameters
    by `simulated_config`."""

    def __init__(self, scheduling: SchedulingConfig):
        self._overheads = Overheads(scheduling)
        self._scheduling = scheduling

    def _each(self) -> float:
        return self._scheduling.enactment_overhead.total_seconds()

    def start(self, spec: VMSpec) -> float:
        return 0.0

    def stop(self, spec: VMSpec) -> float:
        return self._scheduling.shutdown_time.total_seconds() + self._each()

    def suspend(self, spec: VMSpec) -> float:
        return self._overheads.suspend_vm_time(spec.memory_mib).total_seconds() + self._each()

    def resume(self, spec: VMSpec) -> float:
        return self._overheads.resume_vm_time(spec.memory_mib).total_seconds() + self._each()

    def move_state(self, size_bytes: int, shared: bool) -> float:
        # (on shared storage too: the plan has the transfer unless `migration = "yes-notransfer"` says not)
        if self._scheduling.migration != "yes":
            return 0.0
        return self._overheads.transfer_time(size_bytes / MIB).total_seconds()


def make_driver(
    name: str,
    hosts: Sequence[HostConfig],
    *,
    capacities: Mapping[str, tuple[int, int]] | None = None,
    clock: Clock | None = None,
    simulated: SimulatedDriverConfig | None = None,
    state_file: str | os.PathLike[str] | None = None,
    planned: SchedulingConfig | None = None,
    **tuning: Any,
) -> Driver:
    """The driver called `name` over `hosts`.

    simulated: `capacities` (host -> (vCPUs, MiB)) stand for the hardware; `simulated` overrides the
    settings `simulated_config(hosts=hosts)` gives; `state_file` keeps the simulated hosts across runs;
    `planned` (the scheduling configuration the plans are made with) makes every operation take the
    time the planner gives it (`simulated_config(planned, hosts)` and `PlannedTimes`).
    libvirt: `tuning` goes to the driver (e.g. `retry_attempts`, `downtime_steps`).
    """
    if name == "simulated":
        if capacities is None:
            capacities = {}
        if simulated is not None:
            config = simulated
        else:
            config = simulated_config(planned, hosts=hosts)
        return create_driver("simulated", hosts=dict(capacities), clock=clock, config=config,
                             state_file=state_file, migration_model=predict_precopy,
                             times=PlannedTimes(planned) if planned is not None else None)
    options = dict(tuning)
    if clock is not None:
        options["clock"] = clock
    return create_driver(name, hosts=list(hosts), **options)
