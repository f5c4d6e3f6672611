"""What the scheduler asks of the outside world when a reservation starts or ends.

The simulator uses `NullEnactor` (nothing to touch); the daemon uses an enactor backed by a driver.
An enactor raises `EnactmentError` when an operation fails; the scheduler then fails the lease or stops,
per `on_enactment_error`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from orchestrator.model.errors import LeasewiseError
from orchestrator.model.lease import Lease
from orchestrator.model.reservations import Reservation


class EnactmentError(LeasewiseError):
    """An enactment operation (start, stop, suspend, resume, migrate) failed; `at`, when known, is when it
    gave up (what follows it is planned from then)."""

    at: datetime | None = None


class Enactor(Protocol):
    def start_vms(self, lease: Lease, rr: Reservation) -> None: ...

    def stop_vms(self, lease: Lease, rr: Reservation) -> None: ...

    def suspend_vms(self, lease: Lease, rr: Reservation) -> None: ...

    def resume_vms(self, lease: Lease, rr: Reservation) -> None: ...

    def migrate_images(self, lease: Lease, rr: Reservation) -> None: ...

    def live_migrate(self, lease: Lease, rr: Reservation) -> None: ...

    def kill_vms(self, lease: Lease, rr: Reservation) -> None: ...


class Operation(enum.Enum):
    """What the scheduler asks an enactor to do; the value is the method's name, as logs and failure
    reasons show it."""

    START_VMS = "start_vms"
    STOP_VMS = "stop_vms"
    SUSPEND_VMS = "suspend_vms"
    RESUME_VMS = "resume_vms"
    MIGRATE_IMAGES = "migrate_images"
    LIVE_MIGRATE = "live_migrate"
    KILL_VMS = "kill_vms"


def operations_of(enactor: Enactor) -> dict[Operation, Callable[[Lease, Reservation], None]]:
    """Each operation's method on `enactor`, spelled out: the scheduler dispatches through this table
    rather than by looking a name up, and an enactor missing a method fails when the scheduler is built."""
    return {
        Operation.START_VMS: enactor.start_vms,
        Operation.STOP_VMS: enactor.stop_vms,
        Operation.SUSPEND_VMS: enactor.suspend_vms,
        Operation.RESUME_VMS: enactor.resume_vms,
        Operation.MIGRATE_IMAGES: enactor.migrate_images,
        Operation.LIVE_MIGRATE: enactor.live_migrate,
        Operation.KILL_VMS: enactor.kill_vms,
    }


class NullEnactor:
    """Enacts nothing: the plan is the outcome (simulation)."""

    def start_vms(self, lease: Lease, rr: Reservation) -> None:
        pass

    def stop_vms(self, lease: Lease, rr: Reservation) -> None:
        pass

    def suspend_vms(self, lease: Lease, rr: Reservation) -> None:
        pass

    def resume_vms(self, lease: Lease, rr: Reservation) -> None:
        pass

    def migrate_images(self, lease: Lease, rr: Reservation) -> None:
        pass

    def live_migrate(self, lease: Lease, rr: Reservation) -> None:
        pass

    def kill_vms(self, lease: Lease, rr: Reservation) -> None:
        pass
