"""The event log: what was planned, enacted, reported and reconciled, append-only."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from orchestrator.state.store.connection import StoreConnection
from orchestrator.state.store.errors import StoreError
from orchestrator.state.store.rows import decode_time, encode_json, encode_time


@dataclass(frozen=True)
class Event:
    """One entry of the event log; `detail` is its JSON data."""

    id: int
    time: datetime
    kind: str
    lease_id: int | None
    detail: dict[str, Any] = field(default_factory=dict)


_EVENT_COLUMNS = ("time", "lease_id", "kind", "detail")


def _event_row(time: datetime, kind: str, lease_id: int | None, detail: Mapping[str, Any]) -> tuple:
    if not isinstance(kind, str) or not kind.strip():
        raise StoreError(f"event kind must be a non-empty string (got {kind!r})")
    try:
        text = encode_json(detail)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"event {kind!r}: detail is not JSON data ({exc})") from None
    return encode_time(time), lease_id, kind, text


class EventLog(StoreConnection):
    """The events table, in the order events were appended."""

    def append_event(self, time: datetime, kind: str, lease_id: int | None = None, **detail: Any) -> int:
        """Append to the event log (planned, enacted, failed, driver-report, reconciled, ...); returns its id."""
        row = _event_row(time, kind, lease_id, detail)
        with self.statement():
            cur = self._conn.execute("INSERT INTO events (time, lease_id, kind, detail) VALUES (?, ?, ?, ?)", row)
        return self._inserted_id(cur)

    def append_events(self, events: Iterable[tuple[datetime, str, int | None, Mapping[str, Any]]]) -> None:
        """Append several events (time, kind, lease id, detail) in this order, in as few statements as
        SQLite allows: a step or a submission that logs many makes one trip into SQLite, not one each."""
        rows = [_event_row(time, kind, lease_id, detail) for time, kind, lease_id, detail in events]
        if rows:
            with self.statement() if self._one_statement(_EVENT_COLUMNS, rows) else self.transaction():
                self._insert_rows("events", _EVENT_COLUMNS, rows)

    def events(self, lease_id: int | None = None, since: datetime | None = None,
               after_id: int | None = None) -> list[Event]:
        """Events in the order they were appended; `since` keeps those at or after a time, `after_id`
        those appended after the event with that id (for following the log)."""
        clauses: list[str] = []
        params: list[Any] = []
        if lease_id is not None:
            clauses.append("lease_id = ?")
            params.append(lease_id)
        if since is not None:
            clauses.append("time >= ?")
            params.append(encode_time(since))
        if after_id is not None:
            clauses.append("id > ?")
            params.append(after_id)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._conn.execute(f"SELECT id, time, kind, lease_id, detail FROM events {where} ORDER BY id",
                                  params).fetchall()
        return [Event(id=i, time=decode_time(t), kind=k, lease_id=l, detail=json.loads(d))
                for i, t, k, l, d in rows]
