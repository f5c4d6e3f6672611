"""The one place the orchestrator makes a driver: from the driver's name, the hosts and the configuration.

`drivers.registry.create_driver` maps a name to an implementation; this module decides what each one is
given. The simulated driver gets the planner's pre-copy model (so a dry run migrates VMs the way the
plan expects) and the hosts' shared storage; the libvirt driver gets the hosts' connection settings and
its tuning. Nothing else in the orchestrator constructs a driver.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from drivers.base import Driver
from drivers.clock import Clock
from drivers.inventory import HostConfig
from drivers.registry import DRIVER_NAMES, create_driver
from drivers.simulated import SimulatedDriverConfig
from orchestrator.model.config import SchedulingConfig
from orchestrator.planning.precopy import predict_precopy

__all__ = ["DRIVER_NAMES", "make_driver", "simulated_config"]

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


def make_driver(
    name: str,
    hosts: Sequence[HostConfig],
    *,
    capacities: Mapping[str, tuple[int, int]] | None = None,
    clock: Clock | None = None,
    simulated: SimulatedDriverConfig | None = None,
    state_file: str | os.PathLike[str] | None = None,
    **tuning: Any,
) -> Driver:
    """The driver called `name` over `hosts`.

    simulated: `capacities` (host -> (vCPUs, MiB)) stand for the hardware; `simulated` overrides the
    settings `simulated_config(hosts=hosts)` gives; `state_file` keeps the simulated hosts across runs.
    libvirt: `tuning` goes to the driver (e.g. `retry_attempts`, `downtime_steps`).
    """
    if name == "simulated":
        if capacities is None:
            capacities = {}
        config = simulated if simulated is not None else simulated_config(hosts=hosts)
        return create_driver("simulated", hosts=dict(capacities), clock=clock, config=config,
                             state_file=state_file, migration_model=predict_precopy)
    options = dict(tuning)
    if clock is not None:
        options["clock"] = clock
    return create_driver(name, hosts=list(hosts), **options)
