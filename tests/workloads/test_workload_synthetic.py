"""The synthetic workload generator: reproducible, within its documented ranges, at the intended load."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.model.errors import InvalidRequest
from orchestrator.model.lease import LeaseType
from orchestrator.model.resources import Resources, within
from orchestrator.workloads.synthetic import (
    DEFAULT_START,
    offered_load,
    synthetic_workload,
)

HOST = Resources.of(8, 32768)


def test_same_seed_same_workload_other_seed_other_workload():
    a = synthetic_workload(500, 20, HOST, seed=7)
    b = synthetic_workload(500, 20, HOST, seed=7)
    c = synthetic_workload(500, 20, HOST, seed=8)
    assert a.requests == b.requests
    assert a.requests != c.requests


def test_shape_and_ranges():
    w = synthetic_workload(5000, 50, HOST, seed=1)
    assert [lid for lid, _ in w.requests] == [str(i) for i in range(1, 5001)]
    assert w.site == [(f"host{i}", HOST) for i in range(1, 51)]
    times = [r.submit_time for _, r in w.requests]
    assert times == sorted(times) and times[0] >= DEFAULT_START
    for _, r in w.requests:
        assert 1 <= r.numnodes <= 4
        assert len(set(r.nodes)) == 1
        node = r.nodes[0]
        assert node.cpu in (100, 200) and 512 <= node.memory <= 4096
        assert timedelta(minutes=5) <= r.duration <= timedelta(hours=4)
        assert timedelta(0) < r.real_duration <= r.duration
        if r.type is LeaseType.ADVANCE_RESERVATION:
            assert timedelta(0) <= r.start - r.submit_time <= timedelta(hours=6)
            assert r.preemptible is False
        else:
            assert r.start is None
            assert r.preemptible is (r.type is LeaseType.BEST_EFFORT)
    mix = Counter(r.type for _, r in w.requests)
    assert 0.77 < mix[LeaseType.BEST_EFFORT] / 5000 < 0.83
    assert 0.12 < mix[LeaseType.ADVANCE_RESERVATION] / 5000 < 0.18
    assert 0.03 < mix[LeaseType.IMMEDIATE] / 5000 < 0.07
    shorter = sum(r.real_duration < r.duration for _, r in w.requests) / 5000
    assert 0.2 < shorter < 0.45


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([(10, Resources.of(2, 4096)), (100, HOST), (40, Resources.of(4, 8192))]))
def test_offered_load_is_70_to_85_percent(seed, site):
    n_hosts, capacity = site
    w = synthetic_workload(3000, n_hosts, capacity, seed=seed)
    assert 0.70 <= offered_load(w) <= 0.85


def test_nodes_are_clamped_to_small_hosts():
    tiny = Resources.of(1, 768)
    w = synthetic_workload(300, 2, tiny, seed=3)
    assert all(within(node, tiny) for _, r in w.requests for node in r.nodes)
    assert all(r.numnodes <= 2 for _, r in w.requests)


def test_mix_can_be_changed():
    w = synthetic_workload(400, 10, HOST, seed=2, ar_fraction=0.0, immediate_fraction=0.0)
    assert {r.type for _, r in w.requests} == {LeaseType.BEST_EFFORT}


def test_zero_leases():
    w = synthetic_workload(0, 3, HOST, seed=0)
    assert w.requests == [] and len(w.site) == 3


@pytest.mark.parametrize("kwargs, field", [
    (dict(n_leases=-1), "n_leases"),
    (dict(n_hosts=0), "n_hosts"),
    (dict(host_capacity=Resources(0, 1024)), "host_capacity.cpu"),
    (dict(target_load=0), "target_load"),
    (dict(ar_fraction=0.9, immediate_fraction=0.2), "ar_fraction"),
    (dict(min_duration=timedelta(hours=5)), "min_duration"),
])
def test_bad_arguments(kwargs, field):
    args = dict(n_leases=10, n_hosts=2, host_capacity=HOST, seed=0) | kwargs
    with pytest.raises(InvalidRequest) as info:
        synthetic_workload(**args)
    assert info.value.field == field
