"""The mapper's per-host packing of alike nodes against the plain node-by-node greedy it stands for.

For a lease whose nodes are all alike on a packing policy the mapper works out how many nodes each host
takes (from the host states, one timeline walk per host, strict and early-ending packings in one walk,
the ranking read a slice at a time). The reference here is the definition: hosts in the policy's order
(those with room for one node at the start), one node at a time while it fits, over the interval
(strict) or from the start (not strict, the mapping ending at the earliest end of the hosts used, a host
taking a node only if it holds it until the caller's shortest end), and a non-strict request first tries
the strict packing. Same nodes on the same hosts, same end.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.model.lease import Lease, LeaseRequest, LeaseType
from orchestrator.model.reservations import Reservation, ReservationKind
from orchestrator.model.resources import Resources, fits, scale
from orchestrator.model.timeutil import UTC
from orchestrator.planning.mapper import Mapper, Mapping
from orchestrator.planning.policies import HOST_SELECTION, PREEMPTION
from tests.reference import CORES
from orchestrator.planning.slottable.table import SlotTable

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def T(minutes: float) -> datetime:
    return EPOCH + timedelta(minutes=minutes)


def alike_lease(node: Resources, count: int, duration: float) -> Lease:
    request = LeaseRequest(type=LeaseType.BEST_EFFORT, nodes=(node,) * count,
                           duration=timedelta(minutes=duration), submit_time=T(-60))
    return Lease(1, request)


def reference(table: SlotTable, policy: str, node: Resources, count: int, start: datetime, end: datetime,
              strict: bool, floor: datetime | None = None) -> Mapping | None:
    """Node by node, hosts in the policy's order: the greedy packing the mapper must reproduce."""
    floor = start if floor is None else max(start, min(floor, end))
    order = HOST_SELECTION.create(policy).order(table, table.hosts, start)
    nodes: dict[int, str] = {}
    until = end
    for host in order:
        if not fits(table.usage_at(host, start), node, table.capacity(host)):
            continue                      # (the filter stage: not even one node at the start)
        k = 0
        while len(nodes) < count:
            trial = scale(node, k + 1)
            if strict:
                if not table.fits(host, trial, start, end):
                    break
                host_end = end
            else:
                fit_end = table.latest_fit(host, trial, start, end)
                if fit_end is None or fit_end <= start or fit_end < floor:
                    break
                host_end = fit_end
            k += 1
            nodes[len(nodes)] = host
        if k:
            until = min(until, host_end)
        if len(nodes) == count:
            return Mapping(nodes=nodes, end=until)
    return None


def expected(table, policy, node, count, start, end, strict_end, floor=None):
    if strict_end:
        return reference(table, policy, node, count, start, end, True)
    return (reference(table, policy, node, count, start, end, True)
            or reference(table, policy, node, count, start, end, False, floor))


def same(got: Mapping | None, want: Mapping | None) -> bool:
    if got is None or want is None:
        return got is None and want is None
    return got.nodes == want.nodes and got.end == want.end


CAPACITIES = (Resources.of(1, 1024), Resources.of(2, 4096), Resources.of(4, 8192))
NODES = (Resources.of(1, 1024), Resources.of(1, 512), Resources.of(2, 2048))


#: each test runs on each core of the slot table (`tests.reference.CORES`): each brings its own walk
cores = pytest.mark.parametrize("kind", sorted(CORES))


@st.composite
def tables(draw, kind):
    n_hosts = draw(st.integers(1, 12))
    table = SlotTable({f"h{i:02d}": draw(st.sampled_from(CAPACITIES)) for i in range(n_hosts)}, core=CORES[kind])
    for _ in range(draw(st.integers(0, 30))):
        host = f"h{draw(st.integers(0, n_hosts - 1)):02d}"
        start = draw(st.integers(0, 240))
        end = start + draw(st.integers(1, 120))
        amount = Resources.of(draw(st.sampled_from((1, 2))), draw(st.sampled_from((512, 1024, 2048))))
        if table.fits(host, amount, T(start), T(end)):
            table.add(Reservation(9, ReservationKind.VM, T(start), T(end), {host: amount}))
    return table


@cores
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), policy=st.sampled_from(("greedy", "pack")), node=st.sampled_from(NODES),
       count=st.integers(1, 10), start=st.integers(0, 240), duration=st.integers(1, 180),
       strict_end=st.booleans(), present=st.booleans(), shortest=st.one_of(st.none(), st.integers(0, 200)))
def test_alike_nodes_packed_as_node_by_node_greedy(kind, data, policy, node, count, start, duration, strict_end,
                                                    present, shortest):
    table = data.draw(tables(kind))
    if present:
        table.present = T(start)   # (the host states the scheduler keeps at its present time)
    m = Mapper(table, HOST_SELECTION.create(policy), PREEMPTION.create("no-preemption"))
    lease = alike_lease(node, count, duration)
    begin, end = T(start), T(start + duration)
    min_end = None if shortest is None else T(start + shortest)
    got = m.map(lease, begin, end, strict_end=strict_end, min_end=min_end)
    want = expected(table, policy, node, count, begin, end, strict_end, min_end)
    assert same(got, want), (got, want)
    if got is not None:   # and the plan stays within every host's capacity
        table.add(Reservation(lease.id, ReservationKind.VM, begin, got.end, got.per_host(lease)))
        assert table.overcommitted() == []


@cores
def test_a_ranking_longer_than_one_slice(kind):
    """300 one-CPU hosts, a 250-node lease: the ranking is read in several slices; each host once."""
    table = SlotTable({f"n{i:03d}": Resources.of(1, 1024) for i in range(300)}, core=CORES[kind])
    for i in range(0, 300, 7):   # some hosts busy later on: not steady, walked along their timelines
        table.add(Reservation(9, ReservationKind.VM, T(30 + i % 50), T(200), {f"n{i:03d}": Resources.of(1, 1024)}))
    node = Resources.of(1, 1024)
    lease = alike_lease(node, 250, 60)
    for strict_end in (True, False):
        got = Mapper(table, HOST_SELECTION.create("greedy"), PREEMPTION.create("no-preemption")).map(
            lease, T(0), T(60), strict_end=strict_end)
        want = expected(table, "greedy", node, 250, T(0), T(60), strict_end)
        assert same(got, want)
        assert got is not None and len(set(got.nodes.values())) == 250


@cores
@pytest.mark.parametrize("policy", ["greedy", "pack", "spread"])
def test_hosts_alike_but_for_their_reservations_or_capacity_are_still_ranked(kind, policy):
    """The mapper skips ranking candidates whose usage, count of reservations and capacity are all the
    same. Hosts that differ in only one of them must still be ranked: two with the same usage, from two
    reservations against one (greedy puts fewer reservations first; the others see a tie), and two empty
    ones of different sizes (greedy and spread put the larger first, pack the smaller)."""
    node = Resources.of(1, 512)
    cases = (
        ({"a": Resources.of(4, 4096), "b": Resources.of(4, 4096)},
         [("a", Resources.of(1, 512)), ("a", Resources.of(1, 512)), ("b", Resources.of(2, 1024))],
         {"greedy": "b", "pack": "a", "spread": "a"}),
        ({"a": Resources.of(4, 4096), "b": Resources.of(8, 8192)}, [], {"greedy": "b", "pack": "a", "spread": "b"}),
    )
    for capacities, held, first in cases:
        table = SlotTable(capacities, core=CORES[kind])
        for host, amount in held:
            table.add(Reservation(9, ReservationKind.VM, T(0), T(100), {host: amount}))
        table.present = T(10)   # (the host states, as the scheduler keeps them at its present)
        m = Mapper(table, HOST_SELECTION.create(policy), PREEMPTION.create("no-preemption"))
        got = m.map(alike_lease(node, 1, 30), T(10), T(40))
        assert got is not None and got.nodes == {0: first[policy]}, (capacities, held, got)
