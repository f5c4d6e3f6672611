"""Live migration as a planning move (`preemption_mode = migrate-first`): the VMs of a running lease that
sit on hosts needed by `needed_by` move, one after the other, to other hosts that hold the rest of the
run, done `live_migration_margin` before then. Each move lasts what the pre-copy model predicts, in whole
seconds; an evacuation whose moves would overlap another live migration on the same hosts moves earlier.
The VMs that move go, the largest first, to the first host in the host-selection order (at the
migration's start) that is not being left and can hold them, with the lease's VMs already there, from
the migration's start to the end of the run.
"""

from __future__ import annotations

from datetime import datetime

from orchestrator.model.lease import Lease
from orchestrator.model.reservations import Reservation, ReservationKind, ReservationState
from orchestrator.model.resources import NOTHING, Resources, add
from orchestrator.model.timeutil import iso
from orchestrator.planning.precopy import downtime_limit_ms, predict_precopy
from tests.oracle.vm_scheduler import ZERO, metered, whole_seconds

SHIFTS = 16


class Evacuation:
    def __init__(self, migration: Reservation, continuation: Reservation):
        self.migration = migration
        self.continuation = continuation


class EvacuationPlanner:
    def __init__(self, table, config, vm_scheduler):
        self.table = table
        self.config = config
        self.vm = vm_scheduler

    def predict(self, lease: Lease, vnode: int):
        c = self.config
        limit = downtime_limit_ms(c.max_downtime_ms, c.live_migration_switchover_ms)
        if limit is None:
            return None
        measured = lease.measured_dirty_rates.get(vnode)
        if measured is not None:
            rate, factor = measured * c.dirty_rate_margin, 1.0
        else:
            rate = c.dirty_rate if lease.request.dirty_rate_mib_s is None else lease.request.dirty_rate_mib_s
            factor = c.live_migration_dirty_factor
        return predict_precopy(lease.request.nodes[vnode].memory, c.live_bandwidth, rate, limit,
                               overhead_s=c.live_migration_overhead.total_seconds(), dirty_factor=factor,
                               switchover_ms=c.live_migration_switchover_ms, downtime_schedule=c.downtime_schedule)

    def plan(self, lease: Lease, vm: Reservation, needed_by: datetime, avoid: set[str],
             now: datetime) -> Evacuation | None:
        """The evacuation of `vm`'s VMs on `avoid` hosts (the lease's plan out of the table), or None."""
        if vm.state is ReservationState.DONE:
            return None
        if any(not self.table.fits(h, amount, max(vm.start, now), needed_by) for h, amount in vm.resources.items()):
            return None
        moving = sorted(v for v, h in vm.nodes.items() if h in avoid)
        if not moving:
            return None
        predicted = {}
        total = ZERO
        for v in moving:
            result = self.predict(lease, v)
            if result is None or result.outcome != "completed":
                return None
            predicted[v] = result
            total += whole_seconds(result.total_seconds)
        m_end = needed_by - self.config.live_migration_margin
        for _ in range(SHIFTS):
            m_start = m_end - total
            if m_start < now or m_start < vm.start:
                return None
            remaining = lease.remaining - (m_end - vm.start)
            if remaining <= ZERO:
                return None
            end = m_end + remaining + self.vm.shutdown_time(lease)
            nodes = destinations(self.table, self.vm.mapper.host_order(m_start), lease, vm, moving, avoid, m_start, end)
            if nodes is None:
                return None
            hosts = {vm.nodes[v] for v in moving} | {nodes[v] for v in moving}
            clash = [r.start for r in self.table.reservations()
                     if r.kind is ReservationKind.LIVE_MIGRATE and r.start < m_end and r.end > m_start
                     and r.end > r.start and any(h in r.resources for h in hosts)]
            if not clash:
                return self.build(lease, vm, nodes, moving, predicted, m_start, m_end, end, needed_by)
            m_end = min(clash)
        return None

    def build(self, lease, vm, nodes, moving, predicted, m_start, m_end, end, needed_by) -> Evacuation:
        c = self.config
        requests = lease.request.nodes
        held: dict[str, Resources] = {}
        for v in moving:
            src, dst = vm.nodes[v], nodes[v]
            held[dst] = add(held.get(dst, NOTHING), requests[v])
            held[dst] = add(held[dst], metered(Resources(0, 0, 0, c.live_bandwidth, 0), self.table.capacity(dst)))
            held[src] = add(held.get(src, NOTHING), metered(Resources(0, 0, 0, 0, c.live_bandwidth),
                                                            self.table.capacity(src)))
        fallback = self.vm.estimate_suspend(lease) if self.vm.may_suspend(lease) else ZERO
        abort_at = max(m_end, needed_by - fallback - (whole_seconds(1) if fallback else ZERO))
        migration = Reservation(
            lease_id=lease.id, kind=ReservationKind.LIVE_MIGRATE, start=m_start, end=m_end, resources=held,
            transfers={v: (vm.nodes[v], nodes[v]) for v in moving},
            extra={"needed_by": iso(needed_by), "abort_at": iso(abort_at), "max_downtime_ms": c.max_downtime_ms,
                   "downtime_limit_ms": downtime_limit_ms(c.max_downtime_ms, c.live_migration_switchover_ms),
                   "bandwidth_mib_s": c.live_migration_bandwidth,
                   "predicted": {str(v): {"seconds": predicted[v].total_seconds,
                                          "downtime_ms": predicted[v].downtime_ms,
                                          "passes": predicted[v].passes} for v in moving}})
        per_host: dict[str, Resources] = {}
        for v, h in nodes.items():
            per_host[h] = add(per_host.get(h, NOTHING), requests[v])
        continuation = Reservation(lease_id=lease.id, kind=ReservationKind.VM, start=m_end, end=end,
                                   resources=per_host, nodes=nodes, continues=True, pre=[migration])
        migration.vm = continuation
        vm.end = m_end
        vm.post = []
        return Evacuation(migration, continuation)


def destinations(table, order: list[str], lease: Lease, vm: Reservation, moving: list[int], avoid: set[str],
                 start: datetime, end: datetime) -> dict[int, str] | None:
    """vnode -> host for the whole lease over [start, end): staying VMs keep their hosts; each moving one,
    largest first, goes to the first host of `order` (hosts best first at `start`) not in `avoid` that can
    hold it, with the lease's VMs already there, over the whole interval. None when one fits nowhere."""
    requests = lease.request.nodes
    nodes = dict(vm.nodes)
    held: dict[str, Resources] = {}
    for v, host in vm.nodes.items():
        if v not in moving:
            held[host] = add(held.get(host, NOTHING), requests[v])
    for v in sorted(moving, key=lambda v: requests[v], reverse=True):
        for host in order:
            trial = add(held.get(host, NOTHING), requests[v])
            if host not in avoid and table.fits(host, trial, start, end):
                held[host] = trial
                nodes[v] = host
                break
        else:
            return None
    return nodes
