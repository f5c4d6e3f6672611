"""Free slots at scale: `plan --free` and a `--start earliest` submission on a big, busy plan, in-process.

    python benchmarks/free_slots.py [--hosts N] [--reservations N] [--seed N] [--rounds N] [--count K]

Plans, through the lease scheduler, advance reservations (not preemptible) of 1-16 VMs of 1-4 vCPU / 2-16 GiB
for 30 min to 4 h starting within the next two days, and best-effort leases queued behind them, until the
slot table holds `--reservations` reservations (a VM reservation and its shutdown each) on `--hosts` hosts
of 16 vCPU / 64 GiB. Then, for a few request sizes (from one small VM, which fits at once, to a large lease
that must wait for the reservations to thin out):

- plan --free:      `FreeSlots.windows(..., count=K)`, what `leasewise plan --free` asks the scheduler;
- earliest:         the earliest start alone (`FreeSlots.earliest`);
- submit earliest:  a `--start earliest` lease submitted and scheduled once (`LeaseScheduler.submit` +
                    `schedule`: the search, the placement, preemption of best-effort leases and the commit),
                    then cancelled (the leases it preempted stay where they went, so it is timed once).

The first two are the fastest of `--rounds` rounds, in milliseconds; then the start found. At 08:00 the site
is full of best-effort work, so every placement there preempts: a large request adds hundreds of victims
before it fits, and the mapper tries a placement only for victim sets that could hold it
(`planning/preemption_bound.py`). Target: each <= 100 ms.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator import compiled  # noqa: E402,F401  (refuses a stale compiled core)
from orchestrator.config import SchedulingConfig  # noqa: E402
from orchestrator.model.lease import Lease, LeaseRequest, LeaseType  # noqa: E402
from orchestrator.model.resources import Resources  # noqa: E402
from orchestrator.model.states import LeaseState  # noqa: E402
from orchestrator.model.timeutil import UTC  # noqa: E402
from orchestrator.planning.lease_scheduler import LeaseScheduler  # noqa: E402
from orchestrator.planning.slottable.table import SlotTable  # noqa: E402

NOW = datetime(2026, 6, 1, 8, 0, tzinfo=UTC)
HOST = Resources.of(16, 65536)
#: (label, nodes, vCPUs, MiB, hours)
REQUESTS = (("1 × 1 vCPU / 1 GiB, 1 h", 1, 1, 1024, 1), ("8 × 4 vCPU / 16 GiB, 3 h", 8, 4, 16384, 3),
            ("200 × 8 vCPU / 32 GiB, 3 h", 200, 8, 32768, 3))


def build(hosts: int, reservations: int, rng: random.Random) -> LeaseScheduler:
    table = SlotTable([(f"node{i:04d}", HOST) for i in range(hosts)])
    scheduler = LeaseScheduler(table, SchedulingConfig(suspension="all"))
    submitted = 0
    while len(table) < reservations:
        nodes = rng.choice((1, 1, 2, 4, 8, 16))
        node = (rng.choice((1, 2, 4)), rng.choice((2048, 4096, 8192, 16384)))
        minutes = rng.randint(30, 240)
        if submitted % 4 == 3:
            request = LeaseRequest(LeaseType.BEST_EFFORT, (Resources.of(*node),) * nodes, timedelta(minutes=minutes),
                                   NOW)
        else:
            start = NOW + timedelta(minutes=rng.randint(0, 48 * 60))
            request = LeaseRequest(LeaseType.ADVANCE_RESERVATION, (Resources.of(*node),) * nodes,
                                   timedelta(minutes=minutes), NOW, start=start, preemptible=False)
        scheduler.submit(request, NOW)
        submitted += 1
        if submitted % 500 == 0:   # (scheduled in batches: the queue is passed over once a batch)
            scheduler.schedule(NOW)
    scheduler.schedule(NOW)
    return scheduler


def timed(rounds: int, call) -> tuple[float, object]:
    best, answer = float("inf"), None
    for _ in range(rounds):
        gc.collect()
        began = time.perf_counter()
        answer = call()
        best = min(best, time.perf_counter() - began)
    return best * 1000, answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--reservations", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--count", type=int, default=5, help="windows asked of plan --free")
    args = parser.parse_args()
    began = time.perf_counter()
    scheduler = build(args.hosts, args.reservations, random.Random(args.seed))
    changepoints = len(scheduler.table.changepoints_after(NOW))
    print(f"{args.hosts} hosts, {len(scheduler.table)} reservations of {len(scheduler.leases)} leases, "
          f"{changepoints} changepoints ahead; built in {time.perf_counter() - began:.1f} s")
    search = scheduler.vm.free_slots
    print(f"{'request':30} {'plan --free':>12} {'earliest':>10} {'submit':>10}  start")
    for label, nodes, cpus, memory, hours in REQUESTS:
        request = LeaseRequest(LeaseType.ADVANCE_RESERVATION, (Resources.of(cpus, memory),) * nodes,
                               timedelta(hours=hours), NOW, start=NOW, preemptible=False, earliest=True)
        probe = Lease(id=-1, request=request)
        windows_ms, windows = timed(args.rounds, lambda: search.windows(probe, NOW, None, request.duration, args.count))
        earliest_ms, found = timed(args.rounds, lambda: search.earliest(probe, NOW, None, request.duration))

        def submit_once():
            lease = scheduler.submit(request, NOW)
            scheduler.schedule(NOW)
            state, start = lease.state, lease.last_vm.start if lease.last_vm else None
            if state is LeaseState.SCHEDULED:
                scheduler.cancel(lease.id, NOW)
            return state, start

        submit_ms, (state, start) = timed(1, submit_once)
        shown = start.strftime("%m-%d %H:%M") if start is not None else state.value
        if found is not None and start != found[0]:
            shown += f" (searched alone: {found[0].strftime('%m-%d %H:%M')})"
        print(f"{label:30} {windows_ms:9.1f} ms {earliest_ms:7.1f} ms {submit_ms:7.1f} ms  {shown}"
              f"  ({len(windows)} windows)")


if __name__ == "__main__":
    main()
