"""The mapper on hand-built tables: exactly which host each virtual node lands on, and which leases give way;
and, on random tables, nodes placed one by one exactly as the plain greedy definition places them."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.model.lease import Lease, LeaseRequest, LeaseType
from orchestrator.model.reservations import Reservation, ReservationKind
from orchestrator.model.resources import Resources, add, fits
from orchestrator.model.states import LeaseState
from orchestrator.model.timeutil import UTC
from orchestrator.planning.mapper import Mapper, Mapping
from orchestrator.planning.policies import HOST_SELECTION, PREEMPTION
from orchestrator.planning.slottable.table import SlotTable

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
CAP = Resources.of(8, 8192)
AR, BE = LeaseType.ADVANCE_RESERVATION, LeaseType.BEST_EFFORT


def T(minutes: float) -> datetime:
    return EPOCH + timedelta(minutes=minutes)


def R(vcpus: float, memory: float = 512) -> Resources:
    return Resources.of(vcpus, memory)


def lease(lease_id: int, nodes: list[Resources], *, type: LeaseType = BE, submit: float = -60,
          start: float | None = None, duration: float = 60, preemptible: bool = True) -> Lease:
    request = LeaseRequest(type=type, nodes=tuple(nodes), duration=timedelta(minutes=duration),
                           submit_time=T(submit), start=None if start is None else T(start),
                           preemptible=preemptible)
    return Lease(lease_id, request)


def hold(table: SlotTable, owner: Lease, start: float, end: float, resources: dict[str, Resources]) -> Reservation:
    return table.add(Reservation(owner.id, ReservationKind.VM, T(start), T(end), dict(resources)))


def mapper(table: SlotTable, host_selection: str = "greedy", preemption: str = "ar-preempts-be") -> Mapper:
    return Mapper(table, HOST_SELECTION.create(host_selection), PREEMPTION.create(preemption))


# -- host selection ---------------------------------------------------------------------------------------------------------

@pytest.fixture
def four_hosts():
    """h1: one rr using 1 vCPU / 4096; h2: empty; h3: one rr 1 vCPU / 1024; h4: two rrs of 1 vCPU / 512."""
    table = SlotTable({h: CAP for h in ("h1", "h2", "h3", "h4")})
    other = lease(100, [R(1)])
    hold(table, other, -10, 200, {"h1": R(1, 4096)})
    hold(table, other, -10, 200, {"h3": R(1, 1024)})
    hold(table, other, -10, 200, {"h4": R(1, 512)})
    hold(table, other, -10, 200, {"h4": R(1, 512)})
    return table


def test_greedy_order_fewest_reservations_then_most_free_memory(four_hosts):
    order = HOST_SELECTION.create("greedy").order(four_hosts, ["h1", "h2", "h3", "h4"], T(0))
    assert order == ["h2", "h3", "h1", "h4"]


def test_greedy_packs_in_that_order(four_hosts):
    m = mapper(four_hosts).map(lease(1, [R(4, 1024)] * 4), T(0), T(60))
    assert m is not None
    assert m.nodes == {0: "h2", 1: "h2", 2: "h3", 3: "h1"}
    assert m.end == T(60)
    assert m.victims == []
    assert m.per_host(lease(1, [R(4, 1024)] * 4)) == {"h2": R(8, 2048), "h3": R(4, 1024), "h1": R(4, 1024)}


def test_pack_order_least_free_first(four_hosts):
    order = HOST_SELECTION.create("pack").order(four_hosts, ["h1", "h2", "h3", "h4"], T(0))
    assert order == ["h1", "h4", "h3", "h2"]   # free memory 4096, 7168 (6 vCPU), 7168 (7 vCPU), 8192


def test_pack_fills_the_fullest_host_first(four_hosts):
    m = mapper(four_hosts, "pack").map(lease(1, [R(3, 1024)] * 3), T(0), T(60))
    assert m.nodes == {0: "h1", 1: "h1", 2: "h4"}


def test_spread_order_and_one_node_per_host_per_round(four_hosts):
    order = HOST_SELECTION.create("spread").order(four_hosts, ["h1", "h2", "h3", "h4"], T(0))
    assert order == ["h2", "h3", "h4", "h1"]
    m = mapper(four_hosts, "spread").map(lease(1, [R(2)] * 5), T(0), T(60))
    assert m.nodes == {0: "h2", 1: "h3", 2: "h4", 3: "h1", 4: "h2"}


def test_spread_drops_a_full_host_and_continues(four_hosts):
    # 3 vCPU nodes: h4 (6 free) takes 2, h1 and h3 (7 free) 2 each, h2 (8 free) 2: 8 nodes fit, 9 do not
    m = mapper(four_hosts, "spread").map(lease(1, [R(3)] * 8), T(0), T(60))
    assert m.nodes == {0: "h2", 1: "h3", 2: "h4", 3: "h1", 4: "h2", 5: "h3", 6: "h4", 7: "h1"}
    assert mapper(four_hosts, "spread").map(lease(1, [R(3)] * 9), T(0), T(60)) is None


def test_largest_nodes_are_placed_first():
    table = SlotTable({"a": CAP, "b": CAP})
    m = mapper(table, "pack").map(lease(1, [R(1), R(6), R(2)]), T(0), T(60))
    # order of placement: node 1 (6 vCPU), node 2 (2), node 0 (1); all fit on "a" except the last
    assert m.nodes == {1: "a", 2: "a", 0: "b"}


def test_heterogeneous_nodes_use_a_host_that_only_the_smaller_node_fits():
    # node 0 needs 4 vCPU / 1024 (fits only on b), node 1 needs 1 vCPU / 2048 (fits only on a)
    table = SlotTable({"a": Resources.of(2, 4096), "b": Resources.of(4, 1024)})
    nodes = [Resources.of(4, 1024), Resources.of(1, 2048)]
    for policy in ("greedy", "pack", "spread"):
        m = mapper(table, policy).map(lease(1, nodes), T(0), T(60))
        assert m is not None, policy
        assert m.nodes == {0: "b", 1: "a"}, policy


# -- strict end, only_hosts, impossible nodes ------------------------------------------------------------------------------

def test_strict_end_refuses_and_non_strict_returns_the_latest_end_that_fits():
    table = SlotTable({"h1": CAP})
    other = lease(100, [R(4)])
    hold(table, other, 60, 120, {"h1": R(4)})
    m = mapper(table)
    assert m.map(lease(1, [R(6)]), T(0), T(90)) is None
    loose = m.map(lease(1, [R(6)]), T(0), T(90), strict_end=False)
    assert loose == Mapping(nodes={0: "h1"}, end=T(60), victims=[])
    # fitting through: the requested end
    assert m.map(lease(1, [R(4)]), T(0), T(90), strict_end=False).end == T(90)
    # not even at the start
    assert m.map(lease(1, [R(6)]), T(60), T(90), strict_end=False) is None


def test_non_strict_end_is_the_earliest_of_the_hosts_used():
    table = SlotTable({"h1": CAP, "h2": CAP})
    other = lease(100, [R(4)])
    hold(table, other, 60, 120, {"h1": R(4)})
    hold(table, other, 45, 120, {"h2": R(4)})
    m = mapper(table).map(lease(1, [R(6), R(6)]), T(0), T(90), strict_end=False)
    assert m.nodes == {0: "h1", 1: "h2"}
    assert m.end == T(45)


def test_only_hosts():
    table = SlotTable({"h1": CAP, "h2": CAP, "h3": CAP})
    m = mapper(table)
    assert m.map(lease(1, [R(2), R(2)]), T(0), T(60), only_hosts=["h3"]).nodes == {0: "h3", 1: "h3"}
    assert m.map(lease(1, [R(6), R(6)]), T(0), T(60), only_hosts={"h2", "h3"}).nodes == {0: "h2", 1: "h3"}
    assert m.map(lease(1, [R(6), R(6)]), T(0), T(60), only_hosts=["h3"]) is None
    assert m.map(lease(1, [R(1)]), T(0), T(60), only_hosts=[]) is None


def test_a_node_larger_than_any_host_is_never_placed():
    table = SlotTable({"h1": CAP, "h2": CAP})
    big = lease(1, [R(9)], type=AR, start=0)
    be = lease(2, [R(1)])
    hold(table, be, 0, 60, {"h1": R(1)})
    m = mapper(table)
    assert m.map(big, T(0), T(60)) is None
    assert m.map(big, T(0), T(60), strict_end=False) is None
    assert m.map(big, T(0), T(60), allow_preemption=True, lease_of={2: be}.__getitem__) is None
    assert m.map(lease(3, [R(1, 8193)]), T(0), T(60)) is None


# -- preemption --------------------------------------------------------------------------------------------------------------

@pytest.fixture
def busy_host():
    """h1 (8 vCPU) holds three best-effort leases of 2 vCPU over [0, 120), submitted at -300, -200, -100."""
    table = SlotTable({"h1": CAP})
    l1 = lease(1, [R(2)], submit=-300)
    l2 = lease(2, [R(2)], submit=-200)
    l3 = lease(3, [R(2)], submit=-100)
    for le in (l1, l2, l3):
        hold(table, le, 0, 120, {"h1": R(2)})
    return table, {le.id: le for le in (l1, l2, l3)}


def test_no_preemption_without_permission(busy_host):
    table, leases = busy_host
    ar = lease(10, [R(4)], type=AR, start=30)
    m = mapper(table)
    assert m.map(ar, T(30), T(90)) is None
    assert m.map(ar, T(30), T(90), allow_preemption=True) is None               # no lease_of
    assert m.map(ar, T(30), T(90), allow_preemption=False, lease_of=leases.__getitem__) is None


def test_most_recently_submitted_best_effort_lease_is_preempted_first(busy_host):
    table, leases = busy_host
    ar = lease(10, [R(4)], type=AR, start=30)
    m = mapper(table).map(ar, T(30), T(90), allow_preemption=True, lease_of=leases.__getitem__)
    assert m.nodes == {0: "h1"} and m.end == T(90)
    assert m.victims == [leases[3]]


def test_more_victims_in_preemptability_order(busy_host):
    table, leases = busy_host
    ar = lease(10, [R(6)], type=AR, start=30)
    m = mapper(table).map(ar, T(30), T(90), allow_preemption=True, lease_of=leases.__getitem__)
    assert m.victims == [leases[3], leases[2]]
    ar = lease(10, [R(8)], type=AR, start=30)
    m = mapper(table).map(ar, T(30), T(90), allow_preemption=True, lease_of=leases.__getitem__)
    assert m.victims == [leases[3], leases[2], leases[1]]


def test_a_non_preemptible_lease_is_never_a_victim(busy_host):
    table, leases = busy_host
    keeper = lease(3, [R(2)], submit=-100, preemptible=False)
    leases = {**leases, 3: keeper}
    ar = lease(10, [R(4)], type=AR, start=30)
    m = mapper(table).map(ar, T(30), T(90), allow_preemption=True, lease_of=leases.__getitem__)
    assert m.victims == [leases[2]]
    ar = lease(10, [R(8)], type=AR, start=30)      # would need l3 too
    assert mapper(table).map(ar, T(30), T(90), allow_preemption=True, lease_of=leases.__getitem__) is None


def test_a_lease_already_suspending_is_not_a_victim(busy_host):
    table, leases = busy_host
    leases[3].state = LeaseState.SUSPENDING
    ar = lease(10, [R(4)], type=AR, start=30)
    m = mapper(table).map(ar, T(30), T(90), allow_preemption=True, lease_of=leases.__getitem__)
    assert m.victims == [leases[2]]


def test_no_preemption_policy_never_preempts(busy_host):
    table, leases = busy_host
    ar = lease(10, [R(4)], type=AR, start=30)
    m = mapper(table, preemption="no-preemption")
    assert m.map(ar, T(30), T(90), allow_preemption=True, lease_of=leases.__getitem__) is None


def test_best_effort_does_not_preempt_best_effort(busy_host):
    table, leases = busy_host
    be = lease(10, [R(4)])
    assert mapper(table).map(be, T(30), T(90), allow_preemption=True, lease_of=leases.__getitem__) is None


def test_a_lease_on_a_host_the_mapping_does_not_use_is_not_a_victim():
    # the most preemptable lease (l_recent, on h1) is tried first but freeing it is not enough;
    # freeing l_old (h2) is, and the mapping uses h2 only: l_recent is given back.
    table = SlotTable({"h1": CAP, "h2": CAP})
    keeper = lease(50, [R(4)], preemptible=False)
    l_recent = lease(1, [R(4)], submit=-10)
    l_old = lease(2, [R(8)], submit=-500)
    hold(table, keeper, 0, 120, {"h1": R(4)})
    hold(table, l_recent, 0, 120, {"h1": R(4)})
    hold(table, l_old, 0, 120, {"h2": R(8)})
    leases = {le.id: le for le in (keeper, l_recent, l_old)}
    ar = lease(10, [R(8)], type=AR, start=30)
    m = mapper(table).map(ar, T(30), T(90), allow_preemption=True, lease_of=leases.__getitem__)
    assert m.nodes == {0: "h2"}
    assert m.victims == [l_old]


def test_victims_that_became_unneeded_are_dropped():
    # spread places the two nodes on h2 and h1 once both victims are gone; the lease fits on h2 alone
    # with only l_old preempted, so l_recent is given back.
    table = SlotTable({"h1": CAP, "h2": CAP})
    keeper = lease(50, [R(4)], preemptible=False)
    l_recent = lease(1, [R(4)], submit=-10)
    l_old = lease(2, [R(8)], submit=-500)
    hold(table, keeper, 0, 120, {"h1": R(4, 0)})
    hold(table, l_recent, 0, 120, {"h1": R(4, 0)})
    hold(table, l_old, 0, 120, {"h2": R(8, 0)})
    leases = {le.id: le for le in (keeper, l_recent, l_old)}
    ar = lease(10, [R(4), R(4)], type=AR, start=30)
    both_gone = table.reservations_of(1) + table.reservations_of(2)
    # with both excluded, spread tries h2 (8 free) then h1 (4 free): one node on each, both victims used
    assert HOST_SELECTION.create("spread").order(table, ["h1", "h2"], T(30), both_gone) == ["h2", "h1"]
    m = mapper(table, "spread").map(ar, T(30), T(90), allow_preemption=True, lease_of=leases.__getitem__)
    assert m.nodes == {0: "h2", 1: "h2"}
    assert m.victims == [l_old]


def test_victims_only_overlapping_the_interval_are_considered():
    table = SlotTable({"h1": CAP})
    early = lease(1, [R(8)], submit=-10)
    late = lease(2, [R(8)], submit=-5)
    hold(table, early, 0, 30, {"h1": R(8)})
    hold(table, late, 90, 120, {"h1": R(8)})      # starts exactly when the AR ends
    leases = {1: early, 2: late}
    ar = lease(10, [R(8)], type=AR, start=30)
    m = mapper(table).map(ar, T(30), T(90), allow_preemption=True, lease_of=leases.__getitem__)
    assert m.victims == [] and m.nodes == {0: "h1"}
    m = mapper(table).map(ar, T(29), T(90), allow_preemption=True, lease_of=leases.__getitem__)
    assert m.victims == [early]


def test_a_lease_is_never_its_own_victim():
    table = SlotTable({"h1": CAP})
    ar = lease(10, [R(8)], type=AR, start=0)
    hold(table, ar, 0, 60, {"h1": R(8)})
    assert mapper(table).map(ar, T(0), T(60), allow_preemption=True, lease_of={10: ar}.__getitem__) is None


# -- the vectorised pre-check stays right when the table changes ------------------------------------------------------------

def test_could_fit_at_follows_reservations_and_hosts():
    table = SlotTable({"h1": CAP})
    m = mapper(table)
    four = lease(1, [R(4)])
    assert m.could_fit_at(four, T(0)) is True
    blocker = hold(table, lease(100, [R(8)]), 0, 60, {"h1": R(8)})
    assert m.could_fit_at(four, T(60)) is True and m.site_full(T(60)) is False
    assert m.site_full(T(0)) is True and m.could_fit_at(four, T(0)) is False
    table.add_host("h2", CAP)                      # a host joins: room again at 0
    assert m.could_fit_at(four, T(0)) is True
    assert m.site_full(T(0)) is False
    assert m.map(four, T(0), T(60)).nodes == {0: "h2"}
    table.remove(blocker)
    hold(table, lease(101, [R(8)]), 0, 60, {"h1": R(8)})
    assert m.could_fit_at(four, T(0)) is True      # h2 is free
    table.remove_host("h2")                        # and leaves
    assert m.could_fit_at(four, T(0)) is False
    assert m.site_full(T(0)) is True
    assert m.map(four, T(0), T(60)) is None


# -- node by node, against the plain greedy it stands for -------------------------------------------------------------------

def node_by_node(table: SlotTable, policy: str, nodes: list[Resources], start: datetime, end: datetime,
                 strict: bool) -> Mapping | None:
    """The definition: nodes largest first; hosts in the policy's order, those where the smallest node (per
    resource) fits at the start; each host takes the first remaining node that fits with what it holds, at
    the start and then over the interval (strict) or from the start for some time (not strict, the mapping
    ending at the earliest end of the hosts used). Packing fills a host before the next; spreading gives
    each host one node per round."""
    selection = HOST_SELECTION.create(policy)
    smallest = Resources(*(min(n[i] for n in nodes) for i in range(5)))
    order = [h for h in selection.order(table, table.hosts, start)
             if fits(table.usage_at(h, start), smallest, table.capacity(h))]
    remaining = sorted(range(len(nodes)), key=lambda v: nodes[v], reverse=True)
    placed: dict[int, str] = {}
    held: dict[str, Resources] = {}
    until: dict[str, datetime] = {}

    def take_one(host: str) -> bool:
        for i, vnode in enumerate(remaining):
            trial = add(held.get(host, Resources()), nodes[vnode])
            if not fits(table.usage_at(host, start), trial, table.capacity(host)):
                continue
            if strict:
                if not table.fits(host, trial, start, end):
                    continue
                host_end = end
            else:
                host_end = table.latest_fit(host, trial, start, end)
                if host_end is None or host_end <= start:
                    continue
            held[host], until[host], placed[vnode] = trial, host_end, host
            del remaining[i]
            return True
        return False

    if selection.packs:
        for host in order:
            while remaining and take_one(host):
                pass
    else:
        active = order
        while remaining and active:
            active = [h for h in active if remaining and take_one(h)]
    if remaining:
        return None
    return Mapping(nodes=placed, end=min(until.values()))


SIZES = (R(1, 512), R(1, 1024), R(2, 512), R(2, 2048), R(4, 1024))


@st.composite
def busy_tables(draw):
    n_hosts = draw(st.integers(1, 8))
    table = SlotTable({f"h{i}": draw(st.sampled_from((R(2, 2048), R(4, 4096), CAP))) for i in range(n_hosts)})
    for _ in range(draw(st.integers(0, 25))):
        host = f"h{draw(st.integers(0, n_hosts - 1))}"
        begin = draw(st.integers(0, 240))
        end = begin + draw(st.integers(1, 120))
        amount = draw(st.sampled_from(SIZES))
        if table.fits(host, amount, T(begin), T(end)):
            hold(table, lease(100, [amount]), begin, end, {host: amount})
    return table


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=busy_tables(), policy=st.sampled_from(("greedy", "pack", "spread")),
       nodes=st.lists(st.sampled_from(SIZES), min_size=1, max_size=8), start=st.integers(0, 240),
       duration=st.integers(1, 180), strict_end=st.booleans())
def test_nodes_placed_one_by_one_as_the_plain_greedy_places_them(table, policy, nodes, start, duration, strict_end):
    if len(set(nodes)) == 1 and policy != "spread":
        nodes = [*nodes, R(1, 256)]   # (alike nodes on a packing policy go host by host: test_mapper_alike)
    begin, end = T(start), T(start + duration)
    got = mapper(table, policy, "no-preemption").map(lease(1, nodes), begin, end, strict_end=strict_end)
    want = node_by_node(table, policy, nodes, begin, end, True)
    if want is None and not strict_end:
        want = node_by_node(table, policy, nodes, begin, end, False)
    assert (got is None) == (want is None), (got, want)
    if got is not None:
        assert (got.nodes, got.end) == (want.nodes, want.end)
