"""Small random workloads for differential tests: a site of 2-8 hosts, a few dozen leases of all three
types (some ending early, some with nodes of different sizes, some submitted at the same instant) and
scheduling settings drawn from every mode that changes a plan."""

from __future__ import annotations

import random
from datetime import timedelta

from orchestrator.config import SchedulingConfig
from orchestrator.model.lease import LeaseRequest, LeaseType
from orchestrator.model.resources import Resources
from orchestrator.model.workload import Workload
from tests.support.times import T0

#: host capacities a site is made of (CPU in percent of a core, memory in MiB)
_HOSTS = (Resources(100, 1024), Resources(200, 2048), Resources(400, 4096))
#: node sizes leases ask for
_NODES = (Resources(100, 1024), Resources(100, 512), Resources(50, 1024), Resources(200, 2048), Resources(100, 2048))


def random_site(rng: random.Random) -> list[tuple[str, Resources]]:
    n = rng.randint(2, 8)
    if rng.random() < 0.6:   # most sites are alike, as most labs are
        capacity = rng.choice(_HOSTS)
        return [(f"host{i}", capacity) for i in range(1, n + 1)]
    return [(f"host{i}", rng.choice(_HOSTS)) for i in range(1, n + 1)]


def random_request(rng: random.Random, submit_minute: int, n_hosts: int, most_nodes: int = 4) -> LeaseRequest:
    kind = rng.choices((LeaseType.BEST_EFFORT, LeaseType.ADVANCE_RESERVATION, LeaseType.IMMEDIATE), (6, 3, 1))[0]
    count = rng.randint(1, min(most_nodes, n_hosts + 1))
    if rng.random() < 0.75:
        nodes = (rng.choice(_NODES),) * count
    else:
        nodes = tuple(rng.choice(_NODES) for _ in range(count))
    duration = timedelta(minutes=rng.choice((5, 10, 20, 30, 45, 60, 90, 120)))
    real = None
    if rng.random() < 0.3:
        real = timedelta(minutes=max(1, int(duration.total_seconds() / 60 * rng.uniform(0.1, 0.95))))
    start = None
    if kind is LeaseType.ADVANCE_RESERVATION:
        start = T0 + timedelta(minutes=submit_minute + rng.choice((0, 1, 2, 5, 10, 20, 30, 60)))
    return LeaseRequest(type=kind, nodes=nodes, duration=duration, submit_time=T0 + timedelta(minutes=submit_minute),
                        start=start, real_duration=real,
                        preemptible=kind is not LeaseType.ADVANCE_RESERVATION and rng.random() < 0.9)


def random_workload(rng: random.Random, most_leases: int = 30, most_nodes: int = 4) -> Workload:
    site = random_site(rng)
    minute, requests = 0, []
    for i in range(rng.randint(5, most_leases)):
        if rng.random() > 0.25:   # (a quarter arrive with the one before)
            minute += rng.choice((1, 2, 3, 5, 10, 15))
        requests.append((str(i + 1), random_request(rng, minute, len(site), most_nodes)))
    return Workload(requests=requests, site=site)


def random_scheduling(rng: random.Random) -> SchedulingConfig:
    return SchedulingConfig(
        backfilling=rng.choice(("aggressive", "aggressive", "conservative", "off", 2)),
        suspension=rng.choice(("all", "all", "serial", "none")),
        migration=rng.choice(("yes", "yes", "no", "yes-notransfer")),
        suspendresume_exclusion=rng.choice(("local", "global")),
        policy_host_selection=rng.choice(("greedy", "greedy", "greedy", "pack", "spread")),
        shutdown_time=timedelta(seconds=rng.choice((0, 0, 10))),
        enactment_overhead=timedelta(seconds=rng.choice((0, 0, 0, 2))),
        non_schedulable_interval=timedelta(seconds=rng.choice((0, 0, 0, 30))),
        scheduling_threshold_factor=rng.choice((1.0, 1.0, 0.5, 2.0)),
        preemption_mode=rng.choice(("suspend-only", "migrate-first")),
        dirty_rate=rng.choice((0.0, 5.0, 60.0)),
        live_migration_margin=timedelta(seconds=rng.choice((0, 30))),
    )
