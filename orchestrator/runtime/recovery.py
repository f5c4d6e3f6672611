"""The daemon's recovery, once at start before its first step: the operations of the intent log that never
ended are run again (every operation accepts its own outcome as done: a start finds the VM running, a stop
finds none), then the store is reconciled with what the hosts really run: a VM the store thinks is running
but is gone fails or requeues its lease (`[daemon] on_lost_vm`); a VM that runs and belongs to a lease is
adopted; a `lw-*` domain no lease accounts for is reported, never touched.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Protocol

from orchestrator.config import Config
from orchestrator.model.lease import Lease
from orchestrator.model.reservations import Reservation
from orchestrator.model.timeutil import iso, parse_time
from orchestrator.runtime.driver_enactor import DriverEnactor, UnreachableHosts
from orchestrator.runtime.host_watch import LIVE, HostWatch, Listings, stop_due
from orchestrator.runtime.intents import RELEASE, Intent, IntentCollector, IntentTag, snapshot
from orchestrator.runtime.operation_runner import Job, OperationRunner
from orchestrator.state.cluster import Cluster
from orchestrator.state.session import ClusterSession
from orchestrator.state.store import Store


class Daemon(Protocol):
    """What recovery uses of the daemon (orchestrator/runtime/daemon.py's `Daemon`)."""

    store: Store
    config: Config
    session: ClusterSession
    enactor: DriverEnactor
    watch: HostWatch
    collector: IntentCollector
    runner: OperationRunner
    operations: dict[str, Callable[[Lease, Reservation], None]]   # the enactor's, by operation name

    def make_jobs(self, intents: list[Intent], now: datetime) -> list[Job]: ...

    def release_job(self, lease: Lease, now: datetime, record: int | None = None) -> Job: ...


def reconcile(daemon: Daemon, now: datetime) -> list[str]:
    """Compare the store with the hosts once, at start (`now`); the operations run again are handed to the
    daemon's runner. The notes say what was found."""
    notes: list[str] = []
    store = daemon.store
    with daemon.session.open() as cluster:
        known: set[str] = set()
        again = resume_operations(daemon, cluster, now, notes, known)
        resumed = {job.lease_id for job in again}
        # a daemon killed mid-step may have enacted that step's stops and suspensions without
        # committing them: VMs whose stop was due by then are not lost, the first step redoes it.
        # Restarted on a real clock, that step was due by now; resumed on a fast clock (from the time
        # of the last committed step), it was the next event's step.
        horizon = now
        listings: Listings | None = None   # (every host's VMs, asked once if needed)
        saved = store.get_meta("daemon_clock")
        following = cluster.scheduler.next_event_time()
        if saved and parse_time(saved, "daemon_clock") == now and following is not None:
            horizon = max(now, following)
        for lease in list(cluster.scheduler.leases.values()):
            vm = lease.last_vm
            if vm is None:
                continue
            for vnode in vm.nodes:
                known.add(daemon.enactor.vm_name(lease.id, vnode))
            if lease.state not in LIVE or lease.id in resumed:
                continue
            try:
                running = daemon.enactor.running_vms(lease)
            except UnreachableHosts as exc:
                notes.append(f"lease {lease.id}: cannot check its VMs now ({exc}); looked at again later")
                continue
            missing = sorted(v for v, host in running.items() if host is None)
            if missing and stop_due(lease, horizon):
                notes.append(f"lease {lease.id}: VMs already stopped or saved for the step due at "
                             f"{iso(horizon)}: it will be completed")
                continue
            if not missing:
                notes.append(f"lease {lease.id}: adopted its {len(running)} running VM(s)")
                store.append_event(now, "reconciled", lease.id, outcome="adopted")
                continue
            if listings is None:
                listings = daemon.watch.list_hosts()
            if daemon.watch.follow_moved(cluster, lease, missing, listings, now, notes):
                continue
            requeue = daemon.config.daemon.on_lost_vm == "requeue"
            reason = f"VM(s) {', '.join(daemon.enactor.vm_name(lease.id, v) for v in missing)} gone from their hosts"
            cluster.scheduler.lose(lease.id, now, requeue=requeue, reason=reason)
            notes.append(f"lease {lease.id}: {reason}: {'requeued' if requeue else 'failed'}")
            store.append_event(now, "reconciled", lease.id, outcome="requeued" if requeue else "failed",
                               reason=reason)
        for host, name in daemon.enactor.unknown_domains(known):
            notes.append(f"unknown domain {name} on {host}: left alone")
            store.append_event(now, "reconciled", None, outcome="unknown-domain", host=host, vm=name)
        # no scheduling here: the first step handles the events due now first, then schedules
        cluster.save(now)
        again += daemon.make_jobs(daemon.collector.take(), now)   # (a requeued lease's VMs are killed)
    daemon.runner.submit_all(again)
    return notes


def resume_operations(daemon: Daemon, cluster: Cluster, now: datetime, notes: list[str], known: set[str]) -> list[Job]:
    """Jobs running again the operations of the intent log that never ended, in their order: each
    host sees them as it would have (a VM stopped before the next one starts in its place). The VMs
    of the leases cleaned up go into `known`."""
    store = daemon.store
    again: list[Job] = []
    unreleased: dict[int, Lease] | None = None
    for record in store.unfinished_operations():
        lease = cluster.scheduler.leases.get(record.lease_id) if record.lease_id is not None else None
        if record.operation == RELEASE or lease is None or lease.is_final:
            # a finished lease's unfinished stops are its cleanup's, run at this point of the order
            if unreleased is None:
                unreleased = {l.id: l for l in store.unreleased_leases()}
            finished = unreleased.pop(record.lease_id, None) if record.lease_id is not None else None
            if record.operation != RELEASE or finished is None:
                store.finish_operation(record.id, now, "abandoned")
            if finished is not None:
                if finished.last_vm is not None:
                    known.update(daemon.enactor.vm_name(finished.id, v) for v in finished.last_vm.nodes)
                again.append(daemon.release_job(finished, now, record.id if record.operation == RELEASE else None))
                notes.append(f"lease {finished.id}: its cleanup was under way when the daemon stopped: run again")
            continue
        rr = cluster.scheduler.find_part(lease.id, record.reservation_id) if record.reservation_id is not None else None
        if rr is None:
            # a plan that moved on has its own operations
            store.finish_operation(record.id, now, "abandoned")
            continue
        lease_copy, rr_copy = snapshot(lease, rr)
        again.append(Job(partial(daemon.operations[record.operation], lease_copy, rr_copy),
                         frozenset(record.hosts), lease.id,
                         IntentTag(record.id, record.operation, lease.id, rr.id, due=record.created_at)))
        notes.append(f"lease {lease.id}: {record.operation} was under way when the daemon stopped: run again")
    return again
