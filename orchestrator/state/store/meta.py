"""The meta table: small values by key, and the counters lease ids and MAC addresses come from."""

from __future__ import annotations

import json
from typing import Any

from collections.abc import Collection

from orchestrator.model.guest import MAC_COUNT, draw_mac_prefix, mac_address
from orchestrator.state.store.connection import StoreConnection
from orchestrator.state.store.errors import StoreError
from orchestrator.state.store.rows import encode_json


class MetaRepository(StoreConnection):
    """Values by key (JSON), and ids no other process is given: lease ids, reservation ids' floor, MACs."""

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None else json.loads(row[0])

    def set_meta(self, key: str, value: Any) -> None:
        with self.statement():
            self._conn.execute("INSERT INTO meta (key, value) VALUES (?, ?) "
                               "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, encode_json(value)))

    def next_lease_id(self) -> int:
        """Allocate a lease id no other process gets: one UPDATE ... RETURNING under the write lock, never
        below an id already stored."""
        sql = ("UPDATE meta SET value = max(CAST(value AS INTEGER), "
               "(SELECT coalesce(max(id), 0) + 1 FROM leases)) + 1 "
               "WHERE key = 'next_lease_id' RETURNING CAST(value AS INTEGER) - 1")
        with self.statement():
            rows = self._conn.execute(sql).fetchall()
        if not rows:   # the row was deleted by hand (nothing was changed): start again from the stored leases
            with self.transaction():
                self._conn.execute("INSERT INTO meta (key, value) VALUES ('next_lease_id', '1')")
                rows = self._conn.execute(sql).fetchall()
        return int(rows[0][0])

    def max_reservation_id(self) -> int:
        """The largest reservation id stored: a new slot table must hand out ids above it."""
        return self._conn.execute("SELECT coalesce(max(id), 0) FROM reservations").fetchone()[0]

    def mac_prefix(self) -> str | None:
        """The prefix this installation's VMs' MACs are under, once drawn."""
        return self.get_meta("mac_prefix")

    def ensure_mac_prefix(self, avoid: Collection[str] = ()) -> str:
        """The installation's MAC prefix, drawn at random (not one of `avoid`) the first time."""
        with self.transaction():
            prefix = self.mac_prefix()
            if prefix is None:
                prefix = draw_mac_prefix(avoid)
                self.set_meta("mac_prefix", prefix)
        return prefix

    def allocate_macs(self, count: int) -> tuple[str, ...]:
        """`count` MAC addresses no other VM of this store was given (a counter under the write lock, under
        the installation's prefix)."""
        if count <= 0:
            return ()
        with self.transaction():
            prefix = self.ensure_mac_prefix()
            row = self._conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + ? WHERE key = 'next_mac' "
                                     "RETURNING CAST(value AS INTEGER) - ?", (count, count)).fetchone()
            if row is None:
                self._conn.execute("INSERT INTO meta (key, value) VALUES ('next_mac', ?)", (str(count),))
                row = (0,)
        first = int(row[0])
        if first + count > MAC_COUNT:
            raise StoreError(f"no MAC addresses left under {prefix} (16,777,216 handed out)")
        return tuple(mac_address(prefix, first + i) for i in range(count))
