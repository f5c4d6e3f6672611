"""The daemon: enacts the plan on a clock through a driver, and keeps the store in step with the hosts.

Each step takes the store's write lock (through a `ClusterSession`: the cluster rebuilt from the store, or
the server's kept in memory), takes the outcomes of the operations that finished since the last step,
looks at the hosts (VMs that stopped by themselves end their lease early; VMs that vanished are lost),
handles every reservation event that is due, schedules what arrived, writes back, records the operations
the plan asked for in the store's intent log, and commits. Only then are the operations carried out, by
the operation runner, off the lock: in order on each host, side by side across hosts, so a 30 s shutdown
holds up neither the other hosts nor anyone submitting a lease. An operation that failed is handed back
to the scheduler at the next step (the lease fails, or a live migration falls back) as if it had failed
in its own step. On a fast-forwarded clock a step waits for its operations, so runs are reproducible.

Recovery, on start before the first step (the intent log's unfinished operations run again, then the store
reconciled with the hosts), is orchestrator/runtime/recovery.py's; watching what the hosts run and which of
them are silent is orchestrator/runtime/host_watch.py's.

The hosts are the store's and the driver's as they are at each step: a server adds and removes hosts while
its daemon runs (its driver learns and forgets them), so the daemon keeps no list of its own.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any
from pathlib import Path

from drivers.base import Driver
from drivers.errors import DriverError, VMNotFound
from drivers.gil_sharing import sharing_the_gil
from drivers.clock import Clock, SimulatedClock
from orchestrator.config import Config, SchedulingConfig
from orchestrator.model.errors import InconsistentSchedule
from orchestrator.model.lease import Lease
from orchestrator.model.states import LeaseState
from orchestrator.model.timeutil import iso, parse_time
from orchestrator.planning.enactment import EnactmentError, Operation, operations_of
from orchestrator.runtime import recovery
from orchestrator.runtime.dirty_rates import DirtyRateSampler, RunningVM
from orchestrator.runtime.driver_enactor import DriverEnactor, UnreachableHosts
from orchestrator.runtime.driver_factory import make_driver
from orchestrator.runtime.eventloop import EventLoop, RunResult
from orchestrator.runtime.host_watch import (LEASES_PER_PAUSE, LIVE, HostWatch, Listings, ListingsRead, minutes_text,
                                             read_listings)
from orchestrator.runtime.intents import RELEASE, STRAY, Intent, IntentCollector, IntentTag, reservation_hosts
from orchestrator.runtime.learner import learn
from orchestrator.runtime.netprobe import PingProbe
from orchestrator.runtime.notices import NoticeSender
from orchestrator.runtime.notifiers import make_notifiers
from orchestrator.runtime.operation_runner import Job, OperationRunner, Outcome
from orchestrator.state.calibrated import CALIBRATION_KEY, apply_calibration
from orchestrator.state.cluster import Cluster
from orchestrator.state.session import ClusterSession, FreshCluster
from orchestrator.state.store import Store

log = logging.getLogger(__name__)

#: an operation of the plan -> the name its per-VM events give it
_ENACTOR_NAMES = {"start_vms": "start", "stop_vms": "stop", "kill_vms": "kill", "suspend_vms": "suspend",
                  "resume_vms": "resume", "migrate_images": "move_state"}
#: the longest pause between two tries of an operation a silent host holds up
_RETRY_PAUSE_MAX = timedelta(minutes=1)
#: leases in these states have no VM running anywhere
_NOT_RUNNING = (LeaseState.PENDING, LeaseState.QUEUED, LeaseState.SCHEDULED, LeaseState.SUSPENDED_PENDING,
                LeaseState.SUSPENDED_QUEUED, LeaseState.SUSPENDED_SCHEDULED)


@dataclass
class StepReport:
    time: datetime
    next_event: datetime | None
    idle: bool
    notes: list[str] = field(default_factory=list)


class Daemon:
    def __init__(self, store: Store, config: Config, driver: Driver, clock: Clock,
                 say: Callable[[str], None] | None = None, *, session: ClusterSession | None = None,
                 collector: IntentCollector | None = None, workers: int | None = None):
        """`session`: how each step gets the cluster (default: rebuilt from `store` in each step); its
        scheduler's enactor must be `collector`. `workers`: operations run at once (default: one on a
        fast-forwarded clock, which keeps runs reproducible, else `[daemon] parallel_operations`)."""
        self.store = store
        self.config = config
        self.driver = driver
        self.clock = clock
        self.say = say or (lambda line: None)
        self._notes: list[str] = []
        self._reconciled_at: datetime | None = None
        self._looked_at: datetime | None = None   # when the hosts were last listed
        self._release_failures: dict[int, tuple[datetime, int]] = {}   # lease -> next try, tries so far
        self._releasing: set[int] = set()
        # intent-log record -> its operation held up by a silent host, and when to try it next (while it
        # runs again it is the runner's); and how many times each such operation was tried
        self._waiting: dict[int, tuple[Job, datetime]] = {}
        self._tries: dict[int, int] = {}
        self._strays: set[tuple[str, str]] = set()    # (host, VM) being stopped or reported
        # the leases as the last step left them, and the cluster they belong to (read off the lock)
        self._leases: list[Lease] = []
        self._leases_of: Cluster | None = None
        self._idle = False
        self._serial: dict[object, datetime] = {}   # a fast clock's live migration -> when its next VM starts
        self._recorded: deque[tuple[datetime, str, int | None, dict]] = deque()   # from the runner's threads
        self.wakeup = threading.Event()
        hosts = {h.name: h.config for h in store.hosts()}
        # a real driver's live migrations are watched from the network too (the outage users see)
        probe = None if driver.name == "simulated" else PingProbe
        self.enactor = DriverEnactor(driver, hosts, config.daemon, record=self._record, now=clock.now, probe=probe,
                                     dirty_rate=config.scheduling.dirty_rate)
        self.operations = {op.value: call for op, call in operations_of(self.enactor).items()}
        self.watch = HostWatch(store, driver, self.enactor, config.daemon)
        self.collector = collector if collector is not None else IntentCollector()
        self.session = session if session is not None else FreshCluster(store, config, self.collector)
        if workers is None:
            workers = config.daemon.parallel_operations if clock.moves_by_itself else 1
        self.runner = OperationRunner(workers, on_finish=self.wakeup.set)
        self.dirty_rates = DirtyRateSampler(driver, config.daemon.dirty_rate_interval, config.daemon.dirty_rate_sample)
        notifiers = make_notifiers(config.notify)
        # (the server's writer connection is for its scheduler's transactions: notices get one of their own)
        notice_store = Store.open(store.path, any_thread=True) if session is not None and notifiers else store
        self.notices = NoticeSender(notice_store, config.notify, notifiers, config.notify.email.address_of)
        self._own_stores = [notice_store] if notice_store is not store else []

    # -- logging into the store -------------------------------------------------------------------------
    def _record(self, kind: str, lease_id: int | None, detail: dict) -> None:
        """An operation's report (called on the runner's threads): kept until the step writes it."""
        now = self.clock.now()
        wall = detail.get("wall_seconds")
        if isinstance(wall, (int, float)):
            # when the operation ran, for `leasewise report`: it has just ended on a clock that moves by
            # itself; a fast-forwarded clock stands still while the (simulated) driver spends its time, so
            # the operations of a step ran side by side as planned, except the live migrations of one
            # reservation, which run one after the other (as the plan has them)
            took = timedelta(seconds=wall)
            started = now - took if self.clock.moves_by_itself else now
            if not self.clock.moves_by_itself and detail.get("reservation_kind") == "live-migrate":
                started = self._serial.get(detail.get("reservation"), now)
                self._serial[detail.get("reservation")] = started + took
            detail = {**detail, "enacted_start": iso(started), "enacted_end": iso(started + took)}
        self._recorded.append((now, kind, lease_id, detail))

    def _write_recorded(self, cluster: Cluster) -> None:
        """The operations' reports into the event log; what the enacted ones teach of the model's rates into
        the store and the cluster's planner (orchestrator.runtime.learner). Each in one write, however
        many reports the step found (it holds the scheduler's lock)."""
        events: list[tuple[datetime, str, int | None, dict]] = []
        enacted: list[tuple[dict, float | None, datetime]] = []
        while self._recorded:
            at, kind, lease_id, detail = self._recorded.popleft()
            events.append((at, kind, lease_id, detail))
            if kind == "enacted":
                enacted.append((detail, _memory_of(cluster, lease_id, detail.get("vnode")), at))
            what = " ".join(f"{k}={v}" for k, v in detail.items() if k in ("operation", "vm", "host", "error"))
            self._notes.append(f"{kind} lease {lease_id}: {what}")
        self.store.append_events(events)
        if learn(self.store, cluster.scheduling, cluster.scheduler.vm.overheads, enacted):
            cluster.refresh_learned()

    # -- operations off the lock ----------------------------------------------------------------------------
    def make_jobs(self, intents: list[Intent], now: datetime) -> list[Job]:
        """Each intent written to the intent log (inside the step's transaction) and made a runner job."""
        jobs = []
        for intent in intents:
            rr = intent.reservation
            hosts = intent.hosts
            record = self.store.add_operation(now, intent.operation.value, intent.lease.id, rr.id, hosts)
            call = partial(self.operations[intent.operation.value], intent.lease, rr)
            jobs.append(Job(call, hosts, intent.lease.id,
                            IntentTag(record, intent.operation.value, intent.lease.id, rr.id, due=now)))
        return jobs

    def _release_jobs(self, now: datetime) -> list[Job]:
        """Clean up after leases that finished (ended, cancelled, failed): what they left on the hosts goes;
        a host that cannot be reached keeps it until a later step."""
        later = {i for i, (due, _) in self._release_failures.items() if due > now}
        return [self.release_job(lease, now) for lease in self.store.unreleased_leases(skip=self._releasing | later)]

    def release_job(self, lease: Lease, now: datetime, record: int | None = None) -> Job:
        """A finished lease's cleanup as a job on every host it used (`record`: its intent log entry, if any)."""
        hosts = frozenset(h for vm in lease.reservations for rr in vm.all_parts() for h in reservation_hosts(rr))
        if record is None:
            record = self.store.add_operation(now, RELEASE, lease.id, None, hosts)
        self._releasing.add(lease.id)
        return Job(partial(self.enactor.release, lease), hosts, lease.id, IntentTag(record, RELEASE, lease.id))

    def _take_outcomes(self, cluster: Cluster, now: datetime) -> bool:
        """Write what finished since the last look; failures go back to the scheduler. True if the plan
        changed (the step then handles what that made due)."""
        changed = False
        outcomes = self.runner.take_outcomes()
        self._write_recorded(cluster)
        for outcome in outcomes:
            changed |= self._take_outcome(cluster, outcome, now)
        return changed

    def _take_outcome(self, cluster: Cluster, outcome: Outcome, now: datetime) -> bool:
        tag: IntentTag = outcome.job.tag
        error = outcome.error
        if error is not None and not isinstance(error, EnactmentError):
            log.error("lease %s: %s failed unexpectedly: %r", tag.lease_id, tag.operation, error, exc_info=error)
            error = EnactmentError(f"{tag.operation}: {type(error).__name__}: {error}")
        if tag.operation == RELEASE:
            self._releasing.discard(tag.lease_id)
            if error is not None:
                self.store.finish_operation(tag.record, now, "failed", str(error))
                tries = self._release_failures[tag.lease_id][1] + 1 if tag.lease_id in self._release_failures else 1
                if tries == 1:   # (`lease show` lists it: the lease's time is over, not yet all it left)
                    self._notes.append(f"lease {tag.lease_id}: cleanup waits: {error}")
                    self.store.append_event(now, "cleanup-waits", tag.lease_id, error=str(error))
                self._release_failures[tag.lease_id] = (now + self._pause(tries), tries)
                return False
            removed = outcome.result or []
            self._release_failures.pop(tag.lease_id, None)
            self.store.finish_operation(tag.record, now, "done")
            self.store.mark_released(tag.lease_id)
            self.store.append_event(now, "released", tag.lease_id, removed=removed)
            if removed:
                self._notes.append(f"lease {tag.lease_id}: removed {', '.join(removed)}")
            return False
        if tag.operation == STRAY:
            assert tag.where is not None   # (a stray's job names its (host, VM))
            self._strays.discard(tag.where)
            self.store.finish_operation(tag.record, now, "failed" if error else "done", str(error) if error else None)
            host, vm = tag.where
            if error is not None:
                self._notes.append(f"lease {tag.lease_id}: could not stop {vm}, left running on {host}: {error}")
            elif outcome.result:
                self._notes.append(f"lease {tag.lease_id}: stopped {vm}, left running on {host}")
                self.store.append_event(now, "reconciled", tag.lease_id, outcome="stopped-stray", host=host, vm=vm)
            return False
        if error is None:
            self._tries.pop(tag.record, None)
            self.store.finish_operation(tag.record, now, "done")
            return False
        if isinstance(error, UnreachableHosts) and tag.operation != Operation.LIVE_MIGRATE.value:
            # (a live migration has its own deadline: its fallback is decided now)
            since = tag.due or now
            if now - since < self.config.daemon.host_timeout:
                tries = self._tries[tag.record] = self._tries.get(tag.record, 0) + 1
                if tries == 1:
                    self._notes.append(f"lease {tag.lease_id}: {tag.operation} waits for "
                                       f"{', '.join(error.hosts)} to answer: {error}")
                self._waiting[tag.record] = (outcome.job, now + self._pause(tries))
                return False
            silent = error.hosts
            error = EnactmentError(f"{error} (no answer for {minutes_text(now - since)})")
            # (its attempts were logged as "enactment-waits": the outcome is a failure `report` shows)
            self.store.append_event(now, "enactment-failed", tag.lease_id,
                                    operation=_ENACTOR_NAMES.get(tag.operation, tag.operation),
                                    host=silent[0] if silent else None, error=str(error),
                                    reservation=tag.reservation_id)
        self._tries.pop(tag.record, None)
        self.store.finish_operation(tag.record, now, "failed", str(error))
        return cluster.scheduler.enactment_failed(Operation(tag.operation), tag.lease_id, tag.reservation_id,
                                                  error, now)

    # -- recovery -------------------------------------------------------------------------------------------
    def reconcile(self) -> list[str]:
        """Compare the store with the hosts once, at start (orchestrator/runtime/recovery.py)."""
        now = self.clock.now()
        notes = recovery.reconcile(self, now)
        self._reconciled_at = now
        for line in notes:
            self.say(line)
        return notes

    # -- one step ------------------------------------------------------------------------------------------
    def step(self) -> StepReport:
        """One step at the clock's time (the event loop's steps go through `step_at`)."""
        return self._step(self.clock.now())

    def _step(self, now: datetime) -> StepReport:
        self._notes = []
        self._serial = {}
        first = True
        # (at the reconciled instant the hosts were judged already)
        due = self._look_due(now)
        looking = due and now != self._reconciled_at
        if looking:
            self._looked_at = now
        busy, listings = self._look_at_hosts(now) if looking else (set(), {})
        busy |= {job.lease_id for job, _ in self._waiting.values() if job.lease_id is not None}
        # (what the listings say, read before the lock from the leases as the last step left them)
        read = read_listings(self._leases, listings) if looking else ListingsRead()
        read_from = self._leases_of
        while True:
            with self.session.open() as cluster:
                sched = cluster.scheduler
                if cluster is not read_from:   # (rebuilt since: those lease objects are not the plan's)
                    read = ListingsRead(read.copies)
                self._follow_hosts(cluster)
                if first and looking:
                    self.watch.apply_losses(cluster, now, self._notes)
                changed = self._take_outcomes(cluster, now)
                if first and looking:
                    self.watch.notice_ended_vms(cluster, now, busy, listings, self._notes, read.as_planned)
                if first or changed:
                    for _ in range(10_000):
                        handled = sched.process_events(now)
                        sched.schedule(now)
                        if not handled:
                            break
                    else:
                        raise InconsistentSchedule(f"no progress at {now}")
                cluster.save(now)
                jobs = self.make_jobs(self.collector.take(), now)
                # (strays judged by the plan as this step leaves it: a lease this step or a request
                # since the hosts were listed gave an operation is not judged by that listing)
                running = {job.lease_id for job in jobs if job.lease_id is not None}
                strays = (self._stray_jobs(cluster, now, busy | self.runner.busy_leases() | running, read)
                          if first and looking else [])
                jobs = cleanups_first(jobs, self._release_jobs(now)) + strays
                if first:   # (a cleanup that failed, or an operation a silent host held up, is tried again
                    # at the next step, not at once; the latter before this step's, in their order)
                    jobs = self._waiting_jobs(cluster, now) + jobs
                self.store.set_meta("daemon_clock", iso(now))
                self.watch.save()
                following = sched.next_event_time()
                idle = following is None and not sched.queue and not sched.pending and not self._waiting
                if self._waiting:   # (a step when the first of them is to be tried again)
                    again = min(due for _, due in self._waiting.values())
                    following = again if following is None else min(following, max(again, now))
                self._leases, self._leases_of = list(sched.leases.values()), cluster
            self.runner.submit_all(jobs)   # outside the store's lock
            first = False
            if self.clock.moves_by_itself or not self.runner.pending():
                break
            # a fast-forwarded clock stands still while its operations run: their outcomes are this step's
            self.runner.wait_idle()
        # (the sampler keeps the hosts' pace: on the wall clock, once per poll interval at most)
        if due:
            rates: list[tuple[RunningVM, datetime, float]] = []
            disks: list[tuple[RunningVM, datetime, float]] = []
            self.dirty_rates.step(now, self._running_vms(self._leases, now), lambda *m: rates.append(m),
                                  lambda *m: disks.append(m))
            self._record_measurements(rates, disks)
        # end-of-lease notices, outside the lock as well: a slow mail server holds up this step, not the store
        reminder = self.notices.step(now, self._leases if self.notices.enabled else [])
        following = reminder if following is None or (reminder is not None and reminder < following) else following
        for line in self._notes:
            self.say(f"{iso(now)} {line}")
        return StepReport(time=now, next_event=following, idle=idle, notes=list(self._notes))

    def _look_due(self, now: datetime) -> bool:
        """Whether this step lists the hosts. On the wall clock, once per poll interval at most: requests
        wake the daemon many times a second, and each look asks every host for its VMs. A simulated clock
        looks at every step (its steps are the plan's events)."""
        if not self.clock.moves_by_itself or self._looked_at is None:
            return True
        return not self._looked_at <= now < self._looked_at + self.config.daemon.poll_interval

    def _running_vms(self, leases: list[Lease], now: datetime) -> list[RunningVM]:
        """The VMs the plan has running at `now` (none while the sampler is off), from the leases as the
        step left them, read off the lock (requests may change them meanwhile: a VM that stops between is
        a sample that fails, as one stopping during its sampling)."""
        if not self.dirty_rates.enabled:
            return []
        running = []
        for lease in sharing_the_gil(leases, LEASES_PER_PAUSE):
            if lease.state is not LeaseState.ACTIVE:
                continue
            vm = lease.last_vm
            try:
                if vm is not None and vm.start <= now < vm.end:
                    running += [RunningVM(lease.id, v, self.enactor.vm_name(lease.id, v)) for v in sorted(vm.nodes)]
            except RuntimeError:   # (its nodes changed while read: sampled at the next look)
                continue
        return running

    def _record_measurements(self, rates: list[tuple[RunningVM, datetime, float]],
                             disks: list[tuple[RunningVM, datetime, float]]) -> None:
        """The dirty rates (MiB/s) and disk allocations (MiB) the sampler read in this step, in one write:
        each write takes the scheduler's lock, which the requests wait for, and a flush to disk."""
        if not rates and not disks:
            return
        with self.session.open():
            self.store.record_measurements([(vm.lease_id, vm.vnode, at, mib_s) for vm, at, mib_s in rates],
                                           [(vm.lease_id, vm.vnode, at, mib) for vm, at, mib in disks])

    def _look_at_hosts(self, now: datetime) -> tuple[set[int], Listings]:
        """Before the lock: the leases with an operation under way, then what each host runs (its list of
        VMs, or the error it gave), each host asked once. A lease busy now is left alone in the step; one
        not busy now cannot get an operation before the step (only the step hands them out). Also keeps
        when each host that does not answer went silent."""
        busy = self.runner.busy_leases()
        return busy, self.watch.look(now, self._notes)

    def _follow_hosts(self, cluster: Cluster) -> None:
        """The enactor's settings of each host (where its save images go) as the store has them now. The
        map is replaced whole, never changed in place: the runner's threads read it."""
        configs = {name: record.config for name, record in cluster.hosts.items()}
        if configs != self.enactor.hosts:
            self.enactor.hosts = configs

    def _pause(self, tries: int) -> timedelta:
        """How long after its `tries`-th failed try an operation is tried again: a poll interval, then
        twice as long each time, at most a minute (a silent host is not asked many times a second)."""
        poll = self.config.daemon.poll_interval
        return min(poll * 2 ** min(tries - 1, 16), max(_RETRY_PAUSE_MAX, poll))

    def _waiting_jobs(self, cluster: Cluster, now: datetime) -> list[Job]:
        """The operations silent hosts held up, handed in again while their lease still needs them."""
        jobs = []
        for record, (job, due) in list(self._waiting.items()):
            tag: IntentTag = job.tag
            lease = cluster.scheduler.leases.get(tag.lease_id)
            if lease is None or lease.is_final or cluster.scheduler.find_part(tag.lease_id, tag.reservation_id) is None:
                # (a finished lease's VMs are its cleanup's; a plan that moved on has its own operations)
                del self._waiting[record]
                self._tries.pop(record, None)
                self.store.finish_operation(record, now, "abandoned")
                continue
            if now >= due:
                del self._waiting[record]
                jobs.append(Job(job.run, job.hosts, job.lease_id, tag))
        return jobs

    def _stray_jobs(self, cluster: Cluster, now: datetime, busy: set[int], read: ListingsRead) -> list[Job]:
        """Stop what runs where its lease has nothing running: a host that answers again after its lease was
        given up, ended or requeued; a copy beside the one the plan runs. A domain whose lease is not known
        is reported once at start (`reconcile`); a VM found on another host than the plan's (and only
        there) is the plan's business, not a stray. Running leases whose copies the listings showed on
        their own hosts are not looked at again."""
        found: dict[int, list[tuple[str, str]]] = {}
        for lease_id, copies in read.copies.items():
            if lease_id in read.on_their_hosts:
                continue
            copies = [(host, name) for host, name in copies if (host, name) not in self._strays]
            if copies:
                found[lease_id] = copies
        sched = cluster.scheduler
        gone = [i for i in found if i not in sched.leases or sched.leases[i].is_final]
        ended = self.store.lease_states(gone)
        jobs = []
        for lease_id, copies in sorted(found.items()):
            if lease_id in busy or lease_id in self._releasing:
                continue
            lease = sched.leases.get(lease_id)
            if lease is None or lease.is_final:
                if not ended.get(lease_id, (None, False))[1]:
                    continue   # unknown (reported at start), or its cleanup is still to come
                strays = copies
            elif lease.state in _NOT_RUNNING:
                strays = copies
            elif lease.state in LIVE:
                planned = {h for vm in (lease.open_vms() or lease.reservations[-1:]) for h in vm.nodes.values()}
                strays = [(h, name) for h, name in copies
                          if h not in planned and any(o != h and o in planned for o, n in copies if n == name)]
            else:
                continue
            # (a lease that goes on keeps its disks: the stray copy may share them with the copy that runs
            # or will resume, so it is only discarded; a finished lease's copy goes with its storage)
            final = lease is None or lease.is_final
            for host, name in strays:
                self._strays.add((host, name))
                record = self.store.add_operation(now, STRAY, lease_id, None, [host])
                jobs.append(Job(partial(self._stop_stray, name, host, final), frozenset({host}), lease_id,
                                IntentTag(record, STRAY, lease_id, where=(host, name))))
        return jobs

    def _stop_stray(self, name: str, host: str, with_storage: bool) -> bool:
        """Stop `name` on `host` at once (its storage too if `with_storage`, else only the domain); False if
        it was gone already (stopped by its lease's own operation)."""
        try:
            if not with_storage:
                return self.driver.discard(name, host)
            self.driver.stop(name, graceful_timeout=0.0, host=host)
        except VMNotFound:
            return False
        except DriverError as exc:
            raise EnactmentError(f"stop {name} on {host}: {exc}") from exc
        return True

    # -- what the event loop steps -------------------------------------------------------------------------
    def start(self) -> datetime | None:
        """Reconcile the store with the hosts before the first step, which is due at once."""
        self.reconcile()
        return None

    def step_at(self, now: datetime) -> datetime | None:
        report = self._step(now)
        self._idle = report.idle
        return report.next_event

    def is_idle(self) -> bool:
        return self._idle and not self.runner.pending()

    def finish(self) -> None:
        """Wait for the operations under way and write their outcomes (a run that stops leaves none unwritten)."""
        self.runner.wait_idle()
        now = self.clock.now()
        self._notes = []
        with self.session.open() as cluster:
            self._take_outcomes(cluster, now)
            cluster.save(now)
        for line in self._notes:
            self.say(f"{iso(now)} {line}")
        self._notes = []

    def close(self) -> None:
        """Finish, and let the runner's threads go."""
        try:
            self.finish()
        finally:
            self.runner.close()
            for extra in self._own_stores:
                extra.close()

    def run(self, until_idle: bool = False, until: datetime | None = None, max_steps: int | None = None,
            loop: EventLoop | None = None) -> RunResult:
        """Reconcile, then step until stopped by Ctrl-C (or idle / past `until` / after `max_steps`).

        Between steps it waits for the next event, or at most `[daemon] poll_interval` on a clock that
        moves by itself (leases submitted by other processes are picked up then), or until an operation
        ends; a fast-forwarded clock jumps to the next event, and by `poll_interval` when nothing is
        planned. Operations under way when it stops are waited for and their outcomes written."""
        loop = loop or EventLoop(self.clock, self, poll=self.config.daemon.poll_interval, wakeup=self.wakeup)
        try:
            return loop.run(until=until, until_idle=until_idle, max_steps=max_steps, stop_on_interrupt=True)
        finally:
            self.close()


def cleanups_first(jobs: list[Job], cleanups: list[Job]) -> list[Job]:
    """The step's operations with the cleanups of leases that finished: each right after its lease's own
    operations of the step (a cancelled lease's kill first), ahead of every other lease's. The plan has
    given the room of a lease that ended (cancelled, failed) to others already: a start there must wait
    until what it left on the hosts is gone (the runner keeps the order on each host)."""
    last_own = {job.lease_id: i for i, job in enumerate(jobs)}
    ordered = [c for c in cleanups if c.lease_id not in last_own]
    after: dict[int, list[Job]] = {}
    for cleanup in cleanups:
        if cleanup.lease_id in last_own:
            after.setdefault(last_own[cleanup.lease_id], []).append(cleanup)
    for i, job in enumerate(jobs):
        ordered += [job, *after.get(i, ())]
    return ordered


def _memory_of(cluster: Cluster, lease_id: int | None, vnode: Any) -> float | None:
    """MiB of memory of the lease's VM `vnode`, when the cluster holds the lease."""
    lease = cluster.scheduler.leases.get(lease_id) if lease_id is not None else None
    if lease is None or not isinstance(vnode, int) or not 0 <= vnode < lease.numnodes:
        return None
    return float(lease.request.nodes[vnode].memory)


def fast_clock_start(store: Store, default: datetime) -> datetime:
    """Where a fast-forwarded daemon resumes: the time of its last committed step, if any."""
    saved = store.get_meta("daemon_clock")
    return parse_time(saved, "daemon_clock") if saved else default


def simulated_driver_for(store: Store, state_file: Path | None, scheduling: SchedulingConfig):
    """A simulated driver whose hosts are the store's (capacities), kept in `state_file` if given, whose
    operations take what the planner gives them with `scheduling` and the store's calibration (the
    cluster plans with the same: `Cluster.scheduling`).

    It gets its own clock: operations cost it time without moving the daemon's clock."""
    hosts = store.hosts()
    clock = SimulatedClock(fast_clock_start(store, datetime.now().astimezone()))
    return make_driver("simulated", [h.config for h in hosts],
                       capacities={h.name: (h.vcpus, h.memory_mib) for h in hosts}, clock=clock, state_file=state_file,
                       planned=apply_calibration(scheduling, store.get_meta(CALIBRATION_KEY)))
