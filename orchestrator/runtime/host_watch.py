"""The daemon's watch over the hosts: what each host runs (each asked once per step), since when each host
that does not answer has been silent, and what that says about the leases: VMs that stopped by themselves
end their lease early, VMs that vanished are lost, VMs found running on other hosts than the plan's are
followed there.

A host silent for `[daemon] host_timeout` is lost (it lost its power, or might as well have): the plan
moves everything off it (`Cluster.lose_host`: best-effort leases requeued, advance reservations placed
again elsewhere or failed, their owners told by their `ended` notice) and plans nothing on it until it
answers again. When it does, the definitions of VMs it had (shut off by the power cut) are removed, not
started, before anything may be planned there; a VM still running there (a host that was only cut off) is
stopped as a stray by the daemon.

The silences and the lost hosts are kept in the store (`silent_hosts`, `down_hosts`), so a daemon restarted
does not reset them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from drivers.base import Driver, VMInfo
from drivers.errors import DriverError
from drivers.gil_sharing import sharing_the_gil
from orchestrator.config import DaemonConfig
from orchestrator.model.lease import Lease
from orchestrator.model.states import LeaseState
from orchestrator.model.timeutil import iso, parse_time
from orchestrator.runtime.driver_enactor import ACTIVE_STATES, DriverEnactor, UnreachableHosts, parse_vm_name, vm_name
from orchestrator.state.cluster import DOWN_HOSTS, Cluster
from orchestrator.state.store import Store

log = logging.getLogger(__name__)

#: the store's record of the hosts that do not answer, and since when
SILENT_HOSTS = "silent_hosts"

#: what each host answered when asked for its VMs: the list, or the error it gave
Listings = dict[str, list[VMInfo] | DriverError]
#: a lease whose VMs exist on hosts (running, or started and ready to resume)
LIVE = (LeaseState.ACTIVE, LeaseState.RESUMED_READY)
#: leases read between two pauses for the request threads (see drivers.gil_sharing)
LEASES_PER_PAUSE = 500


class HostWatch:
    def __init__(self, store: Store, driver: Driver, enactor: DriverEnactor, config: DaemonConfig):
        self.store = store
        self.driver = driver
        self.enactor = enactor
        self.config = config
        # host -> when it was first found not answering (kept in the store: a restart does not reset it)
        self.silent_since: dict[str, datetime] = {
            h: parse_time(t, f"{SILENT_HOSTS}.{h}") for h, t in (store.get_meta(SILENT_HOSTS) or {}).items()}
        self._saved = dict(self.silent_since)
        #: host -> since when it is lost (the plan holds it); read from the store once, kept in step with it
        self.down: dict[str, datetime] = {
            h: parse_time(t, f"{DOWN_HOSTS}.{h}") for h, t in (store.get_meta(DOWN_HOSTS) or {}).items()}
        self._back: set[str] = set()                           # lost hosts that answer again
        self._forgotten: list[tuple[str, str, int, str]] = []   # (host, VM, lease, its state) discarded
        enactor.lost_hosts = frozenset(self.down)

    # -- asking the hosts ---------------------------------------------------------------------------------
    def list_hosts(self) -> Listings:
        """What each host runs: its list of VMs, or the error it gave (`Driver.list_every_host`: hosts
        reached over a network are asked at once and waited for `[daemon] answer_timeout` at most)."""
        return self.driver.list_every_host()

    def look(self, now: datetime, notes: list[str]) -> Listings:
        """Every host's listing, and when each host that does not answer went silent (a note when a host
        goes silent or answers again)."""
        listings = self.list_hosts()
        for host in [h for h in self.silent_since if h not in listings]:   # removed: not silent, gone
            del self.silent_since[host]
        for host, listed in listings.items():
            if isinstance(listed, Exception):
                if host not in self.silent_since:
                    self.silent_since[host] = now
                    notes.append(f"host {host} does not answer: {listed}")
                continue
            since = self.silent_since.pop(host, None)
            if since is not None:
                notes.append(f"host {host} answers again (silent for {minutes_text(now - since)})")
            if host in self.down and host not in self._back:
                self._forget_stale(host, listed, notes)
        return listings

    def _forget_stale(self, host: str, listed: list[VMInfo], notes: list[str]) -> None:
        """A lost host answers again: the leases' VMs it kept (shut off by a power cut, or run on through a
        network cut) are discarded, their storage left alone (a copy started elsewhere may share it): every
        lease on the host moved off it when it was lost. A saved one (a suspended lease's definition, whose
        memory image is there) stays. Only then may the plan use the host again."""
        for info in listed:
            parsed = parse_vm_name(info.name)
            if parsed is None or info.state == "saved":
                continue
            try:
                removed = self.driver.discard(info.name, host)
            except DriverError as exc:
                notes.append(f"host {host}: could not discard {info.name}: {exc}")
                return   # (tried again at the next step; the host stays held until then)
            if removed:
                self._forgotten.append((host, info.name, parsed[0], info.state))
                notes.append(f"lease {parsed[0]}: discarded {info.name}, which {host} kept ({info.state}): "
                             "not started again")
        self._back.add(host)

    def apply_losses(self, cluster: Cluster, now: datetime, notes: list[str]) -> None:
        """In the step: hosts silent past the timeout are lost (the plan moves off them); lost hosts whose
        stale definitions are gone may be planned on again."""
        for host, vm, lease_id, state in self._forgotten:
            self.store.append_event(now, "reconciled", lease_id, outcome="discarded-left-on-lost-host", host=host,
                                    vm=vm, state=state)
        self._forgotten = []
        for host in sorted(self._back):
            if host in self.down:
                back = cluster.host_back(host, now)
                notes.append(f"host {host} is back after {minutes_text(back)} lost: leases may be planned on it again")
                del self.down[host]
        self._back = set()
        for host in [h for h in self.down if h not in cluster.hosts]:   # removed from the cluster meanwhile
            cluster.host_back(host, now)
            del self.down[host]
        timeout = self.config.host_timeout
        for host, since in sorted(self.silent_since.items()):
            if host in self.down or host not in cluster.hosts or now - since < timeout:
                continue
            reason = f"host {host} has not answered for {minutes_text(now - since)} (lost)"
            loss = cluster.lose_host(host, since, now, reason)
            self.down[host] = since
            notes.append(f"{reason}: nothing is planned on it until it answers")
            for item in loss.leases:
                notes.append(f"lease {item.lease_id}: {item.outcome}: {item.detail}")
        self.enactor.lost_hosts = frozenset(self.down)

    def save(self) -> None:
        """Write the silences to the store when they changed (inside the step's transaction)."""
        if self.silent_since != self._saved:
            self.store.set_meta(SILENT_HOSTS, {h: iso(t) for h, t in self.silent_since.items()})
            self._saved = dict(self.silent_since)

    # -- what the listings say about the leases ---------------------------------------------------------------
    def notice_ended_vms(self, cluster: Cluster, now: datetime, busy: set[int], listings: Listings,
                         notes: list[str], as_planned: frozenset[int] = frozenset()) -> None:
        """Leases whose VMs all stopped by themselves are done early; VMs that vanished are lost. A lease
        with an operation under way is left alone: its VMs may be on their way; so is one the listings
        showed running as planned (`as_planned`, read before the lock)."""
        sched = cluster.scheduler
        for lease in [one for one in sched.leases.values()
                      if one.state is LeaseState.ACTIVE and one.id not in as_planned]:
            vm = lease.last_vm
            if vm is None or vm.start > now or stop_due(lease, now) or lease.id in busy:
                continue   # (a stop or suspension due now explains VMs that are gone: it is handled next)
            try:
                running = self.enactor.running_vms(lease, listings)
            except UnreachableHosts as exc:
                # a host that does not answer says nothing about its VMs: decide when it has been silent too long
                timeout = self.config.host_timeout
                silent = [h for h in exc.hosts if h in self.silent_since and now - self.silent_since[h] >= timeout]
                if silent:
                    requeue = self.config.on_lost_vm == "requeue"
                    reason = (f"host {', '.join(silent)} has not answered for "
                              f"{minutes_text(now - min(self.silent_since[h] for h in silent))}")
                    sched.lose(lease.id, now, requeue=requeue, reason=reason)
                    notes.append(f"lease {lease.id}: {reason}: {'requeued' if requeue else 'failed'}")
                continue
            missing = sorted(v for v, host in running.items() if host is None)
            if missing and self.follow_moved(cluster, lease, missing, listings, now, notes):
                continue
            if any(host is not None for host in running.values()):
                continue
            states = self._vm_states(lease, listings)
            if states and all(state == "shutoff" for state in states.values()):
                sched.end_early(lease.id, now)
                notes.append(f"lease {lease.id}: its VMs shut down by themselves: done early")
            else:
                requeue = self.config.on_lost_vm == "requeue"
                sched.lose(lease.id, now, requeue=requeue, reason="its VMs are gone from their hosts")
                notes.append(f"lease {lease.id}: VMs gone: {'requeued' if requeue else 'failed'}")

    def follow_moved(self, cluster: Cluster, lease: Lease, missing: list[int], listings: Listings,
                     now: datetime, notes: list[str]) -> bool:
        """The lease's `missing` VMs (not on their planned hosts) all found running on other hosts: the plan
        follows them there when those hosts have the room (`LeaseScheduler.relocate`). True if it did."""
        found: dict[int, str] = {}
        for vnode in missing:
            name = self.enactor.vm_name(lease.id, vnode)
            for host, listed in listings.items():
                if not isinstance(listed, Exception) and any(i.name == name and i.state in ACTIVE_STATES
                                                             for i in listed):
                    found[vnode] = host
        if len(found) < len(missing) or not cluster.scheduler.relocate(lease.id, found, now):
            return False
        where = ", ".join(f"{self.enactor.vm_name(lease.id, v)} on {h}" for v, h in sorted(found.items()))
        notes.append(f"lease {lease.id}: found {where}, not where the plan had them: the plan follows")
        self.store.append_event(now, "reconciled", lease.id, outcome="adopted",
                                moved={str(v): h for v, h in found.items()})
        return True

    def _vm_states(self, lease: Lease, listings: Listings) -> dict[str, str]:
        """VM name -> its state on its planned host, for the lease's VMs that are still defined there."""
        vm = lease.last_vm
        names = {self.enactor.vm_name(lease.id, v): h for v, h in vm.nodes.items()} if vm else {}
        states: dict[str, str] = {}
        for host in set(names.values()):
            listed = listings.get(host)
            if listed is None or isinstance(listed, Exception):   # unreachable: nothing known, decide nothing
                log.warning("cannot list VMs on %s: %s", host, listed)
                return {}
            for info in listed:
                if names.get(info.name) == host:
                    states[info.name] = info.state
        return states


@dataclass(frozen=True)
class ListingsRead:
    """What one look at the hosts says of the leases, worked out before the step takes the store's lock
    (the lock every request waits for): the step's own checks then look only at the leases not settled
    here. Read from the leases as an earlier step left them, while requests may change them: a lease
    changed under the read is simply not settled. Settling a lease only ever spares the step a check
    whose outcome, with these listings, is to leave it alone."""
    #: lease -> (host, VM) of each of its VMs found running or paused, on any host
    copies: dict[int, list[tuple[str, str]]] = field(default_factory=dict)
    #: active leases whose every VM runs on a host of their plan (nothing ended, nothing lost)
    as_planned: frozenset[int] = frozenset()
    #: running leases none of whose copies runs off the hosts of their plan (no stray to stop)
    on_their_hosts: frozenset[int] = frozenset()


def read_listings(leases: Iterable[Lease], listings: Listings) -> ListingsRead:
    """Outside the lock: the copies of each lease's VMs the listings show, and the leases they settle."""
    running_on: dict[str, set[str]] = {}
    copies: dict[int, list[tuple[str, str]]] = {}
    for host, listed in listings.items():
        if isinstance(listed, Exception):
            continue
        names = running_on[host] = set()
        for info in listed:
            if info.state in ACTIVE_STATES:
                names.add(info.name)
                parsed = parse_vm_name(info.name)
                if parsed is not None:
                    copies.setdefault(parsed[0], []).append((host, info.name))
    as_planned, on_their_hosts = set(), set()
    for lease in sharing_the_gil(leases, LEASES_PER_PAUSE):
        try:
            if lease.state not in LIVE:
                continue
            found = copies.get(lease.id, ())
            if not found and lease.state is not LeaseState.ACTIVE:   # (most leases: planned, nothing listed)
                on_their_hosts.add(lease.id)
                continue
            planned = {h for vm in (lease.open_vms() or lease.reservations[-1:]) for h in vm.nodes.values()}
            if all(h in planned for h, _ in found):
                on_their_hosts.add(lease.id)
            if lease.state is LeaseState.ACTIVE and all(
                    any(vm_name(lease.id, v) in running_on.get(h, ()) for h in planned)
                    for v in range(lease.numnodes)):
                as_planned.add(lease.id)
        except RuntimeError:   # (a dict of its plan changed while read: the step looks at it)
            continue
    return ListingsRead(copies, frozenset(as_planned), frozenset(on_their_hosts))


def minutes_text(span: timedelta) -> str:
    """`45 s`, `2 min`, `3 min 10 s`."""
    minutes, seconds = divmod(round(span.total_seconds()), 60)
    if not minutes:
        return f"{seconds} s"
    return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"


def stop_due(lease: Lease, by: datetime) -> bool:
    """Whether the lease's plan stops or saves its VMs at or before `by`."""
    vm = lease.last_vm
    return vm is not None and any(rr.start <= by for rr in vm.post)
