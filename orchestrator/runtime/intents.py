"""The scheduler's requests to the hosts, collected while it plans and carried out after the lock is let go.

The scheduler calls its enactor in the middle of planning (a VM reservation starts: start its VMs). The
daemon gives it an `IntentCollector`, which only writes down what was asked; once the plan is committed,
each `Intent` becomes an entry of the store's intent log and a job for the operation runner, which calls
the real enactor on a copy of the lease taken at that moment (the plan in memory goes on changing while
the operation runs). A failure is handed back to the scheduler as if the operation had failed in the step.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime

from orchestrator.model.lease import Lease
from orchestrator.model.reservations import Reservation
from orchestrator.planning.enactment import Operation


#: the intent log's name for cleaning up after a finished lease
RELEASE = "release"
#: ... and for stopping a VM found running where its lease has none (a host that answers again)
STRAY = "stop-stray"


@dataclass(frozen=True)
class IntentTag:
    """What an operation runner's job is, to take its outcome: an intent-log entry of a lease (and its
    reservation)."""

    record: int
    operation: str
    lease_id: int
    reservation_id: int | None = None
    where: tuple[str, str] | None = None   # a stray's (host, VM)
    due: datetime | None = None              # when the step asked for it (a silent host has until then + timeout)


@dataclass(frozen=True)
class Intent:
    operation: Operation
    lease: Lease          # a copy: what the plan said when the operation was asked for
    reservation: Reservation

    @property
    def hosts(self) -> frozenset[str]:
        """Every host the operation may touch: where its VMs are and go, and where their images move."""
        return frozenset(reservation_hosts(self.reservation))


def reservation_hosts(rr: Reservation) -> set[str]:
    """Where the reservation's VMs are, go, and where their images move: its hosts, its transfers', its VM
    reservation's, and, for a VM reservation its VMs reach by migrating, where they come from (a lease
    cancelled before its evacuation's switch-over runs there still: its kill must wait for that host's
    operations, and a start there for the kill)."""
    hosts = set(rr.resources) | set(rr.nodes.values())
    for part in (rr, *rr.pre):
        for src, dst in part.transfers.values():
            hosts.update((src, dst))
    if rr.vm is not None:
        hosts.update(rr.vm.nodes.values())
    return hosts


def snapshot(lease: Lease, rr: Reservation) -> tuple[Lease, Reservation]:
    """A deep copy of the lease and the same reservation within it (found by identity, then by id)."""
    memo: dict[int, object] = {}
    lease_copy = copy.deepcopy(lease, memo)
    rr_copy = memo.get(id(rr))
    if rr_copy is None:   # (a reservation no longer in the lease's plan: copy it alone)
        rr_copy = copy.deepcopy(rr, memo)
    return lease_copy, rr_copy  # type: ignore[return-value]


class IntentCollector:
    """An `Enactor` that enacts nothing and remembers what it was asked, in order."""

    def __init__(self) -> None:
        self._intents: list[Intent] = []

    def take(self) -> list[Intent]:
        out, self._intents = self._intents, []
        return out

    def _ask(self, operation: Operation, lease: Lease, rr: Reservation) -> None:
        lease_copy, rr_copy = snapshot(lease, rr)
        self._intents.append(Intent(operation, lease_copy, rr_copy))

    def start_vms(self, lease: Lease, rr: Reservation) -> None:
        self._ask(Operation.START_VMS, lease, rr)

    def stop_vms(self, lease: Lease, rr: Reservation) -> None:
        self._ask(Operation.STOP_VMS, lease, rr)

    def suspend_vms(self, lease: Lease, rr: Reservation) -> None:
        self._ask(Operation.SUSPEND_VMS, lease, rr)

    def resume_vms(self, lease: Lease, rr: Reservation) -> None:
        self._ask(Operation.RESUME_VMS, lease, rr)

    def migrate_images(self, lease: Lease, rr: Reservation) -> None:
        self._ask(Operation.MIGRATE_IMAGES, lease, rr)

    def live_migrate(self, lease: Lease, rr: Reservation) -> None:
        self._ask(Operation.LIVE_MIGRATE, lease, rr)

    def kill_vms(self, lease: Lease, rr: Reservation) -> None:
        self._ask(Operation.KILL_VMS, lease, rr)
