"""The intent log: operations on the hosts written before they run, and how each ended."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from orchestrator.state.store.connection import StoreConnection
from orchestrator.state.store.errors import StoreError
from orchestrator.state.store.rows import decode_time, encode_json, encode_time


@dataclass(frozen=True)
class OperationRecord:
    """An entry of the intent log: an operation on the hosts, and how it ended (None: it never did)."""

    id: int
    lease_id: int | None
    operation: str
    reservation_id: int | None
    hosts: tuple[str, ...]
    created_at: datetime
    finished_at: datetime | None = None
    outcome: str | None = None
    error: str | None = None


class OperationLog(StoreConnection):
    """The operations table. A daemon that starts again runs the operations that never ended once more."""

    def add_operation(self, at: datetime, operation: str, lease_id: int | None, reservation_id: int | None,
                      hosts: Iterable[str]) -> int:
        """Record an operation about to run on the hosts; returns its id (see the schema's `_V7`)."""
        with self.statement():
            cur = self._conn.execute(
                "INSERT INTO operations (lease_id, operation, reservation_id, hosts, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (lease_id, operation, reservation_id, encode_json(sorted(hosts)), encode_time(at)))
        return self._inserted_id(cur)

    def finish_operation(self, operation_id: int, at: datetime, outcome: str, error: str | None = None) -> None:
        if outcome not in ("done", "failed", "abandoned"):
            raise StoreError(f"operation {operation_id}: outcome must be done, failed or abandoned (got {outcome!r})")
        with self.statement():
            self._conn.execute("UPDATE operations SET finished_at = ?, outcome = ?, error = ? WHERE id = ?",
                               (encode_time(at), outcome, error, operation_id))

    def unfinished_operations(self) -> list[OperationRecord]:
        """Operations recorded as about to run that never ended (the process stopped meanwhile), oldest first."""
        rows = self._conn.execute("SELECT id, lease_id, operation, reservation_id, hosts, created_at FROM operations "
                                  "WHERE finished_at IS NULL ORDER BY id").fetchall()
        return [OperationRecord(i, l, o, r, tuple(json.loads(h)), decode_time(c)) for i, l, o, r, h, c in rows]

    def operations(self, lease_id: int | None = None) -> list[OperationRecord]:
        where, params = ("WHERE lease_id = ?", (lease_id,)) if lease_id is not None else ("", ())
        rows = self._conn.execute(f"SELECT id, lease_id, operation, reservation_id, hosts, created_at, finished_at, "
                                  f"outcome, error FROM operations {where} ORDER BY id", params).fetchall()
        return [OperationRecord(i, l, o, r, tuple(json.loads(h)), decode_time(c), decode_time(f), out, e)
                for i, l, o, r, h, c, f, out, e in rows]
