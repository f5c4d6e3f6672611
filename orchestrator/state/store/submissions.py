"""The idempotency keys of lease submissions: a client that retries a submission (its connection was
reset before the answer came) sends the same key again, and is answered with the lease the first attempt
made instead of a second lease.

A key belongs to its user (two users may pick the same one) and is kept with a fingerprint of what was
submitted, so the same key sent with another request is refused rather than answered with a lease that
is not the one asked for. Keys are forgotten after `KEEP` (a client retries for seconds, not days).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from orchestrator.state.store.connection import StoreConnection
from orchestrator.state.store.rows import encode_time

#: how long a key is remembered after its submission
KEEP = timedelta(days=1)


class SubmissionRepository(StoreConnection):
    """The submissions table: (user, key) -> the request's fingerprint, the lease and the first answer."""

    def submission(self, user: str, key: str) -> tuple[str, dict[str, Any]] | None:
        """(fingerprint, answer) of the submission `user` made with `key`, or None."""
        row = self._conn.execute("SELECT fingerprint, answer FROM submissions WHERE user = ? AND key = ?",
                                 (user, key)).fetchone()
        return None if row is None else (row[0], json.loads(row[1]))

    def record_submission(self, user: str, key: str, fingerprint: str, answer: dict[str, Any], now: datetime) -> None:
        """The answer given to `user`'s submission with `key` (in the transaction that stored its lease), and
        the keys older than `KEEP` forgotten."""
        with self.transaction():
            self._conn.execute("DELETE FROM submissions WHERE made_at < ?", (encode_time(now - KEEP),))
            self._conn.execute("INSERT INTO submissions (user, key, fingerprint, lease_id, answer, made_at) "
                               "VALUES (?, ?, ?, ?, ?, ?)",
                               (user, key, fingerprint, answer["id"], json.dumps(answer, separators=(",", ":")),
                                encode_time(now)))
