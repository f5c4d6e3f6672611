"""The cluster as the commands and the daemon see it: the lease scheduler over what the store holds.

Every operation is: open a write transaction on the store, rebuild the scheduler from it (hosts, leases,
their unfinished reservations), apply the operation, write back what changed, commit. Two processes
doing this at once are serialised by SQLite's write lock, so nothing is double-booked; one that waits
longer than the store's busy timeout is told to retry.

A submission or an extension is checked against its owner's quota and its owner's groups' quotas first
(`orchestrator.model.quota`), against what the live leases hold: one over quota raises `QuotaExceeded`
before anything is written or an id is taken.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta

from orchestrator.config import Config
from orchestrator.model.lease import Lease, LeaseRequest
from orchestrator.model.placement import refusal
from orchestrator.model.quota import Holding, check_extension, check_request, holdings_by_user, latest_start
from orchestrator.model.reservations import Reservation
from orchestrator.model.resources import Resources
from orchestrator.model.site import check_site_can_hold, site_shape
from orchestrator.model.states import FINAL_STATES, LeaseState
from orchestrator.model.timeutil import FOREVER, UTC, iso, parse_time
from orchestrator.planning.enactment import Enactor
from orchestrator.planning.free_slots import Window
from orchestrator.planning.drain import DrainPlan
from orchestrator.planning.host_loss import HostLoss, hold, lose_host
from orchestrator.planning.image_filter import ImageHolders
from orchestrator.planning.lease_scheduler import LeaseScheduler
from orchestrator.planning.slottable.table import SlotTable
from orchestrator.state.answers import moved_entry, submit_answer
from orchestrator.state.calibrated import CALIBRATION_KEY, apply_calibration
from orchestrator.state.groups import unix_groups
from orchestrator.state.learned import learned_rates
from orchestrator.state.store import Store, reservation_detail

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: store meta: the hosts the daemon found lost (silent past its host_timeout), and since when; nothing is
#: planned on them until they answer again
DOWN_HOSTS = "down_hosts"

#: every state but the final ones
LIVE_STATES = tuple(s for s in LeaseState if s not in FINAL_STATES)


class Cluster:
    def __init__(self, store: Store, config: Config, enactor: Enactor | None = None, live_only: bool = False,
                 groups_of: Callable[[str], frozenset[str]] = unix_groups):
        """`live_only`: leave finished leases in the store (the daemon's steps never change them, and a
        long history would otherwise be read at every step). `groups_of`: a user's Unix groups, for group
        quotas (the system's by default)."""
        self.store = store
        self.config = config
        self.groups_of = groups_of
        hosts = store.hosts()
        self.hosts = {h.name: h for h in hosts}
        self.site = site_shape(h.capacity for h in hosts)   # (a drain changes no host's capacity)
        self.table = SlotTable([(h.name, h.capacity) for h in hosts])
        self.table.skip_ids(store.max_reservation_id())
        # the model's parameters measured by `leasewise calibrate` take the place of the configured ones
        self.scheduling = apply_calibration(config.scheduling, store.get_meta(CALIBRATION_KEY))
        self.scheduler = LeaseScheduler(self.table, self.scheduling, enactor,
                                        ImageHolders(store.image_holders(), self.hosts))
        self.refresh_learned()
        for host in hosts:   # (what leases' constraints are tested on)
            self.scheduler.host_facts.set_properties(host.name, host.config.property_map)
        leases = store.leases(state=LIVE_STATES) if live_only else store.load_leases()
        self._live = {l.id for l in leases if not l.is_final}
        self._workload_ids = store.workload_ids()
        # (as last written: `save` writes them again only when they change)
        self._future_written: list[int] = store.get_meta("future_leases", []) or []
        self._counters_written: dict[str, float] = store.get_meta("counters", {}) or {}
        self.scheduler.restore(leases, future=self._future_written, counters=self._counters_written)
        for host in hosts:
            if not host.available:   # drained: nothing may be planned there from then on
                self.scheduler.block_host(host.name, host.unavailable_from or _EPOCH)
        for name, since in self.down_hosts().items():   # lost: nothing planned there until it answers
            if name in self.hosts:
                hold(self.scheduler, name, since)
        self._seen = {l.id: len(l.history) for l in leases}
        self._planned = {l.id: _plan_of(l) for l in leases if not l.is_final}
        # lease id -> its signature when last written: as read back, nothing to write
        self._written: dict[int, tuple] = {l.id: _signature(l) for l in leases if not l.is_final}
        # lease id -> (state, last VM reservation's id, start, end, whether it ends in a suspension) when
        # last written: what a submission's answer compares to name the leases it moved
        self._shown: dict[int, tuple] = {l.id: _shown(l) for l in leases if not l.is_final}
        # the leases the scheduler changes from now on (the table's, and those it notes itself)
        self._changed: set[int] = set()
        self.table.changed_leases = self._changed

    def refresh_learned(self) -> None:
        """The rates the daemon learned from its operations read again from the store (orchestrator.state.
        learned): the next plans use them."""
        self.scheduler.vm.overheads.rates = learned_rates(self.store)

    def refresh_images(self) -> None:
        """The planner's image filter read again from the store (an image added, or copied to more hosts)."""
        self.scheduler.set_image_holders(ImageHolders(self.store.image_holders(), self.hosts))

    # -- operations ---------------------------------------------------------------------------------------
    def submit(self, request: LeaseRequest, now: datetime, workload_id: str | None = None) -> Lease:
        """Admit and schedule a request at once: the lease comes back scheduled, queued or rejected.
        `QuotaExceeded` (nothing written) when it would take its owner or a group of theirs over a quota."""
        quotas = self.store.quotas()
        if quotas:
            check_request(request, now, quotas, self.holdings(), self.groups_of, self._largest_host(request))
            latest = latest_start(request, now, quotas, self.groups_of) if request.earliest else None
            if latest is not None:   # (the earliest start is looked for no further ahead than the quota allows)
                bound = latest + request.duration
                request = replace(request, not_after=bound if request.not_after is None
                                  else min(request.not_after, bound))
        lease_id = self.store.next_lease_id()
        lease = self.scheduler.submit(request, now, lease_id=lease_id)
        self._live.add(lease.id)
        if workload_id is not None:
            self._workload_ids[lease.id] = workload_id
        window = {"start": "earliest", "not_before": iso(request.start),
                  "not_after": iso(request.not_after)} if request.earliest else {}
        placed = {} if request.placement is None else {"placement": request.placement.describe()}
        self.store.append_event(now, "submitted", lease.id, type=lease.type.value, nodes=lease.numnodes,
                                duration_s=request.duration.total_seconds(), **window, **placed)
        self.scheduler.schedule(now)
        return lease

    def admit(self, request: LeaseRequest, now: datetime) -> dict:
        """A lease request as a user makes it (`lease submit`, or through the server): refused at once when no
        set of hosts could hold it, its VMs given MAC addresses on the lab network, submitted; the
        submission's answer (its plan, and the leases it preempted or moved)."""
        check_site_can_hold(self.site, request.numnodes, request.nodes[0])
        if request.guest is not None and request.guest.network:
            macs = self.store.allocate_macs(request.numnodes)
            request = replace(request, guest=replace(request.guest, macs=macs))
        lease = self.submit(request, now)
        return submit_answer(lease, self.moved(lease.id))

    def cancel(self, lease_id: int, now: datetime) -> Lease:
        lease = self.scheduler.cancel(lease_id, now)
        self.scheduler.schedule(now)
        return lease

    def extend(self, lease_id: int, by: timedelta, now: datetime) -> Lease:
        """Lengthen a lease; `QuotaExceeded` (nothing changed) when the longer lease is over a quota."""
        current = self.scheduler.lease(lease_id)
        quotas = self.store.quotas()
        if quotas and not current.is_final:   # (a finished lease: the scheduler says why it cannot grow)
            check_extension(current, by, quotas, self.holdings(), self.groups_of)
        lease = self.scheduler.extend(lease_id, by, now)
        self.store.append_event(now, "extended", lease_id, by_s=by.total_seconds())
        return lease

    def shorten(self, lease_id: int, by: timedelta, now: datetime) -> Lease:
        """Make a lease shorter; what it frees is planned at once (leases planned later move earlier, the
        queue's leases may start)."""
        lease = self.scheduler.shorten(lease_id, by, now)
        self.store.append_event(now, "shortened", lease_id, by_s=by.total_seconds())
        self.scheduler.schedule(now)
        return lease

    def _largest_host(self, request: LeaseRequest) -> Resources | None:
        """For an exclusive request, the largest host its placement allows (what a quota counts per VM)."""
        placement = request.placement
        if placement is None or not placement.exclusive:
            return None
        allowed = [h.capacity for h in self.hosts.values() if placement.admits(h.config.property_map)]
        return max(allowed, key=lambda c: (c.cpu, c.memory), default=None)

    def stranded_by(self, host: str, properties: dict[str, str]) -> list[int]:
        """The live leases that `host`'s new properties would strand: planned there against their
        constraints, or left with no set of hosts that could ever meet their placement."""
        out = set()
        for rr in self.table.reservations_overlapping(_EPOCH, FOREVER, {host}):
            lease = self.scheduler.leases.get(rr.lease_id)
            if lease is None or lease.is_final:
                continue
            placement = lease.request.placement
            if placement is not None and not placement.admits(properties):
                out.add(lease.id)
        site = {name: dict(record.config.property_map) for name, record in self.hosts.items()}
        site[host] = properties
        out.update(self._unplaceable(site))
        return sorted(out)

    def stranded_without(self, host: str) -> dict[int, str]:
        """The live leases with a placement (constraints, spread, exclusive) that the hosts other than `host`
        could never hold, even empty: lease id -> why (`host remove` refuses to strand them)."""
        return self._unplaceable({name: dict(record.config.property_map)
                                  for name, record in self.hosts.items() if name != host})

    def _unplaceable(self, site: dict[str, dict[str, str]], empty: str = "no host would remain") -> dict[int, str]:
        """The live leases with a placement that these hosts (name -> properties) could never hold (`empty`:
        why, when there are none)."""
        capacity = {name: self.hosts[name].capacity for name in site}
        out = {}
        for lease in self.scheduler.leases.values():
            placement = lease.request.placement
            if placement is None or lease.is_final:
                continue
            why = refusal(placement, lease.request.nodes, site, capacity) if site else empty
            if why is not None:
                out[lease.id] = why
        return out

    def lease(self, lease_id: int) -> Lease:
        return self.scheduler.lease(lease_id)

    def free_windows(self, request: LeaseRequest, count: int, now: datetime) -> list[Window]:
        """The next `count` windows in which `request` (an earliest start's) would fit as an advance
        reservation submitted now: nothing is written, and no lease is made."""
        probe = Lease(id=-1, request=request)   # (an id no lease has: nothing of its own to step over)
        assert request.start is not None
        first = max(request.start, now + self.scheduling.non_schedulable_interval)
        return self.scheduler.vm.free_slots.windows(probe, first, request.not_after, request.duration, count)

    def holdings(self) -> dict[str, Holding]:
        """user -> what their live leases hold now."""
        return holdings_by_user(self.scheduler.leases.values())

    def drain(self, host: str, by: datetime, now: datetime) -> DrainPlan:
        """Plan the host empty by `by` (live migrations, else suspensions, else requeues) and mark it
        unavailable from then on."""
        plan = self.scheduler.drain(host, by, now)
        self.store.set_host_available(host, False, since=plan.unavailable_from)
        self.hosts[host] = self.store.host(host)
        self.scheduler.schedule(now)
        # the queued leases that no available host could ever hold: said, not refused (an undrain undoes a
        # drain; meanwhile they wait)
        available = {name: dict(r.config.property_map) for name, r in self.hosts.items() if r.available}
        for lease_id, why in self._unplaceable(available, "no host would remain available").items():
            if self.scheduler.leases[lease_id].state is LeaseState.QUEUED:
                waits = f"waits until a host is undrained: {why}"
                plan.leases[lease_id] = f"{plan.leases[lease_id]}; {waits}" if lease_id in plan.leases else waits
        self.store.append_event(now, "drained", None, host=host, unavailable_from=iso(plan.unavailable_from),
                                leases={str(i): what for i, what in plan.leases.items()})
        return plan

    def undrain(self, host: str, now: datetime) -> None:
        """Make a drained host available again; queued leases may use it at once."""
        self.scheduler.undrain(host, now)
        self.store.set_host_available(host, True)
        self.hosts[host] = self.store.host(host)
        self.store.append_event(now, "undrained", None, host=host)
        self.scheduler.schedule(now)

    # -- hosts lost and back ------------------------------------------------------------------------------
    def down_hosts(self) -> dict[str, datetime]:
        """The hosts found lost, and since when (`DOWN_HOSTS`)."""
        return {h: parse_time(t, f"{DOWN_HOSTS}.{h}") for h, t in (self.store.get_meta(DOWN_HOSTS) or {}).items()}

    def lose_host(self, host: str, since: datetime, now: datetime, reason: str) -> HostLoss:
        """`host` is lost (silent since `since`): its leases move off it (orchestrator/planning/host_loss.py),
        it is held until it answers again; events say what each lease lost."""
        loss = lose_host(self.scheduler, host, now, reason)
        down = {h: iso(t) for h, t in self.down_hosts().items()}
        self.store.set_meta(DOWN_HOSTS, {**down, host: iso(since)})
        self.store.append_event(now, "host-down", None, host=host, since=iso(since), reason=reason,
                                leases={str(item.lease_id): item.outcome for item in loss.leases})
        config = self.hosts[host].config
        for item in loss.leases:
            lease = self.scheduler.leases[item.lease_id]
            detail = item.detail
            if item.outcome == "requeued" and lease.state is LeaseState.QUEUED:
                detail += f"; {_disk_fate(lease, host, config.is_shared(config.vm_disk_dir))}"
            self.store.append_event(now, "host-lost", lease.id, host=host, outcome=item.outcome, detail=detail,
                                    lost_work_s=item.lost_work.total_seconds(), type=lease.type.value)
        return loss

    def host_back(self, host: str, now: datetime) -> timedelta:
        """A lost host answers again: leases may be planned on it (unless it is drained); how long it was lost."""
        down = self.down_hosts()
        since = down.pop(host, now)
        self.store.set_meta(DOWN_HOSTS, {h: iso(t) for h, t in down.items()})
        record = self.hosts.get(host)
        if record is not None and host in self.scheduler.blocks:
            if record.available:
                self.scheduler.undrain(host, now)
            else:   # (drained as well: held from the drain's own time again)
                self.scheduler.table.remove(self.scheduler.blocks.pop(host))
                self.scheduler.block_host(host, record.unavailable_from or _EPOCH)
        self.store.append_event(now, "host-up", None, host=host, since=iso(since),
                                down_s=max(now - since, timedelta(0)).total_seconds())
        self.scheduler.schedule(now)
        return now - since

    def workload_id(self, lease: Lease) -> str | None:
        return self._workload_ids.get(lease.id)

    # -- persistence --------------------------------------------------------------------------------------
    def unsaved(self) -> list[int]:
        """The live leases that may differ from what was last written, in id order: those whose
        reservations or state the scheduler changed. (A cluster kept in memory across transactions holds
        many leases, few of which a step changes: the others are not looked at.)"""
        return sorted(self._live.intersection(self._changed))

    def moved(self, skip: int) -> list[dict]:
        """The leases other than `skip` whose state or plan changed since the last write (a submission
        preempted, requeued or moved them), as a submission's answer lists them."""
        out = []
        for lease_id in self.unsaved():
            if lease_id == skip or lease_id not in self._shown:
                continue
            lease = self.scheduler.leases[lease_id]
            if _shown(lease) != self._shown[lease_id]:
                out.append(moved_entry(lease, self.table))
        return out

    def save(self, now: datetime) -> None:
        """Write back every lease that changed, and log what changed in its plan and state.

        Only the leases `unsaved` names are compared with what was last written; a lease whose state,
        history, counters and plan are as written is skipped; a lease that has become final is written one
        last time and then no longer looked at."""
        events: list[tuple[datetime, str, int, dict]] = []
        for lease_id in self.unsaved():
            lease = self.scheduler.leases[lease_id]
            signature = _signature(lease)
            if self._written.get(lease_id) == signature:
                continue
            seen = self._seen.get(lease_id)
            for at, state in lease.history[seen or 0:]:
                events.append((at, "state", lease_id, {
                    "state": state.value, **({"reason": lease.reason} if lease.reason and lease.is_final else {})}))
            plan = _plan_of(lease)
            if plan and plan != self._planned.get(lease_id):
                # a new plan, or one changed without a state change (an AR cutting a running lease short)
                events.append((now, "planned", lease_id,
                               {"reservations": [reservation_detail(rr) for rr in _current_parts(lease)]}))
            self.store.save_lease(lease, self._workload_ids.get(lease_id), new=seen is None)
            self._seen[lease_id] = len(lease.history)
            self._planned[lease_id] = plan
            self._written[lease_id] = signature
            self._shown[lease_id] = _shown(lease)
            if lease.is_final:
                self._live.discard(lease_id)
                self._written.pop(lease_id, None)
                self._shown.pop(lease_id, None)
        self.store.append_events(events)
        self._changed.clear()
        future, counters = sorted(self.scheduler.vm.future_leases), dict(self.scheduler.counters)
        if future != self._future_written:
            self.store.set_meta("future_leases", future)
            self._future_written = future
        if counters != self._counters_written:
            self.store.set_meta("counters", counters)
            self._counters_written = counters

    def plan(self, start: datetime | None = None, end: datetime | None = None) -> list[tuple[Lease, Reservation]]:
        """Every reservation of every lease meeting [start, end), in time order."""
        out = []
        for lease in self.scheduler.leases.values():
            for vm in lease.reservations:
                for rr in vm.all_parts():
                    if (end is None or rr.start < end) and (start is None or rr.end > start or rr.end == rr.start >= start):
                        out.append((lease, rr))
        out.sort(key=lambda pair: (pair[1].start, pair[0].id, pair[1].id))
        return out


def _disk_fate(lease: Lease, host: str, shared: bool) -> str:
    """What becomes of a requeued lease's disks when it starts again after `host` was lost."""
    if lease.request.image is None:
        return "it has no disk of its own"
    if lease.request.guest is not None and lease.request.guest.keep_disks and shared:
        return "its kept disks on shared storage are used again"
    if shared:
        return "its disk overlays on shared storage are replaced: it starts again from its image"
    return f"its disk overlays were on {host}'s own storage: it starts again from its image"


def _current_parts(lease: Lease) -> list[Reservation]:
    """The reservations of the lease's current plan: its open VM reservations (two while it is being
    evacuated), else its last one, with their overheads."""
    return [rr for vm in (lease.open_vms() or lease.reservations[-1:]) for rr in vm.all_parts()]


def _signature(lease: Lease) -> tuple:
    """Everything of a lease `save` writes that can change: equal signatures, nothing to write."""
    return (lease.state, len(lease.history), lease.accumulated, lease.reason, lease.suspensions, lease.migrations,
            lease.requeues, lease.start_time, lease.end_time, lease.request.duration, len(lease.reservations),
            tuple((rr.id, rr.state, rr.start, rr.end, tuple(rr.nodes.items()), rr.premature_end, rr.continues)
                  for vm in lease.reservations for rr in vm.all_parts()))


def _shown(lease: Lease) -> tuple:
    vm = lease.last_vm
    return (lease.state, None if vm is None else (vm.id, vm.start, vm.end, vm.is_suspending))


def _plan_of(lease: Lease) -> tuple:
    """What the lease's current plan says (kinds, times, hosts), to notice that it changed."""
    return tuple((rr.kind.value, rr.start, rr.end, tuple(sorted(rr.resources))) for rr in _current_parts(lease))
