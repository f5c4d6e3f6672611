"""The driver a calibration runs on, chosen as the other commands choose theirs: the simulated driver over
the store's hosts (or, in a dry run, over hosts it does not know), or libvirt over an inventory or the
store's hosts. The simulated driver is the model itself, with the configured `[scheduling]` values as its
parameters, so a calibration there must give them back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from drivers.base import Driver
from drivers.clock import RealClock, SimulatedClock
from drivers.errors import DriverError
from drivers.inventory import HostConfig, load_inventory
from orchestrator.config import Config
from orchestrator.model.errors import InvalidRequest
from orchestrator.runtime.driver_factory import make_driver, simulated_config
from orchestrator.state.store import Store

#: capacity of hosts that a dry run names but the store does not know
DRY_RUN_CAPACITY = (1024, 1 << 30)


@dataclass
class Setup:
    """The driver a campaign runs on, which kind it is, and how to wait on its clock."""

    driver: Driver
    kind: str                                   # "simulated" | "libvirt"
    sleep: Callable[[float], None]              # waits on the driver's clock
    host_configs: dict[str, HostConfig] = field(default_factory=dict)   # name -> HostConfig (libvirt)


def open_setup(hosts: list[str], sizes: list[int], dry_run: bool, inventory: Path | None, store_path: Path,
               cfg: Config, now: datetime, *, local_disks: bool = False) -> Setup:
    """The driver the campaign runs on, after checking that it manages `hosts` (and, simulated, that the
    largest of `sizes` fits on each). Its errors name the `calibrate` option at fault (`--host: ...`);
    `now` starts the simulated driver's clock; `local_disks`: the simulated hosts keep VM disks on their
    own storage (a guest's disk is copied when it migrates). The caller closes the driver."""
    use_libvirt = not dry_run and (inventory is not None or cfg.daemon.driver == "libvirt")
    if not use_libvirt:
        return _simulated(hosts, sizes, dry_run, inventory, store_path, cfg, now, local_disks)
    if inventory is None and cfg.daemon.inventory:
        inventory = Path(cfg.daemon.inventory)
    if inventory is not None:
        configs = load_inventory(inventory)
    else:
        if not store_path.exists():
            raise InvalidRequest("--state", f"no store at {store_path} (give --inventory FILE, or add hosts with "
                                            "`leasewise host add`)")
        with Store.open(store_path) as store:
            configs = [h.config for h in store.hosts()]
    by_name = {c.name: c for c in configs}
    for host in hosts:
        if host not in by_name:
            raise InvalidRequest("--host", f"unknown host {host!r} (known: {', '.join(by_name) or 'none'})")
    try:
        # One downtime step: the max downtime stays what the model is given for the whole migration.
        driver = make_driver("libvirt", [by_name[h] for h in hosts], downtime_steps=1)
    except ValueError as exc:
        raise DriverError(str(exc)) from None
    clock = RealClock()
    return Setup(driver, "libvirt", lambda s: clock.sleep(timedelta(seconds=s)), by_name)


def _simulated(hosts: list[str], sizes: list[int], dry_run: bool, inventory: Path | None, store_path: Path,
               cfg: Config, now: datetime, local_disks: bool) -> Setup:
    if dry_run and inventory is not None:
        raise InvalidRequest("--inventory", "not with --dry-run (a dry run uses the simulated driver)")
    known = {}
    if store_path.exists():
        with Store.open(store_path) as store:
            known = {h.name: (h.vcpus, h.memory_mib) for h in store.hosts()}
    elif not dry_run:
        raise InvalidRequest("--state", f"no store at {store_path} (add hosts with `leasewise host add`, or use "
                                        "--dry-run)")
    capacities = {}
    for host in hosts:
        if host in known:
            capacities[host] = known[host]
        elif dry_run:
            capacities[host] = DRY_RUN_CAPACITY
        else:
            listed = ", ".join(known) or "none"
            raise InvalidRequest("--host", f"no host {host!r} in the store (hosts: {listed})")
        if max(sizes) > capacities[host][1]:
            raise InvalidRequest("--sizes", f"{max(sizes)} MiB does not fit on host {host} "
                                            f"({capacities[host][1]} MiB)")
    clock = SimulatedClock(now)
    driver = make_driver("simulated", [], capacities=capacities, clock=clock,
                         simulated=simulated_config(cfg.scheduling, shared_storage=(), local_vm_disks=local_disks))
    return Setup(driver, "simulated", lambda s: clock.sleep(timedelta(seconds=s)))
