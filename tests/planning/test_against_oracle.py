"""The fast scheduler against the plain one (`tests/oracle`): on random small workloads (every lease type,
early ends, nodes alike and not, 2-8 hosts) under random settings (suspension, image migration,
backfilling, exclusion, host selection, overheads), both plan every lease the same, reservation for
reservation, and end in the same state."""

from __future__ import annotations

import random

import pytest

from orchestrator.config import Config, SimulationConfig
from orchestrator.runtime.simulator import Simulator, check_invariants
from tests.oracle import simulation as oracle
from tests.support.random_workloads import random_scheduling, random_workload
from tests.support.times import T0

SEEDS = range(300)


def _case(seed: int):
    rng = random.Random(seed)
    return random_workload(rng), random_scheduling(rng)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_fast_scheduler_plans_as_the_plain_one(seed):
    workload, scheduling = _case(seed)
    fast = Simulator(workload, Config(scheduling=scheduling, simulation=SimulationConfig(start=T0)),
                     on_step=check_invariants).run().scheduler
    plain = oracle.simulate(workload, scheduling)
    expected, got = oracle.records(plain.leases), oracle.records(fast.leases)
    for want, have in zip(expected, got):
        assert have == want, f"lease {want[0]} ({scheduling})"
    assert got == expected
    assert fast.counters == plain.counters
