"""The one place that maps a driver name to its implementation.

Implementations are imported only when asked for, so choosing "simulated" never needs libvirt-python.
"""

from __future__ import annotations

from typing import Any

from .base import Driver
from .errors import DriverConfigError

DRIVER_NAMES = ("simulated", "libvirt")


def create_driver(name: str, **options: Any) -> Driver:
    """Build the driver called `name` with its own constructor options.

    simulated: hosts={name: HostCapacity | (vcpus, memory_mib)}, clock=SimulatedClock, config=SimulatedDriverConfig
    libvirt:   hosts=[HostConfig, ...] (see drivers.inventory.load_inventory), plus tuning keywords
    """
    if name == "simulated":
        from .simulated import SimulatedDriver

        return SimulatedDriver(**options)
    if name == "libvirt":
        from .libvirt import LibvirtDriver

        return LibvirtDriver(**options)
    raise DriverConfigError("driver", f"unknown driver {name!r} (choose one of: {', '.join(DRIVER_NAMES)})")
