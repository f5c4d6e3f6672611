"""A reproducible random workload for benchmarks and property tests.

The mix (defaults): 80% best-effort leases, 15% advance reservations booked 0-6 h ahead of their arrival,
5% immediate leases; 1-4 nodes of 1-2 vCPUs and 512-4096 MiB each (clamped to the host size); requested
durations log-uniform between 5 min and 4 h, whole minutes; about a third of the leases really end earlier
(real duration 20-100% of the request). Arrivals are a Poisson process whose rate is set so that the offered
load (sum over leases of nodes x dominant share of a host x real duration, divided by hosts x span) is
`target_load` of the cluster (0.78 by default, i.e. inside 70-85%).

Everything is drawn from one `random.Random(seed)`: the same arguments give the same workload.
"""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta

from orchestrator.model.errors import InvalidRequest
from orchestrator.model.lease import LeaseRequest, LeaseType
from orchestrator.model.resources import Resources
from orchestrator.model.timeutil import UTC, as_utc
from orchestrator.model.workload import Workload

DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)


def synthetic_workload(
    n_leases: int,
    n_hosts: int,
    host_capacity: Resources,
    seed: int = 0,
    *,
    start: datetime = DEFAULT_START,
    target_load: float = 0.78,
    ar_fraction: float = 0.15,
    immediate_fraction: float = 0.05,
    max_nodes: int = 4,
    min_duration: timedelta = timedelta(minutes=5),
    max_duration: timedelta = timedelta(hours=4),
    max_booking_ahead: timedelta = timedelta(hours=6),
    early_end_fraction: float = 0.33,
) -> Workload:
    """`n_leases` requests for a site of `n_hosts` hosts of `host_capacity` each (see the module docstring)."""
    if n_leases < 0:
        raise InvalidRequest("n_leases", f"must not be negative (got {n_leases})")
    if n_hosts < 1:
        raise InvalidRequest("n_hosts", f"must be at least 1 (got {n_hosts})")
    host_capacity.validate("host_capacity")
    if not 0 < target_load:
        raise InvalidRequest("target_load", f"must be greater than zero (got {target_load})")
    if ar_fraction < 0 or immediate_fraction < 0 or ar_fraction + immediate_fraction > 1:
        raise InvalidRequest("ar_fraction", "ar_fraction and immediate_fraction must be >= 0 and add up to at most 1")
    if not min_duration <= max_duration or min_duration <= timedelta(0):
        raise InvalidRequest("min_duration", "need 0 < min_duration <= max_duration")
    start = as_utc(start, "start")
    rng = random.Random(seed)

    max_vcpus = max(1, min(2, int(host_capacity.cpu // 100)))
    max_mem = max(1, min(4096, int(host_capacity.memory)))
    min_mem = min(512, max_mem)
    nodes_cap = max(1, min(max_nodes, n_hosts))
    lo, hi = math.log(min_duration.total_seconds()), math.log(max_duration.total_seconds())
    ahead_s = max_booking_ahead.total_seconds()
    mem_steps = (max_mem - min_mem) // 256 + 1   # memory in steps of 256 MiB from min_mem
    random_ = rng.random
    node_cache: dict[tuple[int, int], Resources] = {}

    # Pass 1: the shape of every lease (type, nodes, durations), and the work they offer.
    shapes = []
    work = 0.0  # host-seconds
    for _ in range(n_leases):
        draw = rng.random()
        if draw < immediate_fraction:
            kind = LeaseType.IMMEDIATE
        elif draw < immediate_fraction + ar_fraction:
            kind = LeaseType.ADVANCE_RESERVATION
        else:
            kind = LeaseType.BEST_EFFORT
        numnodes = 1 + int(random_() * nodes_cap)
        vcpus = 1 + int(random_() * max_vcpus)
        memory = min_mem + 256 * int(random_() * mem_steps)
        node = node_cache.get((vcpus, memory))
        if node is None:
            node = node_cache[(vcpus, memory)] = Resources(vcpus * 100, memory)
        minutes = max(1, round(math.exp(rng.uniform(lo, hi)) / 60))
        duration = min(max(minutes * 60, min_duration.total_seconds()), max_duration.total_seconds())
        real = duration
        if rng.random() < early_end_fraction:
            real = max(60.0, round(duration * rng.uniform(0.2, 1.0)))
            real = min(real, duration)
        ahead = round(rng.uniform(0, ahead_s) / 60) * 60 if kind is LeaseType.ADVANCE_RESERVATION else 0
        share = max(node.cpu / host_capacity.cpu, node.memory / host_capacity.memory)
        work += numnodes * share * real
        shapes.append((kind, numnodes, node, duration, real, ahead))

    # Pass 2: Poisson arrivals at the rate that makes the offered load `target_load`.
    mean_gap = work / (target_load * n_hosts * n_leases) if n_leases else 0.0
    requests: list[tuple[str, LeaseRequest]] = []
    clock = 0.0
    for index, (kind, numnodes, node, duration, real, ahead) in enumerate(shapes, start=1):
        clock += rng.expovariate(1.0 / mean_gap) if mean_gap > 0 else 0.0
        submit = start + timedelta(seconds=round(clock))
        requests.append((str(index), LeaseRequest(
            type=kind,
            nodes=(node,) * numnodes,
            duration=timedelta(seconds=duration),
            submit_time=submit,
            start=submit + timedelta(seconds=ahead) if kind is LeaseType.ADVANCE_RESERVATION else None,
            preemptible=kind is LeaseType.BEST_EFFORT,
            real_duration=timedelta(seconds=real),
        )))
    return Workload(
        requests=requests,
        site=[(f"host{i}", host_capacity) for i in range(1, n_hosts + 1)],
        source=f"synthetic(n_leases={n_leases}, n_hosts={n_hosts}, seed={seed})",
        name="synthetic",
    )


def offered_load(workload: Workload) -> float:
    """Offered load of a workload on its site: dominant-share node-seconds / (hosts x submit span + last run)."""
    if not workload.requests or not workload.site:
        return 0.0
    capacity = workload.site[0][1]
    work = 0.0
    for _, req in workload.requests:
        real = (req.real_duration or req.duration).total_seconds()
        share = max(req.nodes[0].cpu / capacity.cpu, req.nodes[0].memory / capacity.memory)
        work += req.numnodes * share * real
    first = workload.requests[0][1].submit_time
    last = workload.requests[-1][1].submit_time
    span = (last - first).total_seconds()
    return work / (len(workload.site) * span) if span > 0 else float("inf")
