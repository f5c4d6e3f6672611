"""Evacuation: moving a running lease's VMs live to other hosts, planned like any other overhead.

When an advance reservation (or a drain) needs hosts that running VMs hold, the lease scheduler first
asks for an evacuation; only when there is none does it suspend (or requeue) the lease. A best-effort
lease placed on hosts it must leave before it is done is planned the same way before it starts: an
evacuation instead of the suspension, when there is one. For a lease whose
VM reservation V runs on hosts that must be free by `needed_by`, the plan is:

    V             [V.start, m_end)   cut where the last moving VM switches over (the VMs run there until then)
    live-migrate  [m_start, m_end)   the moving VMs' room on their destinations, network out at each source
                                     and in at each destination
    V'            [m_end, end)       the rest of the run on the new hosts (`continues`: nothing to start),
                                     then its shutdown

Each move takes what the pre-copy model (`orchestrator.planning.precopy`) predicts from the VM's memory, its dirty rate
(the rate measured on its host times `dirty_rate_margin`, else the lease's, else `dirty_rate`),
the pair's bandwidth (learned from the daemon's migrations, else `live_bandwidth`; never above
`live_migration_bandwidth_limit`), `live_migration_overhead` and `live_migration_dirty_factor`, rounded up to
whole seconds. Before the destinations are chosen each move is predicted at the slowest pair its source has
to a host it may go to; once they are, at its own pair's, which can only shorten the window (it keeps its end);
the migration job is given `max_downtime_ms` less `live_migration_switchover_ms` as its limit (with the
configured steps), so the predicted pause, switch-over included, stays within the maximum. The moves of one evacuation run one after the
other (the daemon migrates one VM at a time), laid out backwards from `needed_by - live_migration_margin`.
Two live migrations that share a host are serialised (an evacuation moves earlier until it overlaps none),
not given shares of the bandwidth. A VM that would never converge, a layout that would have to start in
the past, or a lease for which no host has room until its end, gets no evacuation.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from orchestrator.config import SchedulingConfig
from orchestrator.model.lease import Lease
from orchestrator.model.reservations import (
    Reservation,
    ReservationKind,
    ReservationState,
)
from orchestrator.model.resources import NOTHING, Resources, add, metered
from orchestrator.model.timeutil import ZERO, ceil_seconds, iso
from orchestrator.model.tolerance import EPSILON
from orchestrator.planning.learning import LIVE_MIGRATE
from orchestrator.planning.overheads import Overheads
from orchestrator.planning.policies import HostSelectionPolicy
from orchestrator.planning.precopy import PrecopyResult, downtime_limit_ms, predict_precopy
from orchestrator.planning.image_filter import NO_IMAGE_FILTER, ImageHolders
from orchestrator.planning.slottable.hoststates import fits_rows
from orchestrator.planning.slottable.table import SlotTable

_MAX_SHIFTS = 16
_SLACK = timedelta(seconds=1)   # how many times an evacuation moves earlier to dodge other live migrations
_MAX_PREDICTIONS = 4096   # predictions remembered (a workload has a handful of VM sizes and rates)


@dataclass
class Evacuation:
    """An evacuation ready to commit: `vm` (already cut at the switch-over), the live migration, and the
    continuation VM reservation (its `pre` is the migration, its `post` the shutdown)."""

    vm: Reservation
    migration: Reservation
    continuation: Reservation
    predicted: dict[int, PrecopyResult]


class EvacuationPlanner:
    def __init__(self, table: SlotTable, config: SchedulingConfig, overheads: Overheads,
                 host_selection: HostSelectionPolicy, may_suspend: Callable[[Lease], bool],
                 allowed_hosts: Callable[[Lease], Collection[str] | None] = lambda lease: None,
                 images: ImageHolders = NO_IMAGE_FILTER):
        """`allowed_hosts`: the hosts the mapper's filter step lets a lease use (None: all); `images`: the
        hosts holding each image copied to hosts' own storage (a VM booting one moves only to a host holding
        it, with its disk)."""
        self.table = table
        self.allowed_hosts = allowed_hosts
        self.images = images
        self.config = config
        self.overheads = overheads
        self.host_selection = host_selection
        self.may_suspend = may_suspend
        #: (memory, bandwidth, dirty rate, dirty factor, disk) -> the pre-copy model's prediction
        self._predictions: dict[tuple[float, float, float, float, float], PrecopyResult] = {}

    def dirty_rate(self, lease: Lease, vnode: int) -> tuple[float, float]:
        """(MiB/s, factor) the model is given for the VM: the rate last measured on its host with the margin
        (measured, so not scaled by `live_migration_dirty_factor`); else the lease's declared rate, else the
        configured default, with the factor."""
        measured = lease.measured_dirty_rates.get(vnode)
        if measured is not None:
            return measured * self.config.dirty_rate_margin, 1.0
        rate = lease.request.dirty_rate_mib_s
        return (self.config.dirty_rate if rate is None else rate), self.config.live_migration_dirty_factor

    def predict(self, lease: Lease, vnode: int, bandwidth_mib_s: float | None = None) -> PrecopyResult | None:
        """What moving one VM of the lease costs, per the pre-copy model and the configured parameters (at
        `bandwidth_mib_s`, else `live_bandwidth`); None when the switch-over alone would take the maximum
        downtime."""
        cfg = self.config
        limit = downtime_limit_ms(cfg.max_downtime_ms, cfg.live_migration_switchover_ms)
        if limit is None:
            return None
        rate, factor = self.dirty_rate(lease, vnode)
        # (a VM booting an image copied to the hosts' own storage has its overlay there: it moves with it, as
        # much as was last measured in it, else the configured estimate)
        disk = 0.0
        if self.images.hosts_for(lease) is not None:
            disk = lease.measured_disk_mib.get(vnode, cfg.live_migration_disk_mib)
        memory, bandwidth = lease.request.nodes[vnode].memory, bandwidth_mib_s or cfg.live_bandwidth
        # (the model is a function of these and of the configuration alone: a big lease's VMs are mostly
        # alike, and each evacuation asks twice per VM)
        key = (memory, bandwidth, rate, factor, disk)
        result = self._predictions.get(key)
        if result is None:
            if len(self._predictions) >= _MAX_PREDICTIONS:
                self._predictions.clear()
            result = self._predictions[key] = predict_precopy(
                memory, bandwidth, rate, limit,
                overhead_s=cfg.live_migration_overhead.total_seconds(), dirty_factor=factor,
                switchover_ms=cfg.live_migration_switchover_ms, downtime_schedule=cfg.downtime_schedule,
                disk_mib=disk,
            )
        return result

    def fallback_time(self, lease: Lease) -> timedelta:
        """How long before the deadline a failed migration must be given up for suspension to fit."""
        return self.overheads.estimate_suspend(lease) if self.may_suspend(lease) else ZERO

    def plan(self, lease: Lease, vm: Reservation, needed_by: datetime, avoid: set[str],
             now: datetime) -> Evacuation | None:
        """Move the VMs of `vm` (running, or planned and not started) that sit on `avoid` hosts elsewhere,
        done `live_migration_margin` before `needed_by`. `vm` and the rest of the lease's plan must be out
        of the slot table; nothing is committed here. None when there is no such evacuation."""
        if vm.state is ReservationState.DONE:
            return None
        if any(not self.table.fits(host, amount, max(vm.start, now), needed_by)
               for host, amount in vm.resources.items()):
            return None   # its VMs cannot even stay where they are until then
        moving = sorted(v for v, h in vm.nodes.items() if h in avoid)
        if not moving:
            return None
        predicted: dict[int, PrecopyResult] = {}
        total = ZERO
        # (the hosts it may go to matter only when some pair's rate is learned)
        elsewhere = [h for h in self.table.hosts if h not in avoid] if self.overheads.rates.knows(LIVE_MIGRATE) else []
        rates = {v: self.overheads.slowest_live_bandwidth(vm.nodes[v], elsewhere) for v in moving}
        for v in moving:
            result = self.predict(lease, v, rates[v])
            if result is None or result.outcome != "completed":
                return None   # it would never get under the downtime limit
            predicted[v] = result
            total += ceil_seconds(result.total_seconds)
        m_end = needed_by - self.config.live_migration_margin
        for _ in range(_MAX_SHIFTS):
            m_start = m_end - total
            if m_start < now or m_start < vm.start:
                return None   # predicted to overrun: there is not enough time left
            remaining = lease.remaining - (m_end - vm.start)
            if remaining <= ZERO:
                return None   # the lease is done before it would have moved
            end = m_end + remaining + self.overheads.shutdown_time(lease)
            nodes = self._destinations(lease, vm, moving, avoid, m_start, end)
            if nodes is None:
                return None
            hosts = {vm.nodes[v] for v in moving} | {nodes[v] for v in moving}
            clash = [rr.start for rr in self.table.reservations_overlapping(m_start, m_end, hosts)
                     if rr.kind is ReservationKind.LIVE_MIGRATE]
            if not clash:
                predicted, rates, m_start = self._at_pair_rates(lease, vm, nodes, moving, predicted, rates,
                                                                m_start, m_end)
                return self._build(lease, vm, nodes, moving, (predicted, rates), m_start, m_end, end, needed_by)
            m_end = min(clash)   # serialise: end before the other migration starts, and look again
        return None

    def _at_pair_rates(self, lease: Lease, vm: Reservation, nodes: dict[int, str], moving: list[int],
                       bound: dict[int, PrecopyResult], bound_rates: dict[int, float], m_start: datetime,
                       m_end: datetime) -> tuple[dict[int, PrecopyResult], dict[int, float], datetime]:
        """The moves predicted at their own pairs' rates, and the window's start for them; the bound's when
        a pair's prediction is no shorter (a model that is not monotone in the rate: keep what was checked)."""
        exact: dict[int, PrecopyResult] = {}
        rates = {v: self.overheads.live_bandwidth(vm.nodes[v], nodes[v]) for v in moving}
        total = ZERO
        for v in moving:
            result = self.predict(lease, v, rates[v])
            if result is None or result.outcome != "completed" or result.total_seconds > bound[v].total_seconds:
                return bound, bound_rates, m_start
            exact[v] = result
            total += ceil_seconds(result.total_seconds)
        return exact, rates, max(m_start, m_end - total)

    def _destinations(self, lease: Lease, vm: Reservation, moving: list[int], avoid: set[str],
                      start: datetime, end: datetime) -> dict[int, str] | None:
        """vnode -> host for the whole lease over [start, end): staying VMs keep their hosts, moving ones
        go, largest first, to the first host in the policy's order that can hold them until `end`,
        among those the lease's constraints allow; a spread lease's VM to a host none of its VMs is on.

        A host without room for the VM even at `start` is passed over without walking its timeline: on
        a busy site that is most of them, and the arrays read for the ranking answer it (the same
        comparison as the walk's first step). VMs of one size (sorted next to each other) go on from the
        host the one before went to: the hosts before it refused that one and hold the same as then."""
        table = self.table
        requests = lease.request.nodes
        nodes = dict(vm.nodes)
        held: dict[str, Resources] = {}
        for v, host in vm.nodes.items():
            if v not in moving:
                held[host] = add(held.get(host, NOTHING), requests[v])
        exclusive = lease.request.placement is not None and lease.request.placement.exclusive
        names, used, cap, count, _ = table.state_arrays(start)
        ranking = self.host_selection.rank_indices(used, cap, count).tolist()
        allowed = self.images.restrict(lease, self.allowed_hosts(lease))
        fit_at_start: dict[Resources, list[bool]] = {}   # request -> per row, whether it fits at `start`
        uniform = lease.request.uniform
        if uniform is not None:   # (VMs of one size: a host it does not fit at `start` is no candidate)
            fits = fit_at_start[uniform] = fits_rows(used, uniform, cap).tolist()
            ranking = [row for row in ranking if fits[row]]
        candidates = [(names[row], row) for row in ranking
                      if names[row] not in avoid and (allowed is None or names[row] in allowed)]
        spread = lease.request.placement is not None and lease.request.placement.spread
        went_to: dict[Resources, int] = {}   # request -> the candidate the last VM of that size went to
        for v in sorted(moving, key=lambda v: requests[v], reverse=True):
            request = requests[v]
            fits_now = fit_at_start.get(request)
            if fits_now is None:
                fits_now = fit_at_start[request] = fits_rows(used, request, cap).tolist()
            # (a VM like the last one fits on none of the hosts that one passed over: they hold the same)
            for i in range(went_to.get(request, 0), len(candidates)):
                host, row = candidates[i]
                if not fits_now[row] or (spread and host in held) or (exclusive and bool((used[row] > EPSILON).any())):
                    continue   # (with the lease's VMs there too, it fits even less; exclusive: not empty)
                trial = table.capacity(host) if exclusive else add(held.get(host, NOTHING), request)
                if table.fits(host, trial, start, end):
                    held[host] = trial
                    nodes[v] = host
                    went_to[request] = i
                    break
            else:
                return None
        return nodes

    def _build(self, lease: Lease, vm: Reservation, nodes: dict[int, str], moving: list[int],
               prediction: tuple[dict[int, PrecopyResult], dict[int, float]], m_start: datetime, m_end: datetime,
               end: datetime, needed_by: datetime) -> Evacuation:
        """`prediction`: per moving VM, the model's result and the bandwidth it was predicted at."""
        cfg = self.config
        predicted, rates = prediction
        requests = lease.request.nodes
        bandwidth = cfg.live_bandwidth
        held: dict[str, Resources] = {}
        exclusive = lease.request.placement is not None and lease.request.placement.exclusive
        for v in moving:
            src, dst = vm.nodes[v], nodes[v]
            if exclusive:   # (the destination whole; the source's network is the whole host its VM holds)
                held[dst], held[src] = self.table.capacity(dst), held.get(src, NOTHING)
                continue
            held[dst] = add(held.get(dst, NOTHING), requests[v])
            held[dst] = add(held[dst], self._metered(dst, Resources(0, 0, 0, bandwidth, 0)))
            held[src] = add(held.get(src, NOTHING), self._metered(src, Resources(0, 0, 0, 0, bandwidth)))
        # (a source keeps its entry even when it meters no network: the plan shows both ends)
        # the last moment a running migration may still finish: then the fallback (suspension) has just
        # the time it needs, plus a second for the daemon to notice
        fallback = self.fallback_time(lease)
        abort_at = max(m_end, needed_by - fallback - (_SLACK if fallback else ZERO))
        migration = Reservation(
            lease_id=lease.id, kind=ReservationKind.LIVE_MIGRATE, start=m_start, end=m_end, resources=held,
            transfers={v: (vm.nodes[v], nodes[v]) for v in moving},
            extra={
                "needed_by": iso(needed_by),
                "abort_at": iso(abort_at),
                "max_downtime_ms": cfg.max_downtime_ms,
                "downtime_limit_ms": downtime_limit_ms(cfg.max_downtime_ms, cfg.live_migration_switchover_ms),
                "bandwidth_mib_s": cfg.live_migration_bandwidth_limit or cfg.live_migration_bandwidth,
                "predicted": {str(v): {"seconds": predicted[v].total_seconds,
                                       "bandwidth_mib_s": rates[v],
                                       "downtime_ms": predicted[v].downtime_ms,
                                       "passes": predicted[v].passes,
                                       "disk_seconds": predicted[v].disk_seconds} for v in moving},
            },
        )
        per_host: dict[str, Resources] = {}
        for v, host in nodes.items():
            per_host[host] = (self.table.capacity(host) if exclusive
                              else add(per_host.get(host, NOTHING), requests[v]))
        continuation = Reservation(lease_id=lease.id, kind=ReservationKind.VM, start=m_end, end=end,
                                   resources=per_host, nodes=nodes, continues=True, pre=[migration])
        migration.vm = continuation
        vm.end = m_end
        vm.post = []
        return Evacuation(vm=vm, migration=migration, continuation=continuation, predicted=predicted)

    def _metered(self, host: str, amount: Resources) -> Resources:
        return metered(amount, self.table.capacity(host))
