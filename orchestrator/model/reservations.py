"""Reservations: the entries of the plan. Each holds resources on one or more hosts over [start, end).

A VM reservation owns its overheads: `pre` (resumptions, in order) and `post` (shutdown or suspensions),
planned as reservations of their own so they hold capacity like anything else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum

from orchestrator.model.resources import Resources


class ReservationKind(str, Enum):
    VM = "vm"
    SUSPEND = "suspend"
    RESUME = "resume"
    SHUTDOWN = "shutdown"
    MIGRATE = "migrate"              # cold transfer of a suspended lease's memory images
    LIVE_MIGRATE = "live-migrate"    # pre-copy live migration of running VMs
    UNAVAILABLE = "unavailable"      # a drained host, held whole from the drain on (no lease)

    def __str__(self) -> str:
        return self.value


class ReservationState(str, Enum):
    SCHEDULED = "scheduled"
    ACTIVE = "active"
    DONE = "done"

    def __str__(self) -> str:
        return self.value


@dataclass(eq=False, slots=True)
class Reservation:
    """Capacity held on hosts over the half-open interval [start, end).

    `resources` maps host -> amount held there. For VM reservations `nodes` maps each virtual node
    (index into the lease's nodes) to its host; for suspend/resume it lists the vnodes concerned;
    `transfers` maps vnode -> (source host, destination host) for migrations.
    """

    lease_id: int
    kind: ReservationKind
    start: datetime
    end: datetime
    resources: dict[str, Resources]
    nodes: dict[int, str] = field(default_factory=dict)
    transfers: dict[int, tuple[str, str]] = field(default_factory=dict)
    state: ReservationState = ReservationState.SCHEDULED
    id: int = 0                                   # assigned by the slot table
    pre: list["Reservation"] = field(default_factory=list)
    post: list["Reservation"] = field(default_factory=list)
    vm: "Reservation | None" = None               # the VM reservation an overhead belongs to
    premature_end: datetime | None = None         # simulation: when the lease really ends inside this VM rr
    #: a VM reservation whose VMs are already running when it starts (they were live-migrated into it)
    continues: bool = False
    #: kind-specific data kept with the plan, e.g. a live migration's predictions and deadline
    extra: dict = field(default_factory=dict)

    @property
    def hosts(self) -> list[str]:
        return sorted(self.resources)

    @property
    def duration(self) -> timedelta:
        return self.end - self.start

    @property
    def final_end(self) -> datetime:
        """End of the VM reservation including what follows it (shutdown or suspension)."""
        return self.post[-1].end if self.post else self.end

    @property
    def first_start(self) -> datetime:
        """Start including the resumptions that precede it."""
        return self.pre[0].start if self.pre else self.start

    @property
    def is_suspending(self) -> bool:
        return bool(self.post) and self.post[0].kind is ReservationKind.SUSPEND

    def all_parts(self) -> list["Reservation"]:
        """Pre-overheads, the VM reservation itself, post-overheads, in time order."""
        return [*self.pre, self, *self.post]

    def __repr__(self) -> str:
        return (f"<{self.kind} rr#{self.id} lease {self.lease_id} {self.start:%H:%M:%S}-{self.end:%H:%M:%S} "
                f"on {','.join(self.hosts)}>")
