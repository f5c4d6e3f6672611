"""The API's requests and answers as named, typed fields (pydantic, as FastAPI takes them), so
`/openapi.json` says exactly what the service accepts; the CLI's client and the tests build the same
models.

Each field's value is checked by the service's own check of it (`lease_fields.check_field` for a lease,
`orchestrator.model` and `service.inputs` for the rest), so a bad value sent as JSON gets the very words a
lease file or `lease submit` gets for it; the constraints the schema states (ranges, lengths, patterns,
enums) are then checked by pydantic too, and are those checks' bounds. A bad request is one line, turned
from pydantic's errors by `error_line`.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr
from pydantic import model_validator
from pydantic import ValidationError

from orchestrator.model.errors import InvalidRequest, shown
from orchestrator.model.images import IMAGE_FORMATS
from orchestrator.model.lease import MAX_DIRTY_RATE_MIB_S
from orchestrator.model.lease_fields import (
    KEYS,
    MAX_CPUS,
    MAX_DISK_MIB,
    MAX_INLINE_KEYS,
    MAX_KEY_BYTES,
    MAX_NAME,
    MAX_PATH,
    MAX_TEXT,
    MAX_USER_DATA_BYTES,
    check_field,
    check_keys,
)
from orchestrator.model.numbers import MAX_WHOLE, parse_decimal, parse_whole
from orchestrator.model.placement import MAX_PROPERTIES, check_property_key, properties_of
from orchestrator.service.inputs import check_image_request
from orchestrator.state.tokens import MAX_NOTE
from orchestrator.model.timeutil import MAX_DURATION, duration_from_seconds, parse_duration, parse_time

#: characters no name may hold, as a JSON-schema pattern can say them (controls, the common format and
#: bidi characters, line and paragraph separators); the service refuses every Cc, Cf, Zl and Zp character
NO_CONTROLS = ("\\u0000-\\u001f\\u007f-\\u009f\\u00ad\\u061c\\u180e\\u200b-\\u200f\\u2028-\\u202e"
               "\\u2060-\\u2064\\u2066-\\u206f\\ufeff\\ufff9-\\ufffb")
PRINTABLE = f"^[^{NO_CONTROLS}]*$"
ABSOLUTE_PATH = f"^/[^{NO_CONTROLS}]*$"
#: a user name: no spaces, no '@', not an option
USER_NAME = f"^[^\\s@\\-{NO_CONTROLS}][^\\s@{NO_CONTROLS}]*$"
_NUMBER = r"([0-9]+(\.[0-9]*)?|\.[0-9]+)"
DURATION = (rf"^(({_NUMBER}[dhms])*{_NUMBER}?|[0-9]+:[0-5]?[0-9]|[0-9]+:[0-5]?[0-9]:[0-5]?[0-9]"
            r"|[0-9]+:([01]?[0-9]|2[0-3]):[0-5]?[0-9]:[0-5]?[0-9])$")
TIME = (r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?"
        r"([Zz]|[+-][0-9]{2}:?[0-9]{2})$")
SIZE = r"^[0-9]+(\.[0-9]+)? ?([KMGTkmgt]([iI]?[bB])?)?$"
HOSTNAME_PREFIX = r"^[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?$"
#: an idempotency key (the `Idempotency-Key` header): printable ASCII
IDEMPOTENCY_KEY = r"^[\x21-\x7e]{1,255}$"
MAX_LEASE_ID = 2**63 - 1


def _checked(key: str, kinds: tuple[type, ...], kind_words: str) -> BeforeValidator:
    """The value of lease field `key`: of a JSON type in `kinds` (a bool is no number), then as the service
    checks it (`check_field`), else one `InvalidRequest` in the service's words."""

    def check(value: Any) -> Any:
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise InvalidRequest(key, f"must be {kind_words} (got {shown(value)})")
        if isinstance(value, list) and not all(isinstance(v, str) for v in value):
            raise InvalidRequest(key, f"must be {kind_words} (got a list of other things)")
        check_field(key, value)
        return value

    return BeforeValidator(check)


_WHOLE = "a whole number"
Nodes = Annotated[StrictInt, Field(ge=1, le=MAX_WHOLE, description="How many VMs (default 1)"),
                  _checked("nodes", (int,), _WHOLE)]
Cpus = Annotated[StrictInt, Field(ge=1, le=MAX_CPUS, description="vCPUs of each VM"), _checked("cpus", (int,), _WHOLE)]
Memory = Annotated[StrictInt, Field(ge=1, le=MAX_WHOLE, description="Memory of each VM, MiB"),
                   _checked("memory", (int,), _WHOLE)]
Seconds = (Annotated[StrictInt, Field(gt=0, le=int(MAX_DURATION.total_seconds()))]
           | Annotated[StrictFloat, Field(gt=0, le=MAX_DURATION.total_seconds())])
DurationText = Annotated[StrictStr, Field(min_length=1, max_length=64, pattern=DURATION)]
Duration = Annotated[Seconds | DurationText, Field(description="Run time: seconds, or 90s, 15m, 2h, 1h30m, 01:30:00"),
                     _checked("duration", (int, float, str), "a duration such as 90s, 15m, 2h or 01:30:00")]
Start = Annotated[Literal["now", "earliest"] | Annotated[StrictStr, Field(max_length=40, pattern=TIME)],
                  Field(description="Omit: best-effort; 'now': immediate; an ISO 8601 time with its offset: "
                                    "advance reservation; 'earliest': an advance reservation at the earliest "
                                    "time it fits (between not_before and not_after)"),
                  _checked("start", (str,), "an ISO 8601 time, 'now' or 'earliest'")]


def _window_time(key: str, description: str) -> Any:
    return Annotated[StrictStr, Field(max_length=40, pattern=TIME, description=description),
                     _checked(key, (str,), "an ISO 8601 time")]
LeaseKind = Annotated[Literal["advance-reservation", "best-effort", "immediate", "AR", "BE", "IM"],
                      Field(description="Optional: inferred from start; when given, must agree with it"),
                      _checked("type", (str,), "advance-reservation, best-effort or immediate")]


def _text(key: str, max_length: int, pattern: str = PRINTABLE, description: str = "") -> Any:
    return Annotated[StrictStr, Field(min_length=1, max_length=max_length, pattern=pattern, description=description),
                     _checked(key, (str,), "text")]


def _flag(key: str, description: str) -> Any:
    return Annotated[StrictBool, Field(description=description), _checked(key, (bool,), "true or false")]


DirtyRate = Annotated[Annotated[StrictInt, Field(ge=0, le=int(MAX_DIRTY_RATE_MIB_S))]
                      | Annotated[StrictFloat, Field(ge=0, le=MAX_DIRTY_RATE_MIB_S)], Field(description="MiB/s"),
                      _checked("dirty_rate", (int, float), "a number")]
DiskSize = Annotated[Annotated[StrictInt, Field(ge=1, le=MAX_DISK_MIB)]
                     | Annotated[StrictStr, Field(min_length=1, max_length=32, pattern=SIZE)],
                     Field(description="Each VM's own disk grown to this size: MiB, or 20G, 512M"),
                     _checked("disk_size", (int, str), "a size such as 20G, 512M or 2048 (MiB)")]
SshKeys = Annotated[list[Annotated[StrictStr, Field(min_length=1, max_length=MAX_KEY_BYTES)]],
                    Field(min_length=1, max_length=MAX_INLINE_KEYS, description="Public key lines (OpenSSH)"),
                    _checked("ssh_key", (list,), "a list of public key lines")]
UserData = Annotated[StrictStr, Field(min_length=1, max_length=MAX_USER_DATA_BYTES,
                                      description="A #cloud-config document, as cloud-init takes it"),
                     _checked("user_data", (str,), "a #cloud-config document")]

Constraints = Annotated[list[Annotated[StrictStr, Field(min_length=1, max_length=160)]],
                        Field(min_length=1, max_length=MAX_PROPERTIES,
                              description="Tests on host properties, all of which must hold: KEY=VALUE, "
                                          "KEY!=VALUE, KEY (has it) or !KEY (has it not)"),
                        _checked("where", (list,), "a list of constraints such as gpu=a100")]


class _Placed(BaseModel):
    """Where a lease's VMs may go (a submission's, or a free-window query's), and the size rule this brings:
    `cpus` and `memory` are required, but of an exclusive lease (then: its host's)."""

    model_config = ConfigDict(extra="forbid")

    where: Constraints = None   # type: ignore[assignment]
    spread: _flag("spread", "Each VM on a different host (anti-affinity)") = None   # type: ignore
    pack: _flag("pack", "The VMs on as few hosts as possible (affinity)") = None   # type: ignore
    exclusive: _flag("exclusive", "Each VM has a host to itself for the lease's whole time") = None   # type: ignore

    @model_validator(mode="before")
    @classmethod
    def _size_given(cls, values: Any) -> Any:
        if isinstance(values, dict) and values.get("exclusive") is not True:
            for key in ("cpus", "memory"):
                if values.get(key) is None:
                    raise InvalidRequest(key, "is required")
        return values


class LeaseSubmission(_Placed):
    """A lease request (`POST /v1/leases`), with the keys of a lease file: `ssh_key` holds public key
    lines and `user_data` the #cloud-config document itself (the server reads no file for anyone)."""

    model_config = ConfigDict(extra="forbid")

    type: LeaseKind = None   # type: ignore[assignment]
    nodes: Nodes = None   # type: ignore[assignment]
    cpus: Cpus = None   # type: ignore[assignment]   # (required, but for an exclusive lease: the host's)
    memory: Memory = None   # type: ignore[assignment]
    duration: Duration
    start: Start = None   # type: ignore[assignment]
    not_before: _window_time("not_before", "With start 'earliest': the earliest it may start (default now)") = None  # type: ignore
    not_after: _window_time("not_after", "With start 'earliest': the latest it may end (default: no limit)") = None  # type: ignore
    preemptible: _flag("preemptible", "May be suspended for reservations (default true)") = None   # type: ignore
    image: _text("image", MAX_PATH, description="A catalogued image's name, or (admins) a disk image's "   # type: ignore
                 "absolute path on the hosts") = None
    kernel: _text("kernel", MAX_PATH, ABSOLUTE_PATH, "Kernel for direct boot (admins)") = None   # type: ignore
    initrd: _text("initrd", MAX_PATH, ABSOLUTE_PATH, "Initrd for direct boot (admins)") = None   # type: ignore
    cmdline: _text("cmdline", MAX_TEXT["cmdline"], description="Kernel command line") = None   # type: ignore
    user: _text("user", MAX_TEXT["user"], USER_NAME, "Owner (default: the caller; others: admins)") = None  # type: ignore
    name: _text("name", MAX_NAME, description="A name to find it by") = None   # type: ignore
    dirty_rate: DirtyRate = None   # type: ignore[assignment]
    disk_size: DiskSize = None   # type: ignore[assignment]
    ssh_key: SshKeys = None   # type: ignore[assignment]
    user_data: UserData = None   # type: ignore[assignment]
    hostname_prefix: _text("hostname_prefix", 42, HOSTNAME_PREFIX, "VM n calls itself PREFIX-n") = None  # type: ignore
    network: _flag("network", "One NIC on the hosts' network (default true)") = None   # type: ignore
    keep_disks: _flag("keep_disks", "Keep the VMs' disks when the lease ends (default false)") = None  # type: ignore

    def values(self) -> dict[str, Any]:
        """The fields given, as `request_from_fields` takes them."""
        return {key: value for key, value in self.model_dump(exclude_none=True).items()}

    def fingerprint(self) -> str:
        """What was asked, as a hash: the same idempotency key must come with the same submission."""
        text = json.dumps(self.values(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


assert set(LeaseSubmission.model_fields) == set(KEYS), "the API's lease fields are the lease file's keys"


def submission_of(values: Mapping[str, Any], label: Callable[[str], str] = str, where: str | None = None) \
        -> LeaseSubmission:
    """A submission from typed values (None: not given), or one `InvalidRequest` naming `label(key)` (and
    `where`, a lease file) in the service's words: how the CLI makes the request it sends."""
    given = {k: v for k, v in values.items() if v is not None}
    check_keys(given, label, where)
    try:
        return LeaseSubmission.model_validate(_typed(given, label, where))
    except ValidationError as exc:
        field, problem = error_line(exc.errors())
        raise InvalidRequest(label(field) if field in KEYS else field, problem, where=where) from None


def _typed(values: dict[str, Any], label: Callable[[str], str], where: str | None) -> dict[str, Any]:
    """Values typed as JSON types them, from text or a YAML reader's types: whole numbers and the dirty
    rate read by the model's own readers, a lease type by its short or lower-case name, a time as ISO 8601."""
    out = dict(values)
    try:
        for key in ("nodes", "cpus", "memory"):
            if isinstance(out.get(key), (str, float)):
                out[key] = parse_whole(out[key], label(key))
        if isinstance(out.get("dirty_rate"), str):
            out["dirty_rate"] = parse_decimal(out["dirty_rate"], label("dirty_rate"), maximum=MAX_DIRTY_RATE_MIB_S)
    except InvalidRequest as exc:
        raise InvalidRequest(exc.field, exc.problem, where=where) from None
    for key in ("duration", "start", "disk_size", "type"):   # (text typed or read from YAML: spaces around)
        if isinstance(out.get(key), str):
            out[key] = out[key].strip()
    if isinstance(out.get("where"), str):   # (one constraint, as a lease file may give it)
        out["where"] = [out["where"]]
    kind = out.get("type")
    if isinstance(kind, str) and kind.strip().lower() in _CANONICAL_TYPES:
        out["type"] = _CANONICAL_TYPES[kind.strip().lower()]
    for key in ("start", "not_before", "not_after"):   # (a YAML reader's time, or text as typed)
        if isinstance(out.get(key), datetime):
            out[key] = out[key].isoformat()
        elif isinstance(out.get(key), str):
            out[key] = out[key].strip()
    if isinstance(out.get("start"), str) and out["start"].lower() in ("now", "earliest"):
        out["start"] = out["start"].lower()
    return out


_CANONICAL_TYPES = {"advance-reservation": "advance-reservation", "ar": "advance-reservation",
                    "best-effort": "best-effort", "be": "best-effort", "immediate": "immediate", "im": "immediate"}


# -- errors ------------------------------------------------------------------------------------------------------
_KIND_WORDS = {
    "int": "a whole number", "float": "a number", "bool": "true or false", "string": "text", "list": "a list",
    "dict": "an object", "model": "an object", "literal": "one of the values the schema lists", "missing": "",
}


def _field_of(error: Mapping[str, Any]) -> str:
    """The field an error is about, as `a.b` (a union's member types, a validator's function name and where
    the value was sent are no part of it)."""
    where = list(error.get("loc", ()))
    if where and where[0] in ("body", "query", "path", "header", "cookie"):   # (where it was sent)
        where = where[1:]
    loc = [f"[{p}]" if isinstance(p, int) else str(p) for p in where]
    loc = [p for p in loc if not p.startswith(("function-", "union[", "int", "float", "str", "bool", "literal[",
                                               "constrained-", "list[", "enum["))]
    return ".".join(loc).replace(".[", "[") if loc else "request"


def error_parts(error: Mapping[str, Any]) -> tuple[str, str]:
    """(field, problem) of one of pydantic's errors, in the service's words where the service's own check
    raised it."""
    field = _field_of(error)
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, InvalidRequest):
        return field if "." in field else cause.field, cause.problem
    kind = str(error.get("type", ""))
    got = error.get("input")
    if kind == "missing":
        return field, "is required"
    if kind == "extra_forbidden":
        return field, "unknown key"
    if kind in ("json_invalid", "json_type"):
        return "request", "is not a JSON object"
    if kind.endswith("_type") or kind.endswith("_parsing"):
        words = _KIND_WORDS.get(kind.split("_")[0], kind.split("_")[0])
        return field, f"must be {words} (got {shown(got)})"
    if kind == "string_pattern_mismatch":
        return field, f"{shown(got)} is not of the form the API takes (its pattern in /openapi.json)"
    message = str(error.get("msg", "is not valid")).rstrip(".")
    return field, f"{message[:1].lower()}{message[1:]} (got {shown(got)})"


def error_line(errors: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """The (field, problem) to answer a request pydantic refused with: its first field's error, and of a
    union's (a duration is seconds or text), the error of the member of the value's own type."""
    if not errors:
        return "request", "is not valid"
    place = _field_of(errors[0])
    same = [e for e in errors if _field_of(e) == place]
    closer = [e for e in same if not str(e.get("type", "")).endswith("_type")]
    return error_parts((closer or same)[0])


# -- the other requests ----------------------------------------------------------------------------------------
class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


_M = TypeVar("_M", bound=BaseModel)


def _duration_text(key: str) -> Any:
    """A positive duration: seconds, or text as `lease extend --by` takes it."""

    def check(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise InvalidRequest(key, f"must be a duration such as 30m (got {shown(value)})")
        amount = parse_duration(value, key) if isinstance(value, str) else duration_from_seconds(value, key)
        if amount.total_seconds() <= 0:
            raise InvalidRequest(key, f"must be greater than zero (got {shown(value)})")
        return value

    return Annotated[Seconds | DurationText, BeforeValidator(check)]


def _time_text(key: str) -> Any:
    def check(value: Any) -> Any:
        if not isinstance(value, str):
            raise InvalidRequest(key, f"must be an ISO 8601 time (got {shown(value)})")
        parse_time(value, key)
        return value

    return Annotated[StrictStr, Field(max_length=40, pattern=TIME), BeforeValidator(check)]


class Extension(_Body):
    """`POST /v1/leases/{id}/extend`: how much longer."""

    by: _duration_text("by")   # type: ignore[valid-type]


class Shortening(_Body):
    """`POST /v1/leases/{id}/shorten`: how much shorter (`by`), or the new planned end (`to`): one of them."""

    by: _duration_text("by") = None   # type: ignore[valid-type, assignment]
    to: _time_text("to") = None   # type: ignore[valid-type, assignment]

    @model_validator(mode="after")
    def _one_of_them(self) -> "Shortening":
        if (self.by is None) == (self.to is None):
            raise InvalidRequest("by", "give either by (how much shorter) or to (the new end), not both"
                                 if self.by is not None else "give by (how much shorter) or to (the new end)")
        return self


class EndChange(_Body):
    """`PATCH /v1/leases/{id}`: the lease's new planned end, earlier or later."""

    end: _time_text("end")   # type: ignore[valid-type]


#: the most windows `plan --free` lists at once
MAX_WINDOWS = 100


class FreeQuery(_Placed):
    """`GET /v1/free` (`plan --free`): the next windows in which a lease of this size would fit as an advance
    reservation, within [not_before, not_after]."""

    nodes: Nodes = 1   # type: ignore[assignment]
    cpus: Cpus = None   # type: ignore[assignment]   # (required, but for an exclusive lease: the host's)
    memory: Memory = None   # type: ignore[assignment]
    duration: Duration
    count: Annotated[StrictInt, Field(ge=1, le=MAX_WINDOWS, description="How many windows (default 5)")] = 5
    not_before: _window_time("not_before", "The earliest start (default now)") = None  # type: ignore
    not_after: _window_time("not_after", "The latest end (default: no limit)") = None  # type: ignore

    def values(self) -> dict[str, Any]:
        """The lease fields it asks about, as `request_from_fields` takes them."""
        return {**self.model_dump(exclude_none=True, exclude={"count"}), "start": "earliest"}


def model_of(model: type[_M], values: Mapping[str, Any], label: Callable[[str], str] = str) -> _M:
    """`model` from typed values (None: not given; numbers as text, as the CLI reads them), or one
    `InvalidRequest` naming `label(field)`: how the CLI makes the requests other than a submission."""
    given = {k: v for k, v in values.items() if v is not None}
    try:
        typed = _typed(given, label, None)
        for key in ("count",):
            if isinstance(typed.get(key), str):
                typed[key] = parse_whole(typed[key], label(key))
        return model.model_validate(typed)
    except InvalidRequest as exc:   # (a reader's: named with `label` already)
        raise InvalidRequest(label(exc.field) if exc.field in model.model_fields else exc.field, exc.problem) from None
    except ValidationError as exc:
        field, problem = error_line(exc.errors())
        raise InvalidRequest(label(field) if field in model.model_fields else field, problem) from None


class Drain(_Body):
    """`POST /v1/hosts/{host}/drain`: empty it by then (default: now)."""

    by: _time_text("by") = None   # type: ignore[valid-type, assignment]


HostName = Annotated[StrictStr, Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$",
                                      description="A short host name (one DNS label)")]
Path_ = Annotated[StrictStr, Field(min_length=1, max_length=MAX_PATH, pattern=ABSOLUTE_PATH)]
Text = Annotated[StrictStr, Field(min_length=1, max_length=MAX_PATH, pattern=PRINTABLE)]


def _properties(value: Any) -> Any:
    """A host's properties in the service's words (`orchestrator.model.placement`)."""
    return dict(properties_of(value, "properties"))


PropertyTable = Annotated[dict[StrictStr, StrictStr], BeforeValidator(_properties),
                          Field(description="Short names leases may ask for, e.g. {\"gpu\": \"a100\"}")]


class HostSettings(_Body):
    """A host's settings (an inventory's `[[host]]` table)."""

    name: HostName
    uri: Annotated[StrictStr, Field(min_length=1, max_length=MAX_PATH, pattern=r"^[A-Za-z][A-Za-z0-9+.-]*:[\x21-\x7e]*$",
                                    description="libvirt URI (sim://NAME: the simulated driver only)")]
    domain_type: Literal["kvm", "qemu"] = "kvm"
    ssh: Text | None = None
    ssh_key: Path_ | None = None
    known_hosts: Path_ | None = None
    migration_uri: Text | None = None
    state_dir: Path_ | None = None
    shared_storage: Annotated[list[Path_], Field(max_length=64)] = []
    network: Text | None = None
    network_type: Literal["bridge", "network"] = "bridge"
    disk_dir: Path_ | None = None
    peer_uri: Annotated[StrictStr | None, Field(min_length=1, max_length=MAX_PATH,
                                                pattern=r"^[A-Za-z][A-Za-z0-9+.-]*:[\x21-\x7e]*$",
                                                description="How the other hosts' libvirtd reach this one "
                                                            "(peer-to-peer live migration)")] = None
    peer_ssh_key: Annotated[Path_ | None, Field(description="The key, on this host, it copies memory images "
                                                            "to the other hosts with")] = None
    peer_known_hosts: Annotated[Path_ | None, Field(description="The other hosts' keys, on this host")] = None
    properties: PropertyTable = {}

    def values(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


def _property_keys(value: Any) -> Any:
    if not isinstance(value, list):
        raise InvalidRequest("unset", f"must be a list of property names (got {shown(value)})")
    return [check_property_key(key, "unset") for key in value]


class HostPropertyChange(_Body):
    """`PATCH /v1/hosts/{host}/properties` (`host set`): properties set (or replaced) and keys removed."""

    set: PropertyTable = {}
    unset: Annotated[list[StrictStr], BeforeValidator(_property_keys), Field(max_length=MAX_PROPERTIES)] = []


Timeout = Annotated[StrictInt | StrictFloat, Field(gt=0, le=3600, description="Seconds")]
Capacity = Annotated[StrictInt, Field(ge=1, le=MAX_WHOLE)]


class HostAddition(_Body):
    """`POST /v1/hosts`: one host; its capacity asked of libvirt unless given."""

    config: HostSettings
    cpus: Capacity | None = None
    memory: Capacity | None = None
    timeout: Timeout = 10.0


class HostImport(_Body):
    """`POST /v1/hosts/import`: an inventory's hosts (those known already are skipped)."""

    hosts: Annotated[list[HostSettings], Field(min_length=1, max_length=4096)]
    cpus: Capacity | None = None
    memory: Capacity | None = None
    timeout: Timeout = 10.0
    source: Annotated[StrictStr, Field(max_length=MAX_PATH, pattern=PRINTABLE)] = "the inventory"


def _image_format(value: Any) -> Any:
    """`image add --format`, in the words the service's own check uses."""
    if value not in IMAGE_FORMATS:
        raise InvalidRequest("--format", f"must be one of {', '.join(IMAGE_FORMATS)} (got {shown(value)})")
    return value


class ImageAddition(_Body):
    """`POST /v1/images`: a base image every host reads at `path`."""

    name: Annotated[StrictStr, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
    path: Path_
    format: Annotated[Literal["qcow2", "raw"], BeforeValidator(_image_format)] | None = None
    login_user: Annotated[StrictStr, Field(min_length=1, max_length=32, pattern=r"^[a-z_][a-z0-9_-]*$")] = "debian"
    os: Literal["linux", "other"] = "linux"
    kernel: Path_ | None = None
    initrd: Path_ | None = None
    cmdline: Annotated[StrictStr, Field(max_length=MAX_PATH, pattern=PRINTABLE)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _as_the_service_checks(cls, values: Any) -> Any:
        """The catalogue entry's own checks first, in the words `image add` gets."""
        if isinstance(values, dict) and all(isinstance(k, str) for k in values):
            known = {k: v for k, v in values.items() if k in cls.model_fields}
            check_image_request({**known, "format": known.get("format")})
        return values

    def values(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True) | {"format": self.format}


class ImageSync(_Body):
    """`POST /v1/images/{name}/sync`: copy a copied image to the hosts that lack it (or to `host` alone)."""

    host: HostName | None = None


class Migration(_Body):
    """`POST /v1/vms/{vm}/migrate`: one live migration by hand (admins)."""

    to: HostName
    max_downtime_ms: Annotated[StrictInt | StrictFloat, Field(gt=0, le=3_600_000)] = 300
    bandwidth_mib_s: Annotated[StrictInt | StrictFloat, Field(gt=0, le=1 << 20)] | None = None
    timeout_s: Annotated[StrictInt | StrictFloat, Field(gt=0, le=7 * 86400)] = 600
    on_timeout: Literal["abort", "force"] = "abort"


Amount = Annotated[StrictInt, Field(ge=0, le=MAX_WHOLE)]
Span = Annotated[StrictInt | StrictFloat, Field(ge=0, le=MAX_DURATION.total_seconds(), description="Seconds")]


class QuotaChange(_Body):
    """`PUT /v1/quotas/{subject}`: the limits to set (null removes one; absent: unchanged)."""

    vcpus: Amount | None = None
    memory_mib: Amount | None = None
    vms: Amount | None = None
    max_duration_s: Span | None = None
    max_ahead_s: Span | None = None

    def changes(self) -> dict[str, Any]:
        given = self.model_dump(exclude_unset=True)
        if not given:
            raise InvalidRequest("quota", "give at least one limit to set")
        return {(k[:-2] if k.endswith("_s") else k): (timedelta(seconds=v) if k.endswith("_s") and v is not None else v)
                for k, v in given.items()}


class TokenRequest(_Body):
    """`POST /v1/tokens`: a token for the caller (admins: for anyone, or an admin token)."""

    user: Annotated[StrictStr, Field(min_length=1, max_length=64, pattern=USER_NAME)] | None = None
    admin: StrictBool = False
    expires_s: Annotated[StrictInt | StrictFloat, Field(gt=0, le=MAX_DURATION.total_seconds())] | None = None
    note: Annotated[StrictStr, Field(max_length=MAX_NOTE, pattern=PRINTABLE)] = ""
