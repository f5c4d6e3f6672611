"""The dirty rate and the disk allocation last measured on each running VM, which the planner uses for live
migrations."""

from __future__ import annotations

import math
from datetime import datetime

from orchestrator.state.store.connection import StoreConnection
from orchestrator.state.store.errors import StoreError
from orchestrator.state.store.rows import decode_time, encode_time


class DirtyRateRepository(StoreConnection):
    """The dirty_rates table: one measurement per lease and VM, replaced by the next."""

    def record_dirty_rate(self, lease_id: int, vnode: int, at: datetime, mib_s: float) -> None:
        """The dirty rate just measured on a lease's VM (replaces the one measured before)."""
        if not (isinstance(mib_s, (int, float)) and math.isfinite(mib_s) and mib_s >= 0):
            raise StoreError(f"dirty rate of lease {lease_id} VM {vnode} must be a finite number >= 0 (got {mib_s!r})")
        with self.transaction():
            self._conn.execute("INSERT INTO dirty_rates (lease_id, vnode, measured_at, mib_s) VALUES (?, ?, ?, ?) "
                               "ON CONFLICT (lease_id, vnode) DO UPDATE SET measured_at = excluded.measured_at, "
                               "mib_s = excluded.mib_s", (lease_id, vnode, encode_time(at), float(mib_s)))

    def record_disk_allocation(self, lease_id: int, vnode: int, at: datetime, mib: float) -> None:
        """What a lease's VM's overlay on its host's own storage holds, just measured (replaces the last)."""
        if not (isinstance(mib, (int, float)) and math.isfinite(mib) and mib >= 0):
            raise StoreError(f"disk allocation of lease {lease_id} VM {vnode} must be a finite number >= 0 "
                             f"(got {mib!r})")
        with self.transaction():
            self._conn.execute("INSERT INTO disk_allocations (lease_id, vnode, measured_at, mib) VALUES (?, ?, ?, ?) "
                               "ON CONFLICT (lease_id, vnode) DO UPDATE SET measured_at = excluded.measured_at, "
                               "mib = excluded.mib", (lease_id, vnode, encode_time(at), float(mib)))

    def dirty_rates(self, lease_id: int) -> dict[int, tuple[datetime, float]]:
        """vnode -> (when, MiB/s) of the last dirty rate measured on each of the lease's VMs."""
        rows = self._conn.execute("SELECT vnode, measured_at, mib_s FROM dirty_rates WHERE lease_id = ? "
                                  "ORDER BY vnode", (lease_id,))
        return {vnode: (decode_time(at), rate) for vnode, at, rate in rows}
