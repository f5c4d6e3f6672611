"""The lease: what was asked for (type, nodes, resources, duration) and what happened to it so far.

A lease is mutable (state, accumulated run time, its reservations in the plan) but its request is not:
`LeaseRequest` is frozen and validated once, so every later component can trust it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from enum import Enum
from typing import TYPE_CHECKING

from orchestrator.model.errors import IllegalTransition, InvalidRequest
from orchestrator.model.guest import GuestSetup
from orchestrator.model.placement import Placement
from orchestrator.model.reservations import ReservationState
from orchestrator.model.resources import Resources
from orchestrator.model.states import FINAL_STATES, LeaseState, can_transition
from orchestrator.model.timeutil import ZERO, as_utc, end_of, iso

if TYPE_CHECKING:  # pragma: no cover
    from orchestrator.model.reservations import Reservation


#: the fastest a guest could dirty memory, MiB/s (1 TiB/s: above any memory bus); a larger dirty rate is a typo
MAX_DIRTY_RATE_MIB_S = 1024.0 * 1024.0


class LeaseType(str, Enum):
    ADVANCE_RESERVATION = "advance-reservation"  # exact start, strict end
    BEST_EFFORT = "best-effort"                  # as soon as possible, may be suspended
    IMMEDIATE = "immediate"                      # now or never

    def __str__(self) -> str:
        return self.value

    @property
    def short(self) -> str:
        return {"advance-reservation": "AR", "best-effort": "BE", "immediate": "IM"}[self.value]


def _init_values(value: object) -> tuple:
    """A dataclass's constructor arguments, in order."""
    return tuple(getattr(value, f.name) for f in fields(value) if f.init)   # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class VMImage:
    """What a VM boots: a disk image, or a kernel + initrd + command line (the lab's tiny guest), or both
    (a disk booted by direct kernel boot). `name` is the catalogue's name when the lease named an image."""

    disk: str | None = None
    size_mib: int | float = 0   # (an int stays one: see resources.Amount)
    kernel: str | None = None
    initrd: str | None = None
    cmdline: str | None = None
    name: str | None = None
    format: str | None = None           # qcow2 | raw; None: told by the file's suffix
    login_user: str | None = None       # who `lease ssh` logs in as

    # (immutable: a copy is the value itself, and a pickle is its constructor's arguments: compiled, a
    # frozen class's attributes cannot be set one by one after it is made, as copy and pickle would)
    def __copy__(self) -> VMImage:
        return self

    def __deepcopy__(self, memo: dict) -> VMImage:
        return self

    def __reduce__(self) -> tuple:
        return (VMImage, _init_values(self))


@dataclass(frozen=True, slots=True)
class LeaseRequest:
    """A validated request: `nodes` holds the resources of each virtual node, in order."""

    type: LeaseType
    nodes: tuple[Resources, ...]
    duration: timedelta
    submit_time: datetime
    start: datetime | None = None          # required for advance reservations, ignored otherwise
    preemptible: bool = True
    real_duration: timedelta | None = None  # simulation only: the lease really ends after this much run time
    image: VMImage | None = None
    user: str = ""
    name: str = ""
    dirty_rate_mib_s: int | float | None = None   # per-lease memory dirty rate for live-migration predictions
    guest: GuestSetup | None = None         # disk overlay, cloud-init, network (None: the image bare)
    #: an advance reservation at the earliest time it fits (`start` is then the earliest it may start, and
    #: `not_after` the latest it may end, None: no limit); once planned, the request has its start fixed
    earliest: bool = False
    not_after: datetime | None = None
    placement: Placement | None = None      # constraints on hosts, spread/pack, exclusive (None: none)

    #: derived once here, read on every scheduling attempt: all nodes added up, and the node size when
    #: every node is alike (None otherwise)
    total: Resources = field(default=Resources(), init=False, repr=False, compare=False)
    uniform: Resources | None = field(default=None, init=False, repr=False, compare=False)
    numnodes: int = field(default=0, init=False, repr=False, compare=False)

    # (immutable: see VMImage)
    def __copy__(self) -> LeaseRequest:
        return self

    def __deepcopy__(self, memo: dict) -> LeaseRequest:
        return self

    def __reduce__(self) -> tuple:
        return (LeaseRequest, _init_values(self))

    def __post_init__(self) -> None:
        if not self.nodes:
            raise InvalidRequest("nodes", "a lease needs at least one node")
        nodes = self.nodes
        first = nodes[0]
        count = len(nodes)
        if nodes.count(first) == count:   # (most leases: one node size, checked once, added up by multiplying)
            first.validate("nodes[0]")
            total = Resources(*(v * count if float(v).is_integer() and abs(v) * count < 2 ** 53
                                else sum(n[i] for n in nodes) for i, v in enumerate(first)))
            uniform = first
        else:
            checked = set()
            for i, node in enumerate(nodes):
                if node not in checked:
                    node.validate(f"nodes[{i}]")
                    checked.add(node)
            total = Resources(*(sum(n[i] for n in nodes) for i in range(5)))
            uniform = None
        object.__setattr__(self, "total", total)
        object.__setattr__(self, "uniform", uniform)
        object.__setattr__(self, "numnodes", len(self.nodes))
        if self.duration <= ZERO:
            raise InvalidRequest("duration", f"must be positive (got {self.duration})")
        object.__setattr__(self, "submit_time", as_utc(self.submit_time, "submit_time"))
        if self.type is LeaseType.ADVANCE_RESERVATION:
            if self.start is None:
                raise InvalidRequest("start", "an advance reservation needs a start time")
        if self.start is not None:
            object.__setattr__(self, "start", as_utc(self.start, "start"))
        self._check_window()
        end_of(self.start or self.submit_time, self.duration, "duration")   # it ends before the year 9999
        if self.real_duration is not None and self.real_duration <= ZERO:
            raise InvalidRequest("real_duration", f"must be positive (got {self.real_duration})")
        if self.dirty_rate_mib_s is not None and not 0 <= self.dirty_rate_mib_s <= MAX_DIRTY_RATE_MIB_S:
            raise InvalidRequest("dirty_rate", f"must be from 0 to {MAX_DIRTY_RATE_MIB_S:g} MiB/s "
                                               f"(got {self.dirty_rate_mib_s})")
        if self.guest is not None and self.guest.macs and len(self.guest.macs) != len(self.nodes):
            raise InvalidRequest("macs", f"one MAC per VM: {len(self.guest.macs)} for {len(self.nodes)} VMs")

    def _check_window(self) -> None:
        """An earliest start is an advance reservation's, and its window holds the whole lease."""
        if not self.earliest:
            if self.not_after is not None:
                raise InvalidRequest("not_after", "is for a lease that starts at the earliest time it fits "
                                                  "(start 'earliest')")
            return
        if self.type is not LeaseType.ADVANCE_RESERVATION:
            raise InvalidRequest("start", f"earliest is an advance reservation's start (not a {self.type}'s)")
        if self.not_after is not None:
            not_after = as_utc(self.not_after, "not_after")
            object.__setattr__(self, "not_after", not_after)
            assert self.start is not None
            if not_after - self.start < self.duration:
                raise InvalidRequest("not_after", f"{iso(not_after)} leaves less than the duration after "
                                                  f"the earliest start ({iso(self.start)})")

    @property
    def end(self) -> datetime | None:
        return None if self.start is None else self.start + self.duration

    @property
    def latest_start(self) -> datetime | None:
        """With an earliest start, the latest start that still ends by `not_after` (None: no limit)."""
        return None if self.not_after is None else self.not_after - self.duration


@dataclass(eq=False)
class Lease:
    """A lease in the system. Identity is the id; `history` keeps every (time, state) it went through."""

    id: int
    request: LeaseRequest
    state: LeaseState = LeaseState.NEW
    accumulated: timedelta = ZERO          # run time already done (leases suspended and resumed)
    history: list[tuple[datetime, LeaseState]] = field(default_factory=list)
    reservations: list["Reservation"] = field(default_factory=list)  # VM reservations, in plan order
    start_time: datetime | None = None     # first time its VMs ran
    end_time: datetime | None = None       # when it reached a final state
    reason: str = ""                       # why it was rejected / failed
    suspensions: int = 0
    requeues: int = 0
    migrations: int = 0
    # vnode -> MiB/s, as last measured on its host (the store keeps them; not part of the plan)
    measured_dirty_rates: dict[int, float] = field(default_factory=dict, compare=False, repr=False)
    #: vnode -> MiB its overlay on its host's own storage holds, as last measured (a block migration copies it)
    measured_disk_mib: dict[int, float] = field(default_factory=dict, compare=False, repr=False)

    # -- request shortcuts -------------------------------------------------------------------------
    @property
    def type(self) -> LeaseType:
        return self.request.type

    @property
    def numnodes(self) -> int:
        return self.request.numnodes

    @property
    def preemptible(self) -> bool:
        return self.request.preemptible

    @property
    def submit_time(self) -> datetime:
        return self.request.submit_time

    @property
    def total_request(self) -> Resources:
        return self.request.total

    @property
    def remaining(self) -> timedelta:
        """Requested run time not yet done."""
        return self.request.duration - self.accumulated

    @property
    def remaining_real(self) -> timedelta | None:
        """Run time until the lease really ends (simulation), when that is known."""
        if self.request.real_duration is None:
            return None
        return self.request.real_duration - self.accumulated

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES

    # -- state ---------------------------------------------------------------------------------------
    def set_state(self, target: LeaseState, at: datetime) -> None:
        """Move to `target`, refusing any edge the state table does not have."""
        if not can_transition(self.state, target):
            raise IllegalTransition(self.id, self.state, target)
        self.state = target
        self.history.append((at, target))
        if target in FINAL_STATES:
            self.end_time = at

    # -- plan ----------------------------------------------------------------------------------------
    @property
    def last_vm(self) -> "Reservation | None":
        return self.reservations[-1] if self.reservations else None

    def open_vms(self) -> list["Reservation"]:
        """The VM reservations not yet over, in plan order: usually the last one; two while the lease is
        being evacuated (the one running now on the old hosts, and its continuation on the new ones)."""
        out = []
        for vm in reversed(self.reservations[-2:]):
            if all(rr.state is ReservationState.DONE for rr in vm.all_parts()):
                break
            out.append(vm)
            if not (vm.continues and vm.pre):
                break
        return out[::-1]

    def image_hosts(self) -> dict[int, str]:
        """Where each VM's memory image is while the lease is suspended (vnode -> host): on the hosts of
        its last VM reservation, as moved by the image transfers done since (transfers done for a
        resumption that was then re-planned stay after the suspension whose images they moved)."""
        last = self.last_vm
        if last is None:
            return {}
        hosts = dict(last.nodes)
        for part in last.post:
            if part.state is ReservationState.DONE:
                for vnode, (_, destination) in part.transfers.items():
                    hosts[vnode] = destination
        return hosts

    @property
    def running_vm(self) -> "Reservation | None":
        """The VM reservation whose VMs run now, if any."""
        return next((vm for vm in reversed(self.open_vms()) if vm.state is ReservationState.ACTIVE), None)

    def __repr__(self) -> str:
        return f"<Lease {self.id} {self.type.short} {self.state} nodes={self.numnodes}>"
