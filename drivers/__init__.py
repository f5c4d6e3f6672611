"""Drivers enact the plan: one interface (`drivers.base.Driver`), a simulated and a libvirt implementation.

Nothing outside this package knows which implementation runs; `drivers.registry.create_driver` builds one
from its name.
"""
