"""The simulated clock around the plain scheduler, and what is compared: every lease's plan and fate.

At each instant: the events due, then the leases that arrived, then a scheduling step; again while
anything happened (a lease planned to start at once); then the clock jumps to the next event or arrival.
"""

from __future__ import annotations

from datetime import datetime

from orchestrator.config import SchedulingConfig
from orchestrator.model.lease import Lease
from orchestrator.model.workload import Workload
from orchestrator.planning.slottable.table import SlotTable
from tests.oracle.lease_scheduler import LeaseScheduler


def simulate(workload: Workload, config: SchedulingConfig) -> LeaseScheduler:
    scheduler = LeaseScheduler(SlotTable(workload.site), config)
    arrivals = sorted(workload.requests, key=lambda wr: wr[1].submit_time)
    arrived = 0
    now: datetime | None = arrivals[0][1].submit_time if arrivals else None
    while now is not None:
        first = True
        while True:
            handled = scheduler.process_events(now)
            came = False
            while arrived < len(arrivals) and arrivals[arrived][1].submit_time <= now:
                scheduler.submit(arrivals[arrived][1], now)
                arrived += 1
                came = True
            if not (handled or came or first):
                break
            scheduler.schedule(now)
            first = False
        following = scheduler.next_event_time()
        if arrived < len(arrivals) and (following is None or arrivals[arrived][1].submit_time < following):
            following = arrivals[arrived][1].submit_time
        now = following
    if scheduler.queue or scheduler.pending:
        raise AssertionError(f"leases left waiting with nothing planned: {scheduler.queue + scheduler.pending}")
    return scheduler


def records(leases: dict[int, Lease]) -> list[tuple]:
    """Per lease: its fate, its first start and end, and every reservation of its plan (kind, times,
    hosts, state)."""
    out = []
    for lease_id in sorted(leases):
        lease = leases[lease_id]
        parts = [(rr.kind.value, rr.start, rr.end, tuple(sorted(rr.resources)), tuple(sorted(rr.nodes.items())),
                  tuple(sorted(rr.transfers.items())), rr.state.value)
                 for vm in lease.reservations for rr in vm.all_parts()]
        out.append((lease_id, lease.state.value, lease.start_time, lease.end_time, lease.accumulated,
                    lease.suspensions, lease.requeues, lease.migrations, parts))
    return out
