"""The dirty rate and the disk allocation last measured on each running VM, which the planner uses for live
migrations."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

from orchestrator.state.store.connection import StoreConnection
from orchestrator.state.store.errors import StoreError
from orchestrator.state.store.rows import decode_time, encode_time


class DirtyRateRepository(StoreConnection):
    """The dirty_rates table: one measurement per lease and VM, replaced by the next."""

    def record_dirty_rate(self, lease_id: int, vnode: int, at: datetime, mib_s: float) -> None:
        """The dirty rate just measured on a lease's VM (replaces the one measured before)."""
        self.record_measurements([(lease_id, vnode, at, mib_s)], [])

    def record_disk_allocation(self, lease_id: int, vnode: int, at: datetime, mib: float) -> None:
        """What a lease's VM's overlay on its host's own storage holds, just measured (replaces the last)."""
        self.record_measurements([], [(lease_id, vnode, at, mib)])

    def record_measurements(self, rates: Sequence[tuple[int, int, datetime, float]],
                            disks: Sequence[tuple[int, int, datetime, float]]) -> None:
        """Dirty rates (MiB/s) and disk allocations (MiB) just measured, each as (lease id, vnode, when,
        value), in one write (the daemon's sampler reads many VMs at once): all of them or, if one is not a
        finite number >= 0, none."""
        for what, rows in (("dirty rate", rates), ("disk allocation", disks)):
            for lease_id, vnode, _, value in rows:
                if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                    raise StoreError(f"{what} of lease {lease_id} VM {vnode} must be a finite number >= 0 "
                                     f"(got {value!r})")
        with self.transaction():
            for table, column, rows in (("dirty_rates", "mib_s", rates), ("disk_allocations", "mib", disks)):
                if rows:
                    self._conn.executemany(
                        f"INSERT INTO {table} (lease_id, vnode, measured_at, {column}) VALUES (?, ?, ?, ?) "
                        f"ON CONFLICT (lease_id, vnode) DO UPDATE SET measured_at = excluded.measured_at, "
                        f"{column} = excluded.{column}",
                        [(lease_id, vnode, encode_time(at), float(value)) for lease_id, vnode, at, value in rows])

    def dirty_rates(self, lease_id: int) -> dict[int, tuple[datetime, float]]:
        """vnode -> (when, MiB/s) of the last dirty rate measured on each of the lease's VMs."""
        rows = self._conn.execute("SELECT vnode, measured_at, mib_s FROM dirty_rates WHERE lease_id = ? "
                                  "ORDER BY vnode", (lease_id,))
        return {vnode: (decode_time(at), rate) for vnode, at, rate in rows}
