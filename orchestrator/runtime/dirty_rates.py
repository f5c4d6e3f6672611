"""What running VMs really dirty: the daemon measures each one's dirty rate through its driver now and then,
and the store keeps the last measurement, which the planner uses (with a margin) in place of the rate the
lease declared when it plans a live migration of that VM. With it, what the VM's overlay on its host's own
storage holds (its allocation: a block migration copies that, not the estimate `live_migration_disk_mib`).

A measurement runs inside the hypervisor for `dirty_rate_sample` (pages are sampled, so it costs the guest
little) while the daemon goes on; a later step reads the answer. Each VM is measured at most once per
`dirty_rate_interval`, and a VM whose measurement fails is not asked again before then either. Its disk
allocation is read as often, but a read that fails (a VM still starting) is tried again at the next step:
the first drain must not wait an interval for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from drivers.base import Driver
from drivers.errors import DriverError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunningVM:
    """A VM of a lease that runs now, as the plan says."""

    lease_id: int
    vnode: int
    name: str


@dataclass(frozen=True)
class _Pending:
    vm: RunningVM
    started: datetime


class DirtyRateSampler:
    """Starts measurements of running VMs that are due, and records the ones that have finished."""

    def __init__(self, driver: Driver, interval: timedelta, sample: timedelta,
                 last_measured: dict[str, datetime] | None = None):
        self._driver = driver
        self._interval = interval
        self._sample = sample
        self._pending: dict[str, _Pending] = {}
        self._last: dict[str, datetime] = dict(last_measured or {})
        self._disk_last: dict[str, datetime] = {}

    @property
    def enabled(self) -> bool:
        return self._interval > timedelta(0)

    def step(self, now: datetime, running: Iterable[RunningVM],
             record: Callable[[RunningVM, datetime, float], None],
             record_disk: Callable[[RunningVM, datetime, float], None] | None = None) -> None:
        """Record the measurements that are done, then start those that are due (VMs running now only); a VM
        due has its disk allocation (MiB) read and given to `record_disk` at once."""
        if not self.enabled:
            return
        running = list(running)
        names = {vm.name for vm in running}
        for name, pending in list(self._pending.items()):
            if name not in names:
                del self._pending[name]   # stopped, suspended or moved on: the answer would be stale
                continue
            if now - pending.started < self._sample:
                continue
            del self._pending[name]
            try:
                rate = self._driver.measured_dirty_rate(name)
            except DriverError as exc:
                log.info("dirty rate of %s not read: %s", name, exc)
                continue
            if rate is not None:
                record(pending.vm, now, rate)
        for vm in running:
            disk_last = self._disk_last.get(vm.name)
            if record_disk is not None and (disk_last is None or now - disk_last >= self._interval):
                self._read_disk(vm, now, record_disk)
            last = self._last.get(vm.name)
            if vm.name in self._pending or (last is not None and now - last < self._interval):
                continue
            self._last[vm.name] = now
            try:
                self._driver.start_dirty_rate_measurement(vm.name, int(self._sample.total_seconds()))
            except DriverError as exc:
                log.info("dirty rate of %s not measured: %s", vm.name, exc)
                continue
            self._pending[vm.name] = _Pending(vm, now)

    def _read_disk(self, vm: RunningVM, now: datetime, record_disk: Callable[[RunningVM, datetime, float], None]) -> None:
        try:
            allocation = self._driver.disk_allocation(vm.name)
        except DriverError as exc:
            log.debug("disk allocation of %s not read: %s", vm.name, exc)
            return
        self._disk_last[vm.name] = now
        if allocation is not None:
            record_disk(vm, now, allocation / 2**20)
