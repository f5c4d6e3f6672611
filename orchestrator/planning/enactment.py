"""What the scheduler asks of the outside world when a reservation starts or ends.

The simulator uses `NullEnactor` (nothing to touch); the daemon uses an enactor backed by a driver.
An enactor raises `EnactmentError` when an operation fails; the scheduler then fails the lease or stops,
per `on_enactment_error`.
"""

from __future__ import annotations

from typing import Protocol

from orchestrator.model.errors import LeasewiseError
from orchestrator.model.lease import Lease
from orchestrator.model.reservations import Reservation


class EnactmentError(LeasewiseError):
    """An enactment operation (start, stop, suspend, resume, migrate) failed."""


class Enactor(Protocol):
    def start_vms(self, lease: Lease, rr: Reservation) -> None: ...

    def stop_vms(self, lease: Lease, rr: Reservation) -> None: ...

    def suspend_vms(self, lease: Lease, rr: Reservation) -> None: ...

    def resume_vms(self, lease: Lease, rr: Reservation) -> None: ...

    def migrate_images(self, lease: Lease, rr: Reservation) -> None: ...

    def live_migrate(self, lease: Lease, rr: Reservation) -> None: ...

    def kill_vms(self, lease: Lease, rr: Reservation) -> None: ...


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
