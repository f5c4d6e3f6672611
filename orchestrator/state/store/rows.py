"""Row codecs: a lease, its request, history and plan as the store's rows, and back.

Times are stored as fixed-width ISO 8601 UTC text (`2026-01-01T13:00:00.000000Z`, so text order is time
order) and read back as aware UTC datetimes; durations as float seconds; resources, plans and images as
JSON. The same rows, as named fields (`lease_record`), are a lease's form on the wire
(`orchestrator.state.codec`), so a client rebuilds exactly what the store holds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import Any, overload

from orchestrator.model.guest import GuestSetup
from orchestrator.model.placement import Placement
from orchestrator.model.lease import Lease, LeaseRequest, LeaseType, VMImage
from orchestrator.model.reservations import Reservation, ReservationKind, ReservationState
from orchestrator.model.resources import Resources
from orchestrator.model.states import LeaseState
from orchestrator.model.timeutil import UTC, as_utc, iso, parse_time
from orchestrator.state.store.errors import StoreError


# -- values ----------------------------------------------------------------------------------------------------
@overload
def encode_time(value: datetime) -> str: ...
@overload
def encode_time(value: None) -> None: ...
@overload
def encode_time(value: datetime | None) -> str | None: ...
def encode_time(value: datetime | None) -> str | None:
    """Fixed-width ISO 8601 UTC text: always microseconds, so comparing the text compares the times."""
    if value is None:
        return None
    return as_utc(value).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@overload
def decode_time(text: str) -> datetime: ...
@overload
def decode_time(text: None) -> None: ...
@overload
def decode_time(text: str | None) -> datetime | None: ...
def decode_time(text: str | None) -> datetime | None:
    """A time as `encode_time` wrote it (fixed width, `Z`): read straight by `fromisoformat`; anything else
    is checked in full by `parse_time`. (A column that is never NULL gives a time, one that may be, a time
    or None.)"""
    if text is None:
        return None
    if len(text) == 27 and text[26] == "Z":
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            return parse_time(text)
        if value.tzinfo is UTC and 1970 <= value.year <= 9998:
            return value
    return parse_time(text)


def encode_seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


@overload
def decode_seconds(value: float) -> timedelta: ...
@overload
def decode_seconds(value: None) -> None: ...
@overload
def decode_seconds(value: float | None) -> timedelta | None: ...
def decode_seconds(value: float | None) -> timedelta | None:
    return None if value is None else timedelta(seconds=value)


def encode_resources(r: Resources) -> dict[str, float]:
    return dict(r._asdict())


def decode_resources(d: Mapping[str, float]) -> Resources:
    return Resources(**d)


def encode_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=_json_default)


def _json_default(value: Any) -> Any:
    """Event details may carry times, durations, enums and sets; everything else must be plain JSON."""
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def reservation_detail(rr: Reservation) -> dict[str, Any]:
    """A reservation as plain JSON data (the encoding of the reservations table), e.g. for a "planned" event."""
    return {
        "id": rr.id,
        "lease_id": rr.lease_id,
        "kind": rr.kind.value,
        "start": iso(rr.start),
        "end": iso(rr.end),
        "state": rr.state.value,
        "resources": {h: encode_resources(r) for h, r in rr.resources.items()},
        "nodes": {str(v): h for v, h in rr.nodes.items()},
        "transfers": {str(v): list(t) for v, t in rr.transfers.items()},
        **({"continues": True} if rr.continues else {}),
        **({"extra": rr.extra} if rr.extra else {}),
    }


# -- the lease tables' columns ----------------------------------------------------------------------------
#: the columns that hold the (immutable) request: a lease saved again must not change them
REQUEST_COLUMNS = ("name", "user", "type", "preemptible", "nodes", "duration_s", "start", "submit_time", "image",
                   "dirty_rate", "real_duration_s", "guest", "placement")
JSON_REQUEST_COLUMNS = ("nodes", "image", "guest", "placement")
STATE_COLUMNS = ("state", "accumulated_s", "reason", "suspensions", "migrations", "requeues", "start_time",
                 "end_time")
LEASE_COLUMNS = ("id", "workload_id") + REQUEST_COLUMNS + STATE_COLUMNS
RESERVATION_COLUMNS = ("id", "lease_id", "kind", "start", "end", "state", "resources", "nodes", "transfers",
                       "vm_id", "position", "premature_end", "continues", "extra")


def quoted(column: str) -> str:
    return f'"{column}"'


def json_value_sql(expr: str) -> str:
    """SQL making a column's value a JSON value as Python's `json` writes it: a real with 17 significant
    digits (SQLite's JSON keeps 15, which may read back as another float)."""
    return f"CASE typeof({expr}) WHEN 'real' THEN json(printf('%!.17g', {expr})) ELSE {expr} END"


# -- rows: a lease as the store keeps it (also its form on the wire: orchestrator.state.codec) ------------------
def request_row(req: LeaseRequest) -> tuple:
    """The request's values in `REQUEST_COLUMNS` order (JSON text for the JSON columns)."""
    return (
        req.name, req.user, req.type.value, int(req.preemptible),
        encode_json([encode_resources(n) for n in req.nodes]),
        encode_seconds(req.duration), encode_time(req.start), encode_time(req.submit_time),
        None if req.image is None else encode_json(_image_dict(req.image)),
        req.dirty_rate_mib_s, encode_seconds(req.real_duration),
        None if req.guest is None else encode_json(req.guest.as_dict()),
        None if req.placement is None else encode_json(req.placement.to_json()),
    )


def state_row(lease: Lease) -> tuple:
    return (
        lease.state.value, encode_seconds(lease.accumulated), lease.reason, lease.suspensions, lease.migrations,
        lease.requeues, encode_time(lease.start_time), encode_time(lease.end_time),
    )


def lease_row(lease: Lease, workload_id: str | None = None) -> tuple:
    """The lease's values in `LEASE_COLUMNS` order."""
    return (lease.id, workload_id, *request_row(lease.request), *state_row(lease))


def plan_rows(lease: Lease) -> list[tuple]:
    """The lease's plan, one row per reservation in `RESERVATION_COLUMNS` order, in plan order; refuses a plan
    that could not be read back (a part without an id, an id twice, a part of another lease)."""
    rows = []
    position = 0
    seen: set[int] = set()
    for vm in lease.reservations:
        for part in vm.all_parts():
            if not part.id:
                raise StoreError(f"lease {lease.id}: a {part.kind.value} reservation has no id "
                                 f"(it never went through the slot table)")
            if part.id in seen:
                raise StoreError(f"lease {lease.id}: reservation id {part.id} appears twice in its plan")
            if part.lease_id != lease.id:
                raise StoreError(f"lease {lease.id}: reservation {part.id} belongs to lease {part.lease_id}")
            seen.add(part.id)
            rows.append((part.id, lease.id, part.kind.value, encode_time(part.start), encode_time(part.end),
                         part.state.value,
                         encode_json({h: encode_resources(r) for h, r in part.resources.items()}),
                         encode_json({str(v): h for v, h in part.nodes.items()}),
                         encode_json({str(v): list(t) for v, t in part.transfers.items()}),
                         None if part is vm else vm.id, position, encode_time(part.premature_end),
                         int(part.continues), encode_json(part.extra)))
            position += 1
    return rows


def lease_from_rows(row: Sequence, history: Sequence[tuple[str, str]], plan: list[tuple],
                    dirty_rates: Mapping[int, float] | None = None) -> Lease:
    """A lease rebuilt from `lease_row`, its history as (time, state) texts and `plan_rows`."""
    lease = lease_from_row(tuple(row))
    lease.history = [(decode_time(at), LeaseState(state)) for at, state in history]
    lease.reservations = plan_from_rows([tuple(r) for r in plan])
    lease.measured_dirty_rates = dict(dirty_rates or {})
    return lease


def history_rows(lease: Lease) -> list[tuple[str, str]]:
    return [(encode_time(at), state.value) for at, state in lease.history]


# -- records: a lease's rows as named fields (its form on the wire: orchestrator.state.codec) ------------------
#: the reservation columns that hold JSON text, sent as JSON values
JSON_RESERVATION_COLUMNS = ("resources", "nodes", "transfers", "extra")
#: columns that hold 0 or 1, sent as false or true
_LEASE_FLAGS = ("preemptible",)
_RESERVATION_FLAGS = ("continues",)


def _named(columns: Sequence[str], row: Sequence, json_columns: Sequence[str], flags: Sequence[str]) -> dict[str, Any]:
    record = dict(zip(columns, row))
    for column in json_columns:
        if record[column] is not None:
            record[column] = json.loads(record[column])
    for column in flags:
        record[column] = bool(record[column])
    return record


def lease_record(row: Sequence, history: Sequence[Sequence[str]], plan: Sequence[Sequence],
                 dirty_rates: Mapping[int, float] | Mapping[str, float]) -> dict[str, Any]:
    """A lease's rows as one record of named fields: its columns (the JSON ones as JSON values, flags as
    booleans), `history` [{time, state}], `plan` (the reservations' columns, in plan order) and `dirty_rates`
    {vnode: MiB/s}. `lease_from_record` reads it back."""
    record = _named(LEASE_COLUMNS, row, JSON_REQUEST_COLUMNS, _LEASE_FLAGS)
    record["history"] = [{"time": at, "state": state} for at, state in history]
    record["plan"] = [_named(RESERVATION_COLUMNS, rr, JSON_RESERVATION_COLUMNS, _RESERVATION_FLAGS) for rr in plan]
    record["dirty_rates"] = {str(v): r for v, r in dirty_rates.items()}
    return record


def lease_from_record(record: Mapping[str, Any]) -> Lease:
    """The lease a `lease_record` holds, rebuilt by the store's own reader (`KeyError`, `TypeError`,
    `ValueError` or `StoreError` for a record that is not one)."""
    # (its JSON columns are JSON values already: read as they are, not written out and parsed again)
    lease = _lease_from_values(record, _as_is)
    lease.history = [(decode_time(h["time"]), LeaseState(h["state"])) for h in record["history"]]
    lease.reservations = _plan_from_values(record["plan"], _as_is)
    lease.measured_dirty_rates = {int(v): float(r) for v, r in (record.get("dirty_rates") or {}).items()}
    return lease


def _as_is(value: Any) -> Any:
    return value


def lease_record_sql(lease: str = "l") -> str:
    """SQL making `lease_record` of the lease row `lease` as JSON text, as Python's `json` writes it (see
    `json_value_sql`): its id, its history, plan and dirty rates, each an ordered subquery (SQLite 3.40 has
    no ORDER BY inside an aggregate) joined as text (a subquery's JSON would otherwise be parsed again), then
    its other columns by `json_object` (its opening brace cut off)."""

    def value(expr: str, column: str, json_columns: Sequence[str], flags: Sequence[str]) -> str:
        if column in json_columns:
            return f"json({expr})"
        if column in flags:
            return f"json(CASE WHEN {expr} THEN 'true' ELSE 'false' END)"
        return json_value_sql(expr)

    columns = ", ".join(f"'{c}', {value(f'{lease}.{quoted(c)}', c, JSON_REQUEST_COLUMNS, _LEASE_FLAGS)}"
                        for c in LEASE_COLUMNS if c != "id")
    plan = ", ".join(f"'{c}', {value(f'r.{quoted(c)}', c, JSON_RESERVATION_COLUMNS, _RESERVATION_FLAGS)}"
                     for c in RESERVATION_COLUMNS)
    return (
        f"'{{\"id\":' || {lease}.id || "
        "',\"history\":' || (SELECT json_group_array(json_object('time', h.time, 'state', h.state)) FROM "
        f"(SELECT time, state FROM lease_states WHERE lease_id = {lease}.id ORDER BY seq) AS h) || "
        f"',\"plan\":' || (SELECT json_group_array(json_object({plan})) FROM "
        f"(SELECT * FROM reservations WHERE lease_id = {lease}.id ORDER BY position) AS r) || "
        "',\"dirty_rates\":' || (SELECT json_group_object(CAST(d.vnode AS TEXT), "
        f"{json_value_sql('d.mib_s')}) FROM dirty_rates AS d WHERE d.lease_id = {lease}.id) || "
        f"',' || substr(json_object({columns}), 2)")


# -- rebuilding -----------------------------------------------------------------------------------------------
def _image_dict(image: VMImage) -> dict[str, Any]:
    found = {"disk": image.disk, "size_mib": image.size_mib, "kernel": image.kernel, "initrd": image.initrd,
             "cmdline": image.cmdline}
    # the catalogue's fields only when set, so leases stored before them compare equal
    found.update({k: v for k in ("name", "format", "login_user") if (v := getattr(image, k)) is not None})
    return found


def lease_from_row(row: tuple) -> Lease:
    return _lease_from_values(dict(zip(LEASE_COLUMNS, row)), json.loads)


def _lease_from_values(values: Mapping[str, Any], load: Callable[[Any], Any]) -> Lease:
    """A lease from its columns by name, `load` reading a JSON column (its text from a row, its value as is
    from a record)."""
    image = values["image"]
    request = LeaseRequest(
        type=LeaseType(values["type"]),
        nodes=tuple(decode_resources(n) for n in load(values["nodes"])),
        duration=decode_seconds(values["duration_s"]),
        submit_time=decode_time(values["submit_time"]),
        start=decode_time(values["start"]),
        preemptible=bool(values["preemptible"]),
        real_duration=decode_seconds(values["real_duration_s"]),
        image=None if image is None else VMImage(**load(image)),
        user=values["user"],
        name=values["name"],
        dirty_rate_mib_s=values["dirty_rate"],
        guest=None if values["guest"] is None else GuestSetup.from_dict(load(values["guest"])),
        placement=None if values["placement"] is None else Placement.from_json(load(values["placement"])),
    )
    return Lease(
        id=values["id"], request=request, state=LeaseState(values["state"]),
        accumulated=decode_seconds(values["accumulated_s"]), start_time=decode_time(values["start_time"]),
        end_time=decode_time(values["end_time"]), reason=values["reason"], suspensions=values["suspensions"],
        requeues=values["requeues"], migrations=values["migrations"],
    )


def plan_from_rows(rows: list[tuple]) -> list[Reservation]:
    """VM reservations in plan order, each with its pre (parts placed before it) and post (after it) parts."""
    return _plan_from_values([dict(zip(RESERVATION_COLUMNS, row)) for row in rows], json.loads)


def _plan_from_values(plan: Sequence[Mapping[str, Any]], load: Callable[[Any], Any]) -> list[Reservation]:
    vms: dict[int, tuple[Reservation, int]] = {}
    order: list[Reservation] = []
    parts: list[tuple[Reservation, int, int]] = []
    for v in plan:
        rr = Reservation(
            lease_id=v["lease_id"], kind=ReservationKind(v["kind"]), start=decode_time(v["start"]),
            end=decode_time(v["end"]),
            resources={h: decode_resources(r) for h, r in load(v["resources"]).items()},
            nodes={int(k): h for k, h in load(v["nodes"]).items()},
            transfers={int(k): (t[0], t[1]) for k, t in load(v["transfers"]).items()},
            state=ReservationState(v["state"]), id=v["id"], premature_end=decode_time(v["premature_end"]),
            continues=bool(v["continues"]), extra=load(v["extra"]),
        )
        if v["vm_id"] is None:
            vms[rr.id] = (rr, v["position"])
            order.append(rr)
        else:
            parts.append((rr, v["vm_id"], v["position"]))
    for rr, vm_id, position in parts:   # rows come in plan order, so pre and post keep their order
        if vm_id not in vms:
            raise ValueError(f"reservation {rr.id} belongs to VM reservation {vm_id}, which is missing")
        vm, vm_position = vms[vm_id]
        rr.vm = vm
        (vm.pre if position < vm_position else vm.post).append(rr)
    return order

