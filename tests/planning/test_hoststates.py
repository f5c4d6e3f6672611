"""The host states kept incrementally (usage rows, counts of nodes that fit per node size, free CPU)
against a from-scratch look at every host, through random changes to the table and queries at random
times, at the scheduler's present and elsewhere."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.model.reservations import Reservation, ReservationKind
from orchestrator.model.resources import Resources
from orchestrator.model.timeutil import UTC
from orchestrator.planning.slottable import shared_usage
from tests.reference import CORES
from orchestrator.planning.slottable.hoststates import nodes_that_fit
from orchestrator.planning.slottable.table import AFTER_ALL, SlotTable, time_key

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)   # (time keys count microseconds from here)
NODES = (Resources.of(1, 1024), Resources.of(2, 1024), Resources.of(1, 3000))


def T(minutes: float) -> datetime:
    return EPOCH + timedelta(minutes=minutes)


operations = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 5), st.integers(0, 200), st.integers(1, 90),
              st.sampled_from((1, 2)), st.sampled_from((512, 2048))),
    st.tuples(st.just("remove"), st.integers(0, 1000)),
    st.tuples(st.just("ask"), st.integers(0, 300), st.booleans(), st.sampled_from(NODES)),
), min_size=1, max_size=60)


#: each test runs on each core (`tests.reference.CORES`): the compiled one and the plain reference
kinds = pytest.mark.parametrize("kind", sorted(CORES))


@kinds
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations)
def test_states_match_a_fresh_look(kind, ops):
    _check(ops, kind)


@kinds
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations)
def test_states_match_a_fresh_look_with_sweeps(kind, ops):
    """The same, with the table's usage codes swept whenever their number doubles and its memo of usage
    transitions restarting after two amounts: a row may then hold a code swept since (its usage is
    still known to it)."""
    saved = shared_usage._SWEEP_SLACK, shared_usage._MAX_AMOUNTS
    shared_usage._SWEEP_SLACK, shared_usage._MAX_AMOUNTS = 2, 2
    try:
        _check(ops, kind)
    finally:
        shared_usage._SWEEP_SLACK, shared_usage._MAX_AMOUNTS = saved


def _check(ops, kind):
    capacities = {f"h{i}": Resources.of(2 + i % 3, 4096) for i in range(6)}
    table = SlotTable(capacities, core=CORES[kind])
    held: list[Reservation] = []
    for op in ops:
        if op[0] == "add":
            _, h, start, length, cpus, memory = op
            host, amount = f"h{h}", Resources.of(cpus, memory)
            if table.fits(host, amount, T(start), T(start + length)):
                held.append(table.add(Reservation(1, ReservationKind.VM, T(start), T(start + length),
                                                  {host: amount})))
        elif op[0] == "remove":
            if held:
                table.remove(held.pop(op[1] % len(held)))
        else:
            _, at, present, node = op
            t = T(at)
            if present:
                table.present = t
            states = table.states_at(t)
            usage = {h: table.usage_at(h, t) for h in capacities}
            per_host = [nodes_that_fit(usage[h], capacities[h], node) for h in states.names]
            room = states.room(node)
            assert room.per_row == per_host
            assert room.total == sum(per_host)
            assert [int(x) for x in room.array] == per_host
            assert states.site_full() == all(capacities[h].cpu - usage[h].cpu <= 1e-9 for h in capacities)
            names, used, _, count, _ = table.state_arrays(t)
            assert [tuple(row) for row in used.tolist()] == [tuple(map(float, usage[h])) for h in names]
            # rows alike (the mapper then skips ranking them): the same usage, count and capacity (h0 and
            # h3 have the same capacity)
            for rows in (list(range(len(names))), [i for i, k in enumerate(per_host) if k], [0, 3],
                         [len(names) - 1]):
                if rows:
                    plain = len({(usage[names[i]], capacities[names[i]], int(count[i])) for i in rows}) == 1
                    assert table.states_at(t).alike(rows) == plain, rows
            # the mapper skips the timeline walk of a host whose usage stays until past the end: the
            # window kept per row must never reach past a change of usage
            for h, until in zip(names, table.unchanged_until(t).tolist()):
                assert until > time_key(t)
                if until != AFTER_ALL:
                    later = table.changepoints_after(t, until=_EPOCH + timedelta(microseconds=until), hosts=[h])
                    assert all(table.usage_at(h, p) == usage[h] for p in later), (h, later)
            # the instant check, also at a time after the present (worked out from the present's rows;
            # last: it may move the snapshot the checks above read)
            later = T(at + 7)
            fresh = {h: nodes_that_fit(table.usage_at(h, later), capacities[h], node) for h in capacities}
            assert table.room_total(node, later) == sum(fresh.values())
            assert table.room_total(node, later, ["h1", "h4"]) == fresh["h1"] + fresh["h4"]


def test_a_look_in_passing_counts_the_same_and_leaves_the_second_snapshot_where_it_is():
    """Most of 100 hosts change between the present and the time looked at: the instant check would
    bring the second snapshot there; in passing it works the count out from the present's rows."""
    capacities = {f"h{i:03d}": Resources.of(4, 8192) for i in range(100)}
    table = SlotTable(capacities)
    for i, host in enumerate(capacities):
        table.add(Reservation(1, ReservationKind.VM, T(10 + i % 7), T(200), {host: Resources.of(1 + i % 3, 1024)}))
    table.present = T(0)
    node = Resources.of(1, 1024)
    table.states_at(T(0))
    table.state_arrays(T(5))   # (the second snapshot, where a mapping at another time left it)
    second = table._snapshots[1]
    where = second.last
    fresh = sum(nodes_that_fit(table.usage_at(h, T(50)), capacities[h], node) for h in capacities)
    assert table.room_total(node, T(50), in_passing=True) == fresh
    assert second.last == where
    assert table.room_total(node, T(50)) == fresh
