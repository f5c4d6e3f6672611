"""End-of-lease notices: claimed before they are sent, so no notice goes out twice."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from orchestrator.model.lease import Lease
from orchestrator.model.states import LeaseState
from orchestrator.state.store.connection import StoreConnection
from orchestrator.state.store.rows import decode_time, encode_time


@dataclass(frozen=True)
class NoticeRecord:
    """An end-of-lease notice as claimed for one notifier, and what came of it."""

    lease_id: int
    key: str
    notifier: str
    sent_at: datetime
    outcome: str            # "claimed" (or lost), "sent", "failed: why"


class NoticeRepository(StoreConnection):
    """The notices table: a row per lease, notice key and notifier, claimed before the send."""

    _load_leases: Callable[[str, tuple], list[Lease]]   # LeaseRepository's: the Store has both

    def claimed_notices(self, lease_ids: Iterable[int]) -> set[tuple[int, str, str]]:
        """(lease id, key, notifier) of every notice already claimed for these leases, whatever its outcome."""
        ids = sorted(set(lease_ids))
        found: set[tuple[int, str, str]] = set()
        with self._read() as conn:
            for i in range(0, len(ids), 500):   # (SQLite's limit on bound parameters)
                chunk = ids[i:i + 500]
                found.update(conn.execute(f"SELECT lease_id, key, notifier FROM notices WHERE lease_id IN "
                                          f"({', '.join('?' * len(chunk))})", chunk).fetchall())
        return found

    def claim_notices(self, wanted: Iterable[tuple[int, str, str]], at: datetime) -> list[tuple[int, str, str]]:
        """Claim (lease id, key, notifier) notices before sending them, in one transaction; returns those
        this call claimed (a row already there, claimed by an earlier step or another process, is left)."""
        claimed = []
        with self.transaction():
            for lease_id, key, notifier in wanted:
                cur = self._conn.execute("INSERT INTO notices (lease_id, key, notifier, sent_at) VALUES (?, ?, ?, ?) "
                                         "ON CONFLICT DO NOTHING", (lease_id, key, notifier, encode_time(at)))
                if cur.rowcount:
                    claimed.append((lease_id, key, notifier))
        return claimed

    def unannounced_ended_leases(self, since: datetime, states: Iterable[LeaseState]) -> list[Lease]:
        """Leases in one of `states` (final ones) that ended after `since` and have no `ended`
        notice claimed yet: those ended by another process or just before a crash are found here."""
        values = [LeaseState(s).value for s in states]
        where = (f"WHERE end_time > ? AND state IN ({', '.join('?' * len(values))}) "
                 "AND id NOT IN (SELECT lease_id FROM notices WHERE key = 'ended')")
        return self._load_leases(where, (encode_time(since), *values))

    def record_notice_outcomes(self, outcomes: Mapping[tuple[int, str, str], str]) -> None:
        """The outcome ("sent", "failed: why") of claimed notices, in one transaction."""
        with self.transaction():
            self._conn.executemany("UPDATE notices SET outcome = ? WHERE lease_id = ? AND key = ? AND notifier = ?",
                                   [(outcome, *row) for row, outcome in outcomes.items()])

    def notices(self, lease_id: int | None = None) -> list[NoticeRecord]:
        """The notices claimed so far (for one lease, or all), by lease, time, key and notifier."""
        where, params = ("WHERE lease_id = ?", (lease_id,)) if lease_id is not None else ("", ())
        rows = self._conn.execute(f"SELECT lease_id, key, notifier, sent_at, outcome FROM notices {where} "
                                  f"ORDER BY lease_id, sent_at, key, notifier", params).fetchall()
        return [NoticeRecord(l, k, n, decode_time(t), o) for l, k, n, t, o in rows]
