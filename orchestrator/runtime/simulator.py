"""Run a workload on the simulated clock: the event loop (`orchestrator.runtime.eventloop`) steps the
simulator from one due time to the next, and the clock jumps, never sleeps.

At each step: events due now (early ends, reservations ending, reservations starting), then the
requests that arrived by now, then scheduling; repeated until nothing more happens at this time (which
covers zero-length reservations and leases scheduled to start right away); then the loop jumps the clock
to the next event or arrival.
"""

from __future__ import annotations

import gc
import math
import time
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from operator import attrgetter

from drivers.clock import SimulatedClock
from orchestrator.config import Config, resolve_site
from orchestrator.model.errors import InconsistentSchedule
from orchestrator.model.lease import Lease, LeaseType
from orchestrator.model.reservations import Reservation
from orchestrator.model.states import LeaseState
from orchestrator.model.timeutil import iso
from orchestrator.model.workload import Workload
from orchestrator.planning.lease_scheduler import LeaseScheduler
from orchestrator.planning.slottable.table import SlotTable
from orchestrator.runtime.eventloop import EventLoop

StepHook = Callable[[LeaseScheduler, datetime], None]
#: takes a finished lease and its workload id, as the lease finishes (see `Simulator`)
Retire = Callable[[Lease, str], None]


@contextmanager
def collector_for_a_run() -> Iterator[None]:
    """Python's cyclic garbage collector tuned for the length of one run, then put back as it was.

    A run allocates millions of small objects that live to its end (plans, leases, events), and the
    collector would walk them again and again: about a tenth of a KTH-SP2 run. During the run the
    objects that exist already (the workload) are left out of collection (`gc.freeze`), young objects
    are collected every 200,000 allocations instead of 700 and the survivors seldom walked again;
    garbage cycles are still freed."""
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(200_000, 1000, 1000)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


@dataclass
class SimulationResult:
    start: datetime
    end: datetime
    scheduler: LeaseScheduler
    workload_ids: dict[int, str]
    hosts: list[str]
    metrics: dict = field(default_factory=dict)

    @property
    def leases(self) -> list[Lease]:
        return [self.scheduler.leases[i] for i in sorted(self.scheduler.leases)]

    def to_json(self) -> dict:
        return {
            "leases": [lease_json(l, self.workload_ids.get(l.id, str(l.id))) for l in self.leases],
            "metrics": self.metrics,
        }


def record_hosts(rr: Reservation) -> list[str]:
    """The hosts a reservation's record lists, sorted: those it holds and both ends of its transfers, else
    its VMs' hosts. (A reservation that moves nothing lists the keys of its dict: no set in between, which
    for hundreds of hosts costs more than the sort.)"""
    if rr.resources and not rr.transfers:
        return sorted(rr.resources)
    hosts = set(rr.resources)
    for src, dst in rr.transfers.values():
        hosts.update((src, dst))
    if not hosts:
        hosts.update(rr.nodes.values())
    return sorted(hosts)


def reservation_json(rr: Reservation) -> dict:
    return {"kind": rr.kind.value, "start": iso(rr.start), "end": iso(rr.end), "hosts": record_hosts(rr)}


def lease_json(lease: Lease, workload_id: str) -> dict:
    parts = [rr for vm in lease.reservations for rr in vm.all_parts()]
    return {
        "id": workload_id,
        "type": lease.type.value,
        "state": lease.state.value,
        "submit": iso(lease.submit_time),
        "start": iso(lease.start_time),
        "end": iso(lease.end_time) if lease.state is LeaseState.DONE else None,
        "reason": lease.reason or None,
        **({"placement": lease.request.placement.describe()} if lease.request.placement is not None else {}),
        "reservations": [reservation_json(rr) for rr in parts],
    }


class Simulator:
    """What the event loop steps on the simulated clock: arrivals fed to the scheduler, no enactment."""

    def __init__(self, workload: Workload, config: Config, on_step: StepHook | None = None,
                 progress: Callable[[int, int], None] | None = None, retire: Retire | None = None):
        """`retire`: given, every lease is handed to it once finished (the rest at the end of the run) and
        then dropped, so memory follows the leases alive at once; the result then holds no leases."""
        self.workload = workload
        self.config = config
        self.on_step = on_step
        self.progress = progress
        self.retire = retire
        hosts = resolve_site(workload, config)
        self.table = SlotTable(hosts)
        self.scheduler = LeaseScheduler(self.table, config.scheduling)
        for host, properties in workload.properties.items():
            self.scheduler.host_facts.set_properties(host, properties)
        self.tally = LeaseTally(config.simulation.start)
        if retire is not None:
            self.scheduler.finished = []
        self.clock = SimulatedClock(config.simulation.start)
        self._ids: dict[int, str] = {}
        self._arrived = 0
        self._passes_per_instant = 100_000

    def run(self, max_steps_per_instant: int = 100_000) -> SimulationResult:
        """`max_steps_per_instant`: scheduling passes at one time before it counts as no progress."""
        self._passes_per_instant = max_steps_per_instant
        with collector_for_a_run():
            wall = time.perf_counter()
            # one step per instant: a step repeats its passes until nothing more happens at its time
            EventLoop(self.clock, self, max_steps_at_same_time=1).run()
            sched = self.scheduler
            rest = [sched.leases[i] for i in sorted(sched.leases)]
            for lease in rest:
                self.tally.add(lease)
            if self.retire is not None:
                for lease in rest:
                    self._retire(lease)
            result = SimulationResult(start=self.config.simulation.start, end=self.clock.now(),
                                      scheduler=sched, workload_ids=self._ids, hosts=self.table.hosts)
            result.metrics = self.tally.metrics(result, self.table, wall_seconds=time.perf_counter() - wall)
            return result

    def _retire(self, lease: Lease) -> None:
        if self.retire is not None:
            self.retire(lease, self._ids.pop(lease.id))
        self.scheduler.retire(lease)

    # -- what the event loop steps ---------------------------------------------------------------------------
    def start(self) -> datetime | None:
        """The first step is at the first arrival, if that comes after the configured start."""
        arrivals = self.workload.requests
        return arrivals[0][1].submit_time if arrivals else None

    def step_at(self, now: datetime) -> datetime | None:
        sched = self.scheduler
        arrivals = self.workload.requests
        total = len(arrivals)
        nxt = self._arrived
        first = True
        for _ in range(self._passes_per_instant):
            handled = sched.process_events(now)
            arrived = False
            while nxt < total and arrivals[nxt][1].submit_time <= now:
                wid, request = arrivals[nxt]
                lease = sched.submit(request, now)
                self._ids[lease.id] = wid
                nxt += 1
                arrived = True
            if not (handled or arrived or first):
                break
            sched.schedule(now)
            first = False
        else:
            raise InconsistentSchedule(f"no progress at {now}: events keep being created at the same time")
        self._arrived = nxt
        if self.on_step is not None:
            self.on_step(sched, now)
        finished = sched.finished
        if finished:
            for lease in finished:
                self.tally.add(lease)
                self._retire(lease)
            finished.clear()
        if self.progress is not None:
            self.progress(nxt, total)
        following = sched.next_event_time()
        if nxt < total:
            arrival = arrivals[nxt][1].submit_time
            if following is None or arrival < following:
                following = arrival
        return following

    def is_idle(self) -> bool:
        sched = self.scheduler
        return self._arrived == len(self.workload.requests) and not sched.queue and not sched.pending


#: a host's CPU in a reservation's amount there
_cpu = attrgetter("cpu")


class LeaseTally:
    """What the metrics need of each lease, a few numbers in columns, taken when it is finished: the
    lease itself can then go. The sums are taken in lease id order, whatever order the leases came in,
    so the metrics do not depend on whether leases were dropped as they finished."""

    _KINDS = (LeaseType.ADVANCE_RESERVATION, LeaseType.BEST_EFFORT, LeaseType.IMMEDIATE)

    def __init__(self, start: datetime) -> None:
        self._start = start
        self._ids = array("q")
        self._kinds = array("b")       # index in _KINDS
        self._flags = array("b")       # 1: done, 2: rejected
        self._waits = array("d")       # best-effort done: wait (nan: never started); else nan
        self._slowdowns = array("d")   # best-effort done: bounded slowdown; else nan
        self._ends = array("d")        # best-effort done: seconds from the start to its end; else nan
        self._used_ids = array("q")    # (lease id, CPU seconds) for each VM reservation that ran
        self._used = array("d")

    def add(self, lease: Lease) -> None:
        nan = math.nan
        self._ids.append(lease.id)
        kind = lease.type
        self._kinds.append(self._KINDS.index(kind))
        done = lease.state is LeaseState.DONE
        self._flags.append((1 if done else 0) | (2 if lease.state is LeaseState.REJECTED else 0))
        end_time = lease.end_time
        if kind is LeaseType.BEST_EFFORT and done and end_time is not None:   # (a done lease has an end)
            start_time = lease.start_time
            self._waits.append((start_time - lease.submit_time).total_seconds() if start_time else nan)
            run = lease.accumulated.total_seconds()
            turnaround = (end_time - lease.submit_time).total_seconds()
            self._slowdowns.append(max(turnaround / max(run, 10.0), 1.0))
            self._ends.append((end_time - self._start).total_seconds())
        else:
            self._waits.append(nan)
            self._slowdowns.append(nan)
            self._ends.append(nan)
        for vm in lease.reservations:
            if vm.end > vm.start and vm.state.value == "done":
                self._used_ids.append(lease.id)
                # (the same sum, left to right, without a generator's step per host: a big lease holds hundreds)
                self._used.append(sum(map(_cpu, vm.resources.values())) / 100 * (vm.end - vm.start).total_seconds())

    def metrics(self, result: SimulationResult, table: SlotTable, wall_seconds: float) -> dict:
        ids = self._ids
        order = sorted(range(len(ids)), key=ids.__getitem__)
        be = self._KINDS.index(LeaseType.BEST_EFFORT)
        kinds, flags = self._kinds, self._flags
        be_done = [i for i in order if kinds[i] == be and flags[i] & 1]
        waits = [self._waits[i] for i in be_done if not math.isnan(self._waits[i])]
        slowdowns = [self._slowdowns[i] for i in be_done]
        start = result.start
        if start != self._start:
            raise ValueError(f"the tally counts from {self._start}, the result from {start}")
        last_be_end = max((self._ends[i] for i in be_done), default=None)
        used_cpu_seconds = 0.0
        for i in sorted(range(len(self._used_ids)), key=self._used_ids.__getitem__):
            used_cpu_seconds += self._used[i]
        total_cpus = sum(table.capacity(h).cpu for h in table.hosts) / 100
        span = (result.end - start).total_seconds()

        def count(kind: LeaseType, accepted: bool) -> int:
            k = self._KINDS.index(kind)
            return sum(1 for i in range(len(ids)) if kinds[i] == k and bool(flags[i] & 2) != accepted)

        counters = result.scheduler.counters
        return {
            "all_best_effort_seconds": last_be_end if last_be_end is not None else 0.0,
            "be_wait_mean_seconds": sum(waits) / len(waits) if waits else 0.0,
            "be_bounded_slowdown_mean": sum(slowdowns) / len(slowdowns) if slowdowns else 0.0,
            "utilization": used_cpu_seconds / (total_cpus * span) if span > 0 and total_cpus else 0.0,
            "ar_accepted": count(LeaseType.ADVANCE_RESERVATION, True),
            "ar_rejected": count(LeaseType.ADVANCE_RESERVATION, False),
            "im_accepted": count(LeaseType.IMMEDIATE, True),
            "im_rejected": count(LeaseType.IMMEDIATE, False),
            "leases_done": sum(1 for f in flags if f & 1),
            "leases_total": len(ids),
            "suspensions": counters["suspensions"],
            "requeues": counters["requeues"],
            "migrations": counters["migrations"],
            "image_migrations": counters["image_migrations"],
            "predicted_downtime_ms_total": counters["predicted_downtime_ms_total"],
            "premature_ends": counters["premature_ends"],
            "simulated_seconds": span,
            "wall_seconds": wall_seconds,
        }


def check_invariants(sched: LeaseScheduler, now: datetime) -> None:
    """What must hold after every step of any simulation (used by the tests after each event)."""
    bad = sched.table.overcommitted()
    if bad:
        host, t, used = bad[0]
        raise AssertionError(f"{now}: host {host} over capacity at {t}: {used}")
    for lease in sched.leases.values():
        if lease.type is LeaseType.ADVANCE_RESERVATION and lease.start_time is not None:
            if lease.start_time != lease.request.start:
                raise AssertionError(f"AR lease {lease.id} started at {lease.start_time}, asked {lease.request.start}")
        if lease.state is LeaseState.DONE:
            expected = lease.request.duration
            if lease.type is LeaseType.ADVANCE_RESERVATION:
                # an AR's slot is exact: its shutdown is carved from the end of the slot
                expected -= sched.vm.overheads.shutdown_time(lease)
            if lease.request.real_duration is not None:
                expected = min(expected, lease.request.real_duration)
            if lease.accumulated != expected:
                raise AssertionError(f"lease {lease.id} done after {lease.accumulated} of run, expected {expected}")
        for vm in lease.reservations:
            for rr in vm.all_parts():
                if rr.end < rr.start:
                    raise AssertionError(f"lease {lease.id}: reservation {rr!r} ends before it starts")
