"""Quotas of users (`alice`) and groups (`@lab`): the limits as set, checked elsewhere."""

from __future__ import annotations

from datetime import datetime

from orchestrator.model.errors import LeasewiseError
from orchestrator.model.quota import Quota, check_subject
from orchestrator.model.timeutil import UTC, as_utc
from orchestrator.state.store.connection import StoreConnection
from orchestrator.state.store.errors import StoreError
from orchestrator.state.store.rows import decode_seconds, decode_time, encode_seconds, encode_time

_QUOTA_COLUMNS = ("subject", "vcpus", "memory_mib", "vms", "max_duration_s", "max_ahead_s")


class QuotaRepository(StoreConnection):
    """The quotas table: one row of limits per user or group (NULL: that limit is unlimited)."""

    def set_quota(self, subject: str, quota: Quota, at: datetime | None = None) -> None:
        """Set (replace) the limits of a user (`alice`) or a group (`@lab`)."""
        check_subject(subject)
        set_at = as_utc(at, "at") if at is not None else datetime.now(UTC)
        values = (subject, quota.vcpus, quota.memory_mib, quota.vms, encode_seconds(quota.max_duration),
                  encode_seconds(quota.max_ahead), encode_time(set_at))
        with self.transaction():
            self._conn.execute(f"INSERT INTO quotas ({', '.join(_QUOTA_COLUMNS)}, set_at) "
                               "VALUES (?, ?, ?, ?, ?, ?, ?) "
                               "ON CONFLICT (subject) DO UPDATE SET "
                               + ", ".join(f"{c} = excluded.{c}" for c in (*_QUOTA_COLUMNS[1:], "set_at")), values)

    def quota(self, subject: str) -> Quota | None:
        row = self._conn.execute(f"SELECT {', '.join(_QUOTA_COLUMNS)} FROM quotas WHERE subject = ?",
                                 (subject,)).fetchone()
        return None if row is None else self._quota(row)

    def quotas(self) -> dict[str, Quota]:
        """subject -> its quota, users and groups, by subject."""
        rows = self._conn.execute(f"SELECT {', '.join(_QUOTA_COLUMNS)} FROM quotas ORDER BY subject").fetchall()
        return {row[0]: self._quota(row) for row in rows}

    def quota_set_at(self, subject: str) -> datetime | None:
        row = self._conn.execute("SELECT set_at FROM quotas WHERE subject = ?", (subject,)).fetchone()
        return None if row is None else decode_time(row[0])

    def remove_quota(self, subject: str) -> None:
        with self.transaction():
            if self._conn.execute("DELETE FROM quotas WHERE subject = ?", (subject,)).rowcount == 0:
                raise StoreError(f"no quota for {subject!r}")

    def _quota(self, row: tuple) -> Quota:
        subject, vcpus, memory, vms, duration, ahead = row
        try:
            return Quota(vcpus=vcpus, memory_mib=memory, vms=vms, max_duration=decode_seconds(duration),
                         max_ahead=decode_seconds(ahead))
        except LeasewiseError as exc:
            raise StoreError(f"{self.path}: the quota of {subject!r} is invalid in the store: {exc}") from None
