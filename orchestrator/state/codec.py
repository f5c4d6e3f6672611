"""A lease and an event as JSON, for the HTTP API's answers (their models, as the schema states them:
`orchestrator.service.models.responses`).

The server sends a lease as the store keeps it, as named fields (its columns, its history, its plan's
reservations: `rows.lease_record`), and the client rebuilds the same `Lease` with the store's own reader,
so nothing is lost and a command prints the same thing whether it read the store itself or asked a server.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, fields
from typing import Any

from drivers.base import MigrationReport
from orchestrator.model.errors import InvalidRequest
from orchestrator.model.images import CatalogImage
from orchestrator.model.lease import Lease
from orchestrator.state.store.errors import StoreError
from orchestrator.state.store.events import Event
from orchestrator.state.store.rows import (
    decode_time,
    encode_time,
    history_rows,
    lease_from_record,
    lease_record,
    lease_row,
    plan_rows,
)


def lease_to_json(lease: Lease) -> dict[str, Any]:
    return lease_record(lease_row(lease), history_rows(lease), plan_rows(lease), lease.measured_dirty_rates)


def lease_from_json(data: Mapping[str, Any]) -> Lease:
    try:
        return lease_from_record(data)
    except (KeyError, TypeError, ValueError, StoreError) as exc:
        raise InvalidRequest("lease", f"not a lease as the server sends one ({exc})") from None


def event_to_json(event: Event) -> dict[str, Any]:
    return {"id": event.id, "time": encode_time(event.time), "kind": event.kind, "lease_id": event.lease_id,
            "detail": event.detail}


def event_from_json(data: Mapping[str, Any]) -> Event:
    return Event(id=data["id"], time=decode_time(data["time"]), kind=data["kind"], lease_id=data["lease_id"],
                 detail=dict(data.get("detail") or {}))


def image_json(image: CatalogImage) -> dict[str, Any]:
    data = asdict(image)
    data["added_at"] = None if image.added_at is None else encode_time(image.added_at)
    return data


def image_from_json(data: Mapping[str, Any]) -> CatalogImage:
    values = {k: v for k, v in data.items() if k in {f.name for f in fields(CatalogImage)}}
    values["added_at"] = decode_time(values.get("added_at"))
    values["checksums"] = tuple(tuple(pair) for pair in values.get("checksums", ()))
    return CatalogImage(**values)


def migration_report_json(report: MigrationReport) -> dict[str, Any]:
    """A live migration's measured report as the API sends it (its progress samples left out)."""
    data = asdict(report)
    data.pop("samples", None)
    return data


def migration_report_from_json(data: Mapping[str, Any]) -> MigrationReport:
    return MigrationReport(**{k: v for k, v in data.items() if k in {f.name for f in fields(MigrationReport)}
                              and k != "samples"})
