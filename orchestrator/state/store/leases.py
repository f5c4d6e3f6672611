"""Leases: their requests, states, histories and plans, saved and read back whole."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from orchestrator.model.errors import LeasewiseError
from orchestrator.model.lease import Lease
from orchestrator.model.states import FINAL_STATES, LeaseState
from orchestrator.state.store.connection import StoreConnection
from orchestrator.state.store.errors import StoreError
from orchestrator.state.store.rows import (
    JSON_REQUEST_COLUMNS,
    LEASE_COLUMNS,
    REQUEST_COLUMNS,
    RESERVATION_COLUMNS,
    STATE_COLUMNS,
    decode_time,
    encode_seconds,
    encode_time,
    lease_from_row,
    lease_record,
    lease_record_sql,
    plan_from_rows,
    plan_rows,
    quoted,
    request_row,
    state_row,
)

_INSERT_LEASE = (f"INSERT INTO leases ({', '.join(map(quoted, LEASE_COLUMNS))}) "
                 f"VALUES ({', '.join('?' * len(LEASE_COLUMNS))})")
_HISTORY_COLUMNS = ("lease_id", "seq", "time", "state")
_QUOTED_RESERVATION_COLUMNS = tuple(map(quoted, RESERVATION_COLUMNS))


def _history_rows(lease: Lease, stored: int) -> list[tuple]:
    """The rows of the lease's history entries after the first `stored`."""
    return [(lease.id, seq, encode_time(at), state.value)
            for seq, (at, state) in enumerate(lease.history[stored:], start=stored)]


def _lease_filter(state: Iterable[str] | None, user: str | None, prefix: str = "",
                  after: int | None = None) -> tuple[str, list]:
    """The WHERE clause (and its parameters) picking leases in these states, of this user, with ids after
    `after`."""
    clauses: list[str] = []
    params: list[Any] = []
    if after is not None:
        clauses.append(f"{prefix}id > ?")
        params.append(after)
    if state is not None:
        values = [LeaseState(s).value for s in state]
        clauses.append(f"{prefix}state IN ({', '.join('?' * len(values))})")
        params.extend(values)
    if user is not None:
        clauses.append(f"{prefix}user = ?")
        params.append(user)
    return (f"WHERE {' AND '.join(clauses)}" if clauses else ""), params


class LeaseRepository(StoreConnection):
    """The leases, lease_states and reservations tables: a lease with its history and its plan, in one
    transaction; read back with the dirty rates measured on its VMs."""

    def save_lease(self, lease: Lease, workload_id: str | None = None, *, new: bool = False) -> None:
        """Write the lease, append its history entries not stored yet, and replace its reservations with
        its current plan. `workload_id` None keeps the one stored before. `new` says the caller has not
        seen the lease stored: it is then inserted first, and the checks against a stored copy are made
        only if one exists after all."""
        req = lease.request
        request_values = request_row(req)
        state_values = state_row(lease)
        conn = self._conn
        with self.transaction():
            row = (lease.id, workload_id, *request_values, *state_values)
            if new and conn.execute(f"{_INSERT_LEASE} ON CONFLICT (id) DO NOTHING", row).rowcount == 1:
                # (a lease row just made has no history and no plan stored: both cascade from it)
                self._insert_rows("lease_states", _HISTORY_COLUMNS, _history_rows(lease, 0))
                self._insert_reservations(lease, plan_rows(lease))
                return
            stored = conn.execute(f"SELECT {', '.join(map(quoted, REQUEST_COLUMNS))} FROM leases WHERE id = ?",
                                  (lease.id,)).fetchone()
            if stored is None:
                conn.execute(_INSERT_LEASE, row)
            else:
                # the duration may grow (`lease extend`); anything else differing means an id clash
                changed = [c for c, a, b in zip(REQUEST_COLUMNS, stored, request_values)
                           if c != "duration_s"
                           and (json.loads(a) if c in JSON_REQUEST_COLUMNS and a else a)
                           != (json.loads(b) if c in JSON_REQUEST_COLUMNS and b else b)]
                if changed:
                    raise StoreError(f"lease {lease.id} is already stored with a different request "
                                     f"({', '.join(changed)} differ): two leases were given the same id")
                conn.execute(f"UPDATE leases SET workload_id = coalesce(?, workload_id), duration_s = ?, "
                             f"{', '.join(f'{quoted(c)} = ?' for c in STATE_COLUMNS)} WHERE id = ?",
                             (workload_id, encode_seconds(req.duration), *state_values, lease.id))
            self._append_history(lease)
            self._replace_reservations(lease)

    def _append_history(self, lease: Lease) -> None:
        conn = self._conn
        count, = conn.execute("SELECT count(*) FROM lease_states WHERE lease_id = ?", (lease.id,)).fetchone()
        history = lease.history
        if count > len(history):
            raise StoreError(f"lease {lease.id}: the store has {count} history entries, this copy only "
                             f"{len(history)} (another process saved a newer version)")
        if count:
            last = conn.execute("SELECT time, state FROM lease_states WHERE lease_id = ? AND seq = ?",
                                (lease.id, count - 1)).fetchone()
            at, state = history[count - 1]
            if last != (encode_time(at), state.value):
                raise StoreError(f"lease {lease.id}: history entry {count - 1} differs from the stored one "
                                 f"({last[1]} at {last[0]} stored, {state.value} at {encode_time(at)} here)")
        self._insert_rows("lease_states", _HISTORY_COLUMNS, _history_rows(lease, count))

    def _replace_reservations(self, lease: Lease) -> None:
        self._conn.execute("DELETE FROM reservations WHERE lease_id = ?", (lease.id,))
        self._insert_reservations(lease, plan_rows(lease))

    def _insert_reservations(self, lease: Lease, rows: list[tuple]) -> None:
        conn = self._conn
        try:
            self._insert_rows("reservations", _QUOTED_RESERVATION_COLUMNS, rows)
        except sqlite3.IntegrityError:
            seen = {row[0] for row in rows}
            clash = conn.execute(
                f"SELECT id, lease_id FROM reservations WHERE lease_id != ? AND id IN "
                f"({', '.join('?' * len(seen))}) LIMIT 1", (lease.id, *seen)).fetchone()
            if clash is not None:
                raise StoreError(f"lease {lease.id}: reservation id {clash[0]} is already used by lease "
                                 f"{clash[1]} (seed the slot table above max_reservation_id())") from None
            raise

    def load_leases(self) -> list[Lease]:
        """Every lease, rebuilt with its request, state, history, counters and plan, by id."""
        return self._load_leases("", ())

    def lease(self, lease_id: int) -> Lease:
        found = self._load_leases("WHERE id = ?", (lease_id,))
        if not found:
            raise StoreError(f"no lease with id {lease_id}")
        return found[0]

    def leases(self, state: LeaseState | str | Iterable[LeaseState | str] | None = None,
               user: str | None = None, after: int | None = None, limit: int | None = None) -> list[Lease]:
        """Leases in `state` (one or several) and/or of `user`, by id; a page of them with `after` (ids
        above it) and `limit` (at most that many)."""
        clauses: list[str] = []
        params: list[Any] = []
        if after is not None:
            clauses.append("id > ?")
            params.append(after)
        if state is not None:
            states = [state] if isinstance(state, str) else list(state)
            values = [LeaseState(s).value for s in states]
            clauses.append(f"state IN ({', '.join('?' * len(values))})")
            params.extend(values)
        if user is not None:
            clauses.append("user = ?")
            params.append(user)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        if limit is not None:   # (the page's ids first, then the leases they name)
            ids = [i for (i,) in self._conn.execute(f"SELECT id FROM leases {where} ORDER BY id LIMIT ?",
                                                    (*params, limit))]
            if not ids:
                return []
            return self._load_leases(f"WHERE id IN ({', '.join('?' * len(ids))})", tuple(ids))
        return self._load_leases(where, tuple(params))

    def unreleased_leases(self, skip: Iterable[int] = ()) -> list[Lease]:
        """Finished leases whose leftovers on the hosts (VMs, memory images, disks) are not cleaned up yet
        (but those in `skip`: their cleanup is under way, so they are not read at all)."""
        final = tuple(s.value for s in FINAL_STATES)
        where = f"WHERE released = 0 AND state IN ({', '.join('?' * len(final))})"
        skip = set(skip)
        if skip:
            ids = [i for (i,) in self._conn.execute(f"SELECT id FROM leases {where}", final) if i not in skip]
            if not ids:
                return []
            return self._load_leases(f"WHERE id IN ({', '.join('?' * len(ids))})", tuple(ids))
        return self._load_leases(where, final)

    def lease_records(self, state: Iterable[str] | None = None, user: str | None = None) -> list[dict[str, Any]]:
        """Leases as `orchestrator.state.codec` sends them (`rows.lease_record`), straight from their rows (no
        `Lease` is built: the server lists many leases often)."""
        where, params = _lease_filter(state, user)
        rows, history, plan, rates, _ = self._lease_rows(where, params)
        parts: dict[int, tuple[list, list, dict]] = {row[0]: ([], [], {}) for row in rows}
        for lease_id, at, st in history:
            parts[lease_id][0].append((at, st))
        for rr in plan:
            parts[rr[1]][1].append(rr)
        for lease_id, vnode, mib_s in rates:
            parts[lease_id][2][vnode] = mib_s
        return [lease_record(row, *parts[row[0]]) for row in rows]

    def lease_ids(self, state: Iterable[str] | None = None, user: str | None = None, after: int | None = None,
                  limit: int | None = None) -> list[int]:
        """The ids of the leases `lease_records_json` would give, in order."""
        where, params = _lease_filter(state, user, "", after)
        where += " ORDER BY id"
        if limit is not None:
            where += " LIMIT ?"
            params.append(limit)
        with self._read() as conn:
            return [i for (i,) in conn.execute(f"SELECT id FROM leases {where}", params)]

    def lease_records_json(self, state: Iterable[str] | None = None, user: str | None = None,
                           after: int | None = None, limit: int | None = None) -> str:
        """`lease_records` encoded as one JSON array, made by SQLite: the server lists many leases often, and
        SQLite builds the text without holding the GIL, so a list does not slow down whoever holds the
        scheduler's lock. Decoded, it equals `lease_records` (reals are written with 17 digits, which read
        back as the same float). A page with `after` (ids above it) and `limit` (at most that many)."""
        where, params = _lease_filter(state, user, "l.", after)
        where += " ORDER BY l.id"
        if limit is not None:
            where += " LIMIT ?"
            params.append(limit)
        query = (f"SELECT '[' || coalesce(group_concat(record, ','), '') || ']' FROM "
                 f"(SELECT {lease_record_sql('l')} AS record FROM leases AS l {where})")
        with self._read() as conn:
            return conn.execute(query, params).fetchone()[0]

    def ended_leases(self, after: datetime, before: datetime) -> list[Lease]:
        """Final leases that ran and ended after `after`, having started before `before`: the past of a
        window of the plan, found by the end-time index (a long history is not read)."""
        final = [s.value for s in FINAL_STATES]
        where = (f"WHERE end_time > ? AND state IN ({', '.join('?' * len(final))}) "
                 "AND start_time IS NOT NULL AND start_time < ?")
        return self._load_leases(where, (encode_time(after), *final, encode_time(before)))

    def lease_states(self, ids: Iterable[int]) -> dict[int, tuple[LeaseState, bool]]:
        """id -> (state, released) of these leases (those the store has), without loading them whole."""
        ids = sorted(set(ids))
        if not ids:
            return {}
        rows = self._conn.execute(f"SELECT id, state, released FROM leases WHERE id IN ({', '.join('?' * len(ids))})",
                                  tuple(ids)).fetchall()
        return {i: (LeaseState(state), bool(released)) for i, state, released in rows}

    def mark_released(self, lease_id: int) -> None:
        with self.statement():
            self._conn.execute("UPDATE leases SET released = 1 WHERE id = ?", (lease_id,))

    def workload_ids(self) -> dict[int, str]:
        """lease id -> the workload id it was saved with (only leases that have one)."""
        rows = self._conn.execute("SELECT id, workload_id FROM leases WHERE workload_id IS NOT NULL")
        return {i: w for i, w in rows}

    def _lease_rows(self, where: str, params: Sequence) -> tuple[list, list, list, list, list]:
        """The rows of the leases `where` picks, of their state histories, plans and dirty rates, in one read
        (each by lease id, then in its order)."""
        select = f"SELECT id FROM leases {where}"
        with self._read() as conn:
            leases = conn.execute(f"SELECT {', '.join(map(quoted, LEASE_COLUMNS))} FROM leases {where} ORDER BY id",
                                  params).fetchall()
            history = conn.execute(f"SELECT lease_id, time, state FROM lease_states WHERE lease_id IN ({select}) "
                                   f"ORDER BY lease_id, seq", params).fetchall()
            plan = conn.execute(f"SELECT {', '.join(map(quoted, RESERVATION_COLUMNS))} FROM reservations "
                                f"WHERE lease_id IN ({select}) ORDER BY lease_id, position", params).fetchall()
            rates = conn.execute(f"SELECT lease_id, vnode, mib_s FROM dirty_rates WHERE lease_id IN ({select})",
                                 params).fetchall()
            disks = conn.execute(f"SELECT lease_id, vnode, mib FROM disk_allocations WHERE lease_id IN ({select})",
                                 params).fetchall()
        return leases, history, plan, rates, disks

    def _load_leases(self, where: str, params: tuple) -> list[Lease]:
        lease_rows, history_rows, rr_rows, rate_rows, disk_rows = self._lease_rows(where, params)
        histories: dict[int, list[tuple[datetime, LeaseState]]] = {}
        for lease_id, at, state in history_rows:
            histories.setdefault(lease_id, []).append((decode_time(at), LeaseState(state)))
        plans: dict[int, list[tuple]] = {}
        for row in rr_rows:
            plans.setdefault(row[1], []).append(row)
        rates: dict[int, dict[int, float]] = {}
        for lease_id, vnode, mib_s in rate_rows:
            rates.setdefault(lease_id, {})[vnode] = mib_s
        disks: dict[int, dict[int, float]] = {}
        for lease_id, vnode, mib in disk_rows:
            disks.setdefault(lease_id, {})[vnode] = mib
        leases = []
        for row in lease_rows:
            lease_id = row[0]
            try:
                lease = lease_from_row(row)
                lease.history = histories.get(lease_id, [])
                lease.reservations = plan_from_rows(plans.get(lease_id, []))
                lease.measured_dirty_rates = rates.get(lease_id, {})
                lease.measured_disk_mib = disks.get(lease_id, {})
            except (LeasewiseError, ValueError, KeyError, TypeError) as exc:
                raise StoreError(f"{self.path}: lease {lease_id} cannot be read back: {exc}") from None
            leases.append(lease)
        return leases
