"""A lease as the API sends it: the store's record of it as named, typed fields (`rows.lease_record`), so a
client rebuilds the very `Lease` the store holds (`codec.lease_from_json`) and the schema says what each
field holds. Times are ISO 8601 UTC text; durations are seconds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, Field, create_model

from orchestrator.model.lease import LeaseType
from orchestrator.model.reservations import ReservationKind, ReservationState
from orchestrator.model.resources import Resources
from orchestrator.model.states import LeaseState
from orchestrator.service.models.requests import TIME

Number = int | float
Time = Annotated[str, Field(pattern=TIME, description="ISO 8601, UTC")]
# These three are made from the model's enums and `Resources`, so they cannot drift apart; a type checker,
# which cannot run that, reads them as what they hold.
if TYPE_CHECKING:
    LeaseStateValue = str
    LeaseTypeValue = str
    ResourcesRecord = Any
else:
    LeaseStateValue = Literal[tuple(s.value for s in LeaseState)]
    LeaseTypeValue = Literal[tuple(t.value for t in LeaseType)]
    ResourcesRecord = create_model("ResourcesRecord", __doc__="An amount of each resource: cpu in percent of one "
                                   "vCPU (200 = 2 vCPUs), memory and disk in MiB",
                                   **{name: (Number, 0) for name in Resources._fields})


class ImageRecord(BaseModel):
    """What the lease's VMs boot: a disk, or a kernel and initrd, or both; `name` when it is catalogued."""

    disk: str | None = None
    size_mib: Number = 0
    kernel: str | None = None
    initrd: str | None = None
    cmdline: str | None = None
    name: str | None = None
    format: str | None = None
    login_user: str | None = None


class GuestRecord(BaseModel):
    """The guest side of the request (cloud-init): keys, user-data, names, network, disks, MACs."""

    ssh_keys: list[str] = []
    user_data: str | None = None
    hostname_prefix: str | None = None
    network: bool = True
    disk_size_mib: int | None = None
    keep_disks: bool = False
    macs: list[str] = []


class PlacementRecord(BaseModel):
    """Where the lease's VMs may go: constraints on the hosts' properties (`KEY=VALUE`, `KEY!=VALUE`, `KEY`,
    `!KEY`), spread or pack, whole hosts."""

    where: list[str] = []
    affinity: Literal["spread", "pack"] | None = None
    exclusive: bool = False


class HistoryEntry(BaseModel):
    time: Time
    state: LeaseStateValue


class ReservationRecord(BaseModel):
    """One reservation of the lease's plan: a VM's, or a part of one (`vm_id`: the VM's; `position`: its
    place in the plan). `resources` per host, `nodes` {VM number: host}, `transfers` {VM number: [from, to]}."""

    id: int
    lease_id: int
    kind: Literal[tuple(k.value for k in ReservationKind)]   # type: ignore[valid-type]
    start: Time
    end: Time
    state: Literal[tuple(s.value for s in ReservationState)]   # type: ignore[valid-type]
    resources: dict[str, ResourcesRecord]
    nodes: dict[str, str]
    transfers: dict[str, Annotated[list[str], Field(min_length=2, max_length=2)]]
    vm_id: int | None
    position: int
    premature_end: Time | None
    continues: bool
    extra: dict[str, Any] = Field(description="What the scheduler noted of it (its kind's own fields)")


class LeaseRecord(BaseModel):
    """A lease: its request, its state and counters, its state history, its plan and its measured dirty
    rates ({VM number: MiB/s})."""

    id: int
    history: list[HistoryEntry]
    plan: list[ReservationRecord]
    dirty_rates: dict[str, Number]
    workload_id: str | None = None
    name: str | None
    user: str | None
    type: LeaseTypeValue
    preemptible: bool
    nodes: list[ResourcesRecord] = Field(description="Each VM's resources")
    duration_s: Number
    start: Time | None
    submit_time: Time | None
    image: ImageRecord | None
    dirty_rate: Number | None = Field(description="The memory dirty rate asked for, MiB/s")
    real_duration_s: Number | None = Field(description="How long its work takes (simulations)")
    guest: GuestRecord | None
    placement: PlacementRecord | None = None
    state: LeaseStateValue
    accumulated_s: Number | None = Field(description="How long it has run so far")
    reason: str
    suspensions: int
    migrations: int
    requeues: int
    start_time: Time | None
    end_time: Time | None


class LeasePage(BaseModel):
    """A page of leases by id, and `next`: the `after` of the following page (null: this is the last)."""

    leases: list[LeaseRecord]
    next: int | None
