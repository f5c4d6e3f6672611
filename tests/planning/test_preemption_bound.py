"""The preemption bound (`planning/preemption_bound.py`) on small random plans: it never turns down a victim
set the placement takes (so skipping what it turns down changes nothing), and the mapper's preemption
answers with it exactly what it answers without it."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from orchestrator.model.lease import Lease, LeaseType
from orchestrator.model.placement import Placement
from orchestrator.model.reservations import ReservationKind
from orchestrator.planning.mapper import Mapper, _Ask
from orchestrator.planning.preemption_bound import PreemptionBound
from tests.planning.test_free_slots import MINUTE, at, planned, request
from tests.reference import core as reference_core

AFFINITY = st.sampled_from((None, "spread", "pack", "exclusive"))


@st.composite
def busy_sites(draw):
    """A few hosts kept busy by best-effort leases (the victims) around advance reservations that may not
    give way."""
    hosts = draw(st.lists(st.tuples(st.integers(1, 4), st.sampled_from((1024, 2048, 4096))), min_size=1,
                          max_size=5))
    leases = []
    for _ in range(draw(st.integers(1, 10))):
        best_effort = draw(st.integers(0, 3)) > 0
        start = None if best_effort else at(draw(st.integers(0, 120)))
        leases.append(request(LeaseType.BEST_EFFORT if best_effort else LeaseType.ADVANCE_RESERVATION,
                              draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.sampled_from((512, 1024))),
                              draw(st.integers(10, 240)), start, preemptible=best_effort))
    return hosts, leases


def probe(nodes: int, cpus: int, memory: int, minutes: int, after: int, affinity: str | None,
          mixed: bool) -> Lease:
    sizes = [(cpus, memory), (1, 512)] * ((nodes + 1) // 2) if mixed else None
    wanted = request(LeaseType.ADVANCE_RESERVATION, nodes, cpus, memory, minutes, at(after), preemptible=False,
                     sizes=sizes)
    if affinity is not None:
        exclusive = affinity == "exclusive"
        wanted = replace(wanted, placement=Placement(affinity=None if exclusive else affinity, exclusive=exclusive))
    return Lease(id=10_000, request=wanted)


def victims_in_order(mapper: Mapper, s, lease: Lease, ask: _Ask) -> list[Lease]:
    """The candidates as the mapper's preemption takes them, most preemptable first."""
    scored = {}
    for rr in s.table.reservations_overlapping(ask.start, ask.end, set(ask.hosts)):
        if rr.lease_id in scored or rr.kind is ReservationKind.UNAVAILABLE:
            continue
        other = s.lease(rr.lease_id)
        score = mapper.preemption.score(lease, other, ask.start)
        if score is not None:
            scored[rr.lease_id] = (score, other)
    return [other for _, other in sorted(scored.values(), key=lambda so: (-so[0], so[1].id))]


def brute_room(s, lease: Lease, ask: _Ask, excluded: list) -> int:
    """How many of the lease's nodes the hosts could take as the bound counts them, from the table's usage
    (less the excluded reservations) at the start and at every changepoint inside the interval."""
    placement = lease.request.placement
    nodes = lease.request.nodes
    smallest = [min(n[f] for n in nodes) for f in range(5)]
    total = 0
    for host in ask.hosts:
        points = [ask.start, *s.table.changepoints_after(ask.start, ask.end, [host])]
        peak = [max(s.table.usage_at(host, p, excluded)[f] for p in points) for f in range(5)]
        cap = s.table.capacity(host)
        if placement is not None and placement.exclusive:
            total += int(all(p <= 0 for p in peak) and all(m <= c for m, c in zip(smallest, cap)))
            continue
        room = min((cap[f] - peak[f]) // smallest[f] for f in range(5) if smallest[f] > 0)
        total += int(min(max(room, 0), 1 if placement is not None and placement.spread else len(nodes)))
    return total


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(site=busy_sites(), policy=st.sampled_from(("greedy", "pack", "spread")), nodes=st.integers(1, 4),
       cpus=st.integers(1, 3), memory=st.sampled_from((512, 1024, 2048)), minutes=st.integers(5, 150),
       after=st.integers(0, 90), affinity=AFFINITY, mixed=st.booleans(), reference=st.booleans(),
       order=st.randoms(use_true_random=False))
def test_the_bound_counts_exactly_and_never_turns_down_a_set_the_placement_takes(site, policy, nodes, cpus, memory, minutes, after,
                                                               affinity, mixed, reference, order):
    capacities, leases = site
    s = planned(capacities, leases, policy, reference_core if reference else None)
    mapper = s.vm.mapper
    lease = probe(nodes, cpus, memory, minutes, after, affinity, mixed)
    start = at(after)
    hosts = s.table.hosts
    vnodes = sorted(range(lease.numnodes), key=lambda v: lease.request.nodes[v], reverse=True)
    ask = _Ask(lease, vnodes, hosts, start, start + minutes * MINUTE, strict_end=True)
    bound = mapper._bound(ask)
    assert isinstance(bound, PreemptionBound)
    excluded = []
    held = {}
    for victim in [None, *victims_in_order(mapper, s, lease, ask)]:
        if victim is not None:
            held[victim.id] = [r for r in s.table.reservations_of(victim.id) if r.end > start]
            excluded += held[victim.id]
            bound.exclude(held[victim.id])
        assert bound.room_total == brute_room(s, lease, ask, excluded)
        if mapper._place(ask._replace(excluding=list(excluded))) is not None:
            assert bound.could_hold()
    # given back in any order, it still agrees with a bound made afresh and with the placement
    given_back = list(held)
    order.shuffle(given_back)
    for lease_id in given_back:
        bound.restore(held[lease_id])
        excluded = [r for r in excluded if r.lease_id != lease_id]
        assert bound.room_total == brute_room(s, lease, ask, excluded)
        if mapper._place(ask._replace(excluding=list(excluded))) is not None:
            assert bound.could_hold()
    event(f"{len(held)} candidate victims" if len(held) < 3 else "3 or more candidate victims")
    fresh = mapper._bound(ask)
    assert bound.could_hold() == fresh.could_hold()
    assert bound.room_total == fresh.room_total


class _WithoutBound(Mapper):
    """The mapper as it was: every victim set tried."""

    def _bound(self, ask):
        return None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(site=busy_sites(), policy=st.sampled_from(("greedy", "pack", "spread")), nodes=st.integers(1, 4),
       cpus=st.integers(1, 3), memory=st.sampled_from((512, 1024, 2048)), minutes=st.integers(5, 150),
       after=st.integers(0, 90), affinity=AFFINITY, mixed=st.booleans())
def test_preemption_answers_the_same_with_and_without_the_bound(site, policy, nodes, cpus, memory, minutes, after,
                                                                  affinity, mixed):
    capacities, leases = site
    s = planned(capacities, leases, policy)
    mapper = s.vm.mapper
    plain = _WithoutBound(s.table, mapper.host_selection, mapper.preemption, mapper.filters, mapper.images)
    lease = probe(nodes, cpus, memory, minutes, after, affinity, mixed)
    start, end = at(after), at(after + minutes)
    got = mapper.map(lease, start, end, allow_preemption=True, lease_of=s.lease)
    expected = plain.map(lease, start, end, allow_preemption=True, lease_of=s.lease)
    if expected is None:
        assert got is None
    else:
        assert got is not None
        event("preempts" if expected.victims else "fits without preempting")
        assert (got.nodes, got.end, got.held) == (expected.nodes, expected.end, expected.held)
        assert [v.id for v in got.victims] == [v.id for v in expected.victims]
