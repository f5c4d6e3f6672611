"""The API's answers as named, typed fields: each route declares its model (`response_model`), so
`/openapi.json` states what every answer holds, and the CLI reads every answer, from a server or from its
own store, through the same model (`shaped`), so its views have one input.

Times are ISO 8601 UTC text; durations are seconds. A field a model leaves optional with a default may be
absent (an answer holds the fields its use case gave: `host list` has `reachable` only where hosts were
asked).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, Field

from drivers.base import CheckStatus
from orchestrator.service.models.leases import LeaseRecord, LeaseStateValue, LeaseTypeValue, Number, Time

M = TypeVar("M", bound=BaseModel)


def shaped(model: type[M], data: Any) -> dict[str, Any]:
    """`data` read through `model` and given back as JSON data: the fields it holds, in the model's order and
    types (`ValidationError` for data that is not such an answer)."""
    return model.model_validate(data).model_dump(mode="json", exclude_unset=True)


def conforming(model: type[M], data: Any) -> Any:
    """`data` itself once `model` takes it as it is (strictly: nothing converted), for the answers that may
    hold many leases or events, which the client rebuilds at once (`ValidationError` for data that is not
    such an answer)."""
    model.model_validate(data, strict=True)
    return data


# -- errors and the caller ----------------------------------------------------------------------------------------
class ErrorDetail(BaseModel):
    code: int = Field(description="The CLI's exit code for it (2 bad input, 3 refused, 4 not allowed, 75 busy)")
    message: str = Field(description="One line naming the field and the problem")
    field: str | None = Field(None, description="Bad input: the field it is about")
    problem: str | None = Field(None, description="Bad input: what is wrong with it")


class ErrorBody(BaseModel):
    error: ErrorDetail


class Whoami(BaseModel):
    user: str
    admin: bool
    groups: list[str]
    via: Literal["unix", "token", "local"]


class Health(BaseModel):
    ok: bool
    time: Time = Field(description="The server's clock")


# -- leases ----------------------------------------------------------------------------------------------------------
class Preempted(BaseModel):
    """A lease a submission changed: suspended, requeued or moved."""

    id: int
    state: LeaseStateValue
    change: str = Field(description="What became of it, for people")
    at: Time | None = Field(description="When the change takes effect")


class SubmitAnswer(BaseModel):
    """What became of a submission (`lease submit --json`)."""

    id: int
    type: LeaseTypeValue
    state: LeaseStateValue
    start: Time | None
    end: Time | None
    suspended_at_end: bool
    hosts: list[str]
    reason: str
    preempted: list[Preempted]


class EventRecord(BaseModel):
    """One entry of the event log."""

    id: int
    time: Time
    kind: str
    lease_id: int | None
    detail: dict[str, Any] = Field(description="Its kind's own fields")


class EventList(BaseModel):
    events: list[EventRecord]


class AddressRecord(BaseModel):
    address: str
    prefix: int
    family: Literal["ipv4", "ipv6"]
    source: str = Field(description="Where it was learnt: agent, lease, arp, simulated")
    interface: str
    mac: str


class VMRecord(BaseModel):
    """One VM of a lease as its host sees it now."""

    vm: str
    node: int
    host: str | None
    state: str
    mac: str | None
    addresses: list[AddressRecord]
    login_user: str
    ssh: str | None = Field(description="The command that logs into it (null: no address yet)")
    dirty_rate_mib_s: Number | None


class LeaseShown(BaseModel):
    """`lease show`: the lease, its events, and its VMs (null: it has none on hosts, or they were not asked)."""

    lease: LeaseRecord
    events: list[EventRecord]
    vms: list[VMRecord] | None


class Cancelled(BaseModel):
    id: int
    was_running: bool
    hosts: list[str] = Field(description="Where its VMs ran (the daemon stops them)")


class Reshaped(BaseModel):
    """A lease made shorter (`shorten`) or given another end (`update`)."""

    id: int
    duration_s: Number = Field(description="Its whole run time now")
    end: Time | None = Field(description="Its planned end now")


class Extended(Reshaped):
    by_s: Number


class FreeWindow(BaseModel):
    start: Time
    latest_end: Time | None = Field(description="The latest end of a lease starting at `start` (null: none)")
    latest_start: Time | None = Field(description="The latest start in this window (null: none)")
    hosts: list[str] = Field(description="The hosts a lease starting at `start` would take")


class FreeWindows(BaseModel):
    """`plan --free`: when a lease of this size would fit as an advance reservation."""

    nodes: int
    cpus: int
    memory_mib: int
    duration_s: Number
    not_before: Time | None
    not_after: Time | None
    windows: list[FreeWindow]
    placement: str | None = Field(None, description="Where the lease may go (constraints; spread or pack; "
                                                    "exclusive), as `plan` shows it")


class AccessAnswer(BaseModel):
    """How to reach one VM of a lease: the VM, and the command that attaches to its console (or why there is
    none)."""

    vm: VMRecord
    console: list[str] | None
    console_error: str | None


class PlannedPair(BaseModel):
    lease: int
    reservation: int


class Plan(BaseModel):
    """The plan in a window: its hosts, the leases it holds, each (lease, reservation) meeting the window, and
    each lease's label ({lease id: label})."""

    hosts: list[str]
    leases: list[LeaseRecord]
    pairs: list[PlannedPair]
    labels: dict[str, str]


# -- hosts -------------------------------------------------------------------------------------------------------------
class HostRow(BaseModel):
    """A row of `host list`; `reachable` and what follows only where the hosts were asked (libvirt)."""

    name: str
    uri: str
    domain_type: str
    vcpus: int
    memory_mib: int
    available: bool
    leases_now: list[int]
    leases_planned: list[int]
    added_at: Time | None
    properties: dict[str, str] = Field({}, description="What leases may ask for with --where")
    reachable: bool | None = None
    hypervisor: str | None = None
    libvirt_version: str | None = None
    error: str | None = None


class HostPropertiesSet(BaseModel):
    """`host set`: the host's properties now."""

    host: str
    properties: dict[str, str]


class HostList(BaseModel):
    hosts: list[HostRow]


class HostAdded(BaseModel):
    name: str
    vcpus: int
    memory_mib: int
    source: str = Field(description="Where the capacity came from: given, or from libvirt")


class ImportedHost(BaseModel):
    name: str
    vcpus: int
    memory_mib: int


class HostsImported(BaseModel):
    added: list[ImportedHost]
    skipped: list[str] = Field(description="Hosts there already with the same settings")


class Requeued(BaseModel):
    """A lease a host's removal moved: planned elsewhere, or waiting (start, end, hosts null) for room."""

    id: int
    state: LeaseStateValue
    start: Time | None
    end: Time | None
    hosts: list[str] | None


class HostRemoved(BaseModel):
    host: str
    requeued: list[Requeued]


class CheckRow(BaseModel):
    check: str
    status: CheckStatus
    detail: str


class PairCheckRow(BaseModel):
    source: str
    destination: str
    check: str
    status: CheckStatus
    detail: str
    link_mib_s: float | None = Field(None, description="The peer link row: MiB/s the probe migration moved "
                                                       "(the pair's first learned rate)")


class HostChecked(BaseModel):
    """`host check`: the host's rows, and those of every pair of hosts with it (a live migration from
    `source` to `destination`)."""

    host: str
    uri: str
    checks: list[CheckRow]
    pairs: list[PairCheckRow]


class DrainedLease(BaseModel):
    id: int
    change: str = Field(description="What the drain does to it")


class Drained(BaseModel):
    host: str
    unavailable_from: Time
    leases: list[DrainedLease]


class Undrained(BaseModel):
    host: str


# -- images and migrations ------------------------------------------------------------------------------------------
class CatalogEntry(BaseModel):
    name: str
    path: str
    format: Literal["qcow2", "raw"]
    login_user: str
    os: Literal["linux", "other"]
    kernel: str | None
    initrd: str | None
    cmdline: str | None
    size_bytes: int = Field(description="The disk's virtual size")
    added_at: Time | None
    added_by: str
    checksums: list[Annotated[list[str], Field(min_length=2, max_length=2)]] = Field(
        [], description="[path, SHA-256] of each file copied to hosts' own storage ([]: on shared storage)")


class ListedImage(CatalogEntry):
    leases: list[int] = Field(description="The leases that use it")
    hosts: dict[str, Literal["copied", "shared"]] = Field(
        {}, description="For an image copied to hosts' own storage: the hosts holding it, and how")


class HostCopy(BaseModel):
    """What became of one host when an image was given to the hosts."""

    host: str
    outcome: Literal["shared", "held", "copied", "failed"] = Field(
        description="copied, held already, shared (read on storage it shares), or failed")
    detail: str


class ImageList(BaseModel):
    images: list[ListedImage]


class ImageAdded(CatalogEntry):
    hosts: int = Field(description="How many hosts hold it (copied to them, or read on shared storage)")
    copies: list[HostCopy] = Field([], description="Each host's outcome")


class ImageSynced(BaseModel):
    name: str
    copies: list[HostCopy]


class ImageRemoved(BaseModel):
    name: str


class MigrationRecord(BaseModel):
    """A live migration's measured report."""

    vm: str
    source: str
    destination: str
    success: bool
    total_seconds: Number
    downtime_ms: Number
    iterations: int
    bytes_transferred: int
    memory_total: int
    outcome: Literal["completed", "forced", "aborted", "failed"]
    error: str


class Migrated(BaseModel):
    report: MigrationRecord
    error: str | None = Field(description="Why it did not complete (the VM stays where it was)")


# -- quotas and tokens ------------------------------------------------------------------------------------------------
class Limits(BaseModel):
    """A quota's limits (null: unlimited)."""

    vcpus: int | None
    memory_mib: int | None
    vms: int | None
    max_duration_s: Number | None
    max_ahead_s: Number | None


class Amounts(BaseModel):
    vcpus: int
    memory_mib: int
    vms: int


class Left(BaseModel):
    """What may still be taken under each limit (null: unlimited)."""

    vcpus: int | None
    memory_mib: int | None
    vms: int | None


class QuotaSet(BaseModel):
    subject: str
    limits: Limits
    set_at: Time


class QuotaRow(BaseModel):
    subject: str
    limits: Limits
    holding: Amounts = Field(description="What its subject holds now (a group: its users together)")
    set_at: Time | None


class QuotaList(BaseModel):
    quotas: list[QuotaRow]


class AppliedQuota(BaseModel):
    subject: str
    limits: Limits
    holding: Amounts
    left: Left
    over: list[Literal["vcpus", "memory_mib", "vms"]] = Field(description="Limits already exceeded")


class QuotaShown(BaseModel):
    user: str
    groups: list[str]
    holding: Amounts
    quotas: list[AppliedQuota] = Field(description="The user's own quota and its groups' (empty: unlimited)")


class QuotaRemoved(BaseModel):
    subject: str


class TokenFields(BaseModel):
    id: int
    user: str
    admin: bool
    created_at: Time
    expires_at: Time | None
    revoked_at: Time | None
    last_used_at: Time | None
    note: str


class TokenMade(TokenFields):
    token: str = Field(description="The token itself: shown this once")


class ListedToken(TokenFields):
    state: Literal["active", "expired", "revoked"]


class TokenList(BaseModel):
    tokens: list[ListedToken]


class TokenRevoked(TokenFields):
    already: bool = Field(description="Whether it was revoked before")
