"""Unit tests for the slot table: every query on hand-built tables, with exact expected answers.

Times are whole minutes from a fixed aware UTC epoch; reservations hold [start, end).

The base table (hosts h1, h2, each 8 vCPU / 8192 MiB):

    r1  lease 1  [10, 20)  h1: 2 vCPU 1024
    r2  lease 2  [15, 30)  h1: 4 vCPU 2048
    r3  lease 3  [20, 25)  h1: 1 vCPU 512, h2: 3 vCPU 1024

so h1's usage is 0 before 10, 2/1024 on [10,15), 6/3072 on [15,20), 5/2560 on [20,25), 4/2048 on [25,30),
0 from 30; h2's is 3/1024 on [20,25) and 0 elsewhere.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.model.errors import InconsistentSchedule, InvalidRequest
from orchestrator.model.reservations import Reservation, ReservationKind
from orchestrator.model.resources import NOTHING, Resources
from orchestrator.model.timeutil import UTC
from orchestrator.planning.slottable import table as slottable
from orchestrator.planning.slottable.table import FOREVER, SlotTable
from tests.reference import CORES

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
CAP = Resources.of(8, 8192)


@pytest.fixture(autouse=True, params=sorted(CORES))
def core(request, monkeypatch):
    """Every test here runs on each core (`tests.reference.CORES`): the compiled one and the plain reference."""
    kind = CORES[request.param]
    monkeypatch.setattr(slottable, "DEFAULT_CORE", kind)
    return kind


def T(minutes: float) -> datetime:
    return EPOCH + timedelta(minutes=minutes)


def R(vcpus: float, memory: float = 0) -> Resources:
    return Resources.of(vcpus, memory)


def rr(lease_id: int, start: float, end: float, resources: dict[str, Resources]) -> Reservation:
    return Reservation(lease_id, ReservationKind.VM, T(start), T(end), dict(resources))


@pytest.fixture
def base():
    table = SlotTable({"h1": CAP, "h2": CAP})
    r1 = table.add(rr(1, 10, 20, {"h1": R(2, 1024)}))
    r2 = table.add(rr(2, 15, 30, {"h1": R(4, 2048)}))
    r3 = table.add(rr(3, 20, 25, {"h1": R(1, 512), "h2": R(3, 1024)}))
    return table, r1, r2, r3


# -- point queries ------------------------------------------------------------------------------------------

H1_USAGE = [
    (-1000, R(0, 0)), (9, R(0, 0)), (9.99, R(0, 0)),
    (10, R(2, 1024)), (14, R(2, 1024)), (14.99, R(2, 1024)),
    (15, R(6, 3072)), (19.99, R(6, 3072)),
    (20, R(5, 2560)), (24, R(5, 2560)),
    (25, R(4, 2048)), (29.99, R(4, 2048)),
    (30, R(0, 0)), (31, R(0, 0)), (100000, R(0, 0)),
]


@pytest.mark.parametrize("minute,expected", H1_USAGE)
def test_usage_and_free_at_on_h1(base, minute, expected):
    table, *_ = base
    assert table.usage_at("h1", T(minute)) == expected
    assert table.free_at("h1", T(minute)) == Resources(CAP.cpu - expected.cpu, CAP.memory - expected.memory)


@pytest.mark.parametrize("minute,expected", [
    (0, R(0, 0)), (19.99, R(0, 0)), (20, R(3, 1024)), (24.99, R(3, 1024)), (25, R(0, 0)), (50, R(0, 0)),
])
def test_usage_at_on_h2_of_a_multi_host_reservation(base, minute, expected):
    table, *_ = base
    assert table.usage_at("h2", T(minute)) == expected


def test_reservation_count_at(base):
    table, *_ = base
    assert [table.reservation_count_at("h1", T(m)) for m in (9, 10, 15, 20, 25, 30)] == [0, 1, 2, 2, 1, 0]
    assert [table.reservation_count_at("h2", T(m)) for m in (19, 20, 25)] == [0, 1, 0]


def test_unknown_host_is_invalid_request_naming_host(base):
    table, *_ = base
    with pytest.raises(InvalidRequest) as exc:
        table.usage_at("h9", T(0))
    assert exc.value.field == "host"
    assert "h9" in str(exc.value)


# -- fits -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("request_vcpus,t1,t2,expected", [
    (8, 0, 10, True),      # ends exactly where r1 starts
    (8, 0, 10.01, False),  # one instant into r1
    (3, 10, 15, True),     # 2 + 3, ends exactly where r2 starts
    (3, 10, 16, False),    # reaches [15,20): 6 + 3 = 9
    (2, 15, 20, True),     # 6 + 2 = 8, exactly full
    (2.01, 15, 20, False),
    (3, 20, 30, True),     # 5 + 3 = 8 at most
    (3, 19, 30, False),
    (4, 25, 30, True),     # 4 + 4
    (5, 25, 30, False),
    (8, 30, 1000, True),   # starts exactly where r2 ends
    (8, 29.99, 1000, False),
    (9, 100, 200, False),  # more than the host
])
def test_fits_over_intervals_touching_boundaries(base, request_vcpus, t1, t2, expected):
    table, *_ = base
    assert table.fits("h1", R(request_vcpus), T(t1), T(t2)) is expected


def test_fits_checks_memory_too(base):
    table, *_ = base
    assert table.fits("h1", R(0, 5120), T(15), T(20)) is True    # 3072 + 5120 = 8192
    assert table.fits("h1", R(0, 5121), T(15), T(20)) is False


def test_fits_on_an_empty_interval_checks_the_point(base):
    table, *_ = base
    assert table.fits("h1", R(2), T(15), T(15)) is True
    assert table.fits("h1", R(3), T(15), T(15)) is False
    assert table.fits("h1", R(3), T(14), T(14)) is True


def test_fits_refuses_an_inverted_interval_naming_the_end(base):
    table, *_ = base
    with pytest.raises(InvalidRequest) as exc:
        table.fits("h1", R(1), T(20), T(10))
    assert exc.value.field == "end"
    assert str(exc.value).startswith("end: ")


# -- latest_fit -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("request_vcpus,t1,t2,expected", [
    (3, 15, None, None),      # does not fit at t1
    (3, 15, 40, None),
    (9, 0, None, None),       # never fits
    (3, 10, None, T(15)),     # first breakpoint where it stops fitting
    (3, 10, 40, T(15)),
    (3, 10, 12, T(12)),       # capped at t2 before the breakpoint
    (3, 10, 15, T(15)),       # fits through [10,15): returns t2
    (5, 0, 50, T(15)),        # fits at 10 (2+5), not at 15 (6+5)
    (7, 0, 50, T(10)),
    (3, 20, 40, T(40)),       # fits through
    (3, 20, None, FOREVER),   # fits for ever
    (8, 30, None, FOREVER),
    (8, 29, None, None),
    (4, 25, None, FOREVER),
])
def test_latest_fit(base, request_vcpus, t1, t2, expected):
    table, *_ = base
    assert table.latest_fit("h1", R(request_vcpus), T(t1), None if t2 is None else T(t2)) == expected


def test_forever_is_aware_utc():
    assert FOREVER.tzinfo is not None and FOREVER.utcoffset() == timedelta(0)


# -- changepoints_after ---------------------------------------------------------------------------------------------

def test_changepoints_after(base):
    table, *_ = base
    assert table.changepoints_after(T(0)) == [T(10), T(15), T(20), T(25), T(30)]
    assert table.changepoints_after(T(15)) == [T(20), T(25), T(30)]            # strictly after t
    assert table.changepoints_after(T(14.5)) == [T(15), T(20), T(25), T(30)]
    assert table.changepoints_after(T(15), until=T(25)) == [T(20)]             # strictly before until
    assert table.changepoints_after(T(15), until=T(25.5)) == [T(20), T(25)]
    assert table.changepoints_after(T(0), hosts=["h2"]) == [T(20), T(25)]
    assert table.changepoints_after(T(20), hosts=["h2"]) == [T(25)]
    assert table.changepoints_after(T(0), hosts=[]) == []
    assert table.changepoints_after(T(30)) == []


def test_changepoints_after_unknown_host_is_invalid_request(base):
    table, *_ = base
    with pytest.raises(InvalidRequest) as exc:
        table.changepoints_after(T(0), hosts=["nope"])
    assert exc.value.field == "host"


# -- excluding (as if those leases were preempted) -------------------------------------------------------------------------

def test_usage_at_excluding(base):
    table, r1, r2, r3 = base
    assert table.usage_at("h1", T(17), excluding=[r2]) == R(2, 1024)
    assert table.usage_at("h1", T(17), excluding=[r1, r2]) == R(0, 0)
    assert table.usage_at("h1", T(22), excluding=[r3]) == R(4, 2048)
    assert table.usage_at("h2", T(22), excluding=[r3]) == R(0, 0)
    assert table.usage_at("h2", T(22), excluding=[r1, r2]) == R(3, 1024)   # not on h2: no effect
    assert table.usage_at("h1", T(30), excluding=[r2]) == R(0, 0)            # r2 is over at 30
    assert table.usage_at("h1", T(14), excluding=[r2]) == R(2, 1024)         # r2 not yet started
    assert table.free_at("h1", T(17), excluding=[r2]) == R(6, 7168)
    # the table itself is untouched
    assert table.usage_at("h1", T(17)) == R(6, 3072)


def test_fits_excluding(base):
    table, r1, r2, r3 = base
    assert table.fits("h1", R(3), T(10), T(30)) is False
    assert table.fits("h1", R(5), T(10), T(30), excluding=[r2]) is True     # at most 2 left
    assert table.fits("h1", R(6.5), T(10), T(30), excluding=[r2]) is False  # 2 + 6.5 on [10,15)
    assert table.fits("h1", R(7), T(20), T(30), excluding=[r2]) is True     # only r3's 1 left
    assert table.fits("h1", R(8), T(10), T(30), excluding=[r1, r2, r3]) is True
    assert table.fits("h1", R(8), T(10), T(30), excluding=[r1, r2]) is False  # r3 on [20,25)
    assert table.fits("h1", R(2.5), T(15), T(15), excluding=[r1]) is True     # empty interval: the point


def test_latest_fit_excluding(base):
    table, r1, r2, r3 = base
    assert table.latest_fit("h1", R(6), T(10), excluding=[r2]) == FOREVER
    assert table.latest_fit("h1", R(6), T(10), excluding=[r1]) == T(15)      # 4 + 6 at 15
    assert table.latest_fit("h1", R(7), T(0), T(60), excluding=[r2]) == T(10)
    assert table.latest_fit("h1", R(3), T(15), excluding=[r1]) == FOREVER
    assert table.latest_fit("h1", R(4), T(15), excluding=[r1]) == T(20)       # 4+1+4 at 20
    assert table.latest_fit("h1", R(5), T(15), excluding=[r1]) is None        # 4+5 at 15


def test_excluding_the_same_reservation_twice_counts_it_once(base):
    table, r1, r2, r3 = base
    assert table.usage_at("h1", T(17), excluding=[r2, r2]) == R(2, 1024)
    assert table.fits("h1", R(7), T(15), T(20), excluding=[r2, r2]) is False   # 2 + 7 > 8
    assert table.latest_fit("h1", R(7), T(15), excluding=[r2, r2]) is None


def test_excluding_a_reservation_not_in_the_table_has_no_effect(base):
    table, r1, r2, r3 = base
    stranger = rr(9, 0, 100, {"h1": R(4, 1024)})   # never added
    assert table.usage_at("h1", T(17), excluding=[stranger]) == R(6, 3072)
    assert table.fits("h1", R(4), T(0), T(100), excluding=[stranger]) is False
    table.remove(r2)                                # removed: already gone
    assert table.usage_at("h1", T(17), excluding=[r2]) == R(2, 1024)
    assert table.latest_fit("h1", R(7), T(15), excluding=[r2]) is None


# -- add / remove / update ------------------------------------------------------------------------------------------------

def test_add_assigns_increasing_ids_and_indexes(base):
    table, r1, r2, r3 = base
    assert [r1.id, r2.id, r3.id] == [1, 2, 3]
    assert len(table) == 3
    assert r1 in table and r2 in table and r3 in table
    assert table.reservations() == [r1, r2, r3]
    assert table.reservations_of(2) == [r2]
    assert table.reservations_of(99) == []
    assert table.reservations_ending_after(T(20)) == [r3, r2]
    assert table.reservations_ending_after(T(19)) == [r1, r3, r2]
    assert table.reservations_ending_after(T(30)) == []
    assert table.reservations_overlapping(T(25), T(30)) == [r2]
    assert table.reservations_overlapping(T(0), T(10)) == []
    assert table.reservations_overlapping(T(0), T(10.5)) == [r1]
    assert table.reservations_overlapping(T(0), T(100), hosts=["h2"]) == [r3]


def test_reservations_of_a_lease_in_time_order():
    table = SlotTable({"h1": CAP})
    late = table.add(rr(5, 50, 60, {"h1": R(1)}))
    early = table.add(rr(5, 10, 20, {"h1": R(1)}))
    assert table.reservations_of(5) == [early, late]


def test_add_refuses_end_before_start_naming_the_field():
    table = SlotTable({"h1": CAP})
    with pytest.raises(InvalidRequest) as exc:
        table.add(rr(1, 20, 10, {"h1": R(1)}))
    assert exc.value.field == "end"
    assert str(exc.value).startswith("end: ")
    assert len(table) == 0 and len(table.timeline("h1")) == 0


def test_add_refuses_unknown_host_and_leaves_table_untouched(base):
    table, *_ = base
    with pytest.raises(InvalidRequest) as exc:
        table.add(rr(7, 0, 100, {"h1": R(1), "h9": R(1)}))
    assert exc.value.field == "host"
    assert len(table) == 3
    assert table.usage_at("h1", T(5)) == R(0, 0)


def test_add_twice_and_remove_twice_are_inconsistent(base):
    table, r1, r2, r3 = base
    with pytest.raises(InconsistentSchedule):
        table.add(r1)
    table.remove(r1)
    with pytest.raises(InconsistentSchedule):
        table.remove(r1)
    assert len(table) == 2


def test_remove_restores_usage(base):
    table, r1, r2, r3 = base
    table.remove(r2)
    assert [table.usage_at("h1", T(m)) for m in (10, 15, 20, 25, 30)] == [
        R(2, 1024), R(2, 1024), R(1, 512), R(0, 0), R(0, 0)]
    assert table.changepoints_after(T(0)) == [T(10), T(20), T(25)]
    assert table.reservations_of(2) == []
    assert r2 not in table


def test_update_moves_in_time_keeping_the_id(base):
    table, r1, r2, r3 = base
    table.update(r2, T(40), T(50))
    assert r2.id == 2 and r2 in table
    assert (r2.start, r2.end) == (T(40), T(50))
    assert table.usage_at("h1", T(17)) == R(2, 1024)
    assert table.usage_at("h1", T(40)) == R(4, 2048)
    assert table.usage_at("h1", T(50)) == R(0, 0)
    assert table.changepoints_after(T(0), hosts=["h1"]) == [T(10), T(20), T(25), T(40), T(50)]
    assert table.reservations_ending_after(T(45)) == [r2]
    assert table.reservations_of(2) == [r2]
    # a new reservation still gets a fresh id
    assert table.add(rr(4, 0, 1, {"h2": R(1)})).id == 4


def test_update_changes_resources_and_hosts(base):
    table, r1, r2, r3 = base
    table.update(r3, T(20), T(25), {"h2": R(8, 8192)})
    assert table.usage_at("h1", T(22)) == R(4, 2048)
    assert table.usage_at("h2", T(22)) == R(8, 8192)
    assert table.changepoints_after(T(0), hosts=["h1"]) == [T(10), T(15), T(20), T(30)]
    assert r3.id == 3


def test_update_refusals_leave_the_table_untouched(base):
    table, r1, r2, r3 = base
    with pytest.raises(InvalidRequest) as exc:
        table.update(r2, T(50), T(40))
    assert exc.value.field == "end"
    with pytest.raises(InvalidRequest) as exc:
        table.update(r2, T(40), T(50), {"h9": R(1)})
    assert exc.value.field == "host"
    assert r2 in table and (r2.start, r2.end) == (T(15), T(30)) and r2.resources == {"h1": R(4, 2048)}
    assert table.usage_at("h1", T(17)) == R(6, 3072)
    assert table.changepoints_after(T(0)) == [T(10), T(15), T(20), T(25), T(30)]
    assert len(table) == 3


def test_update_of_a_reservation_not_in_the_table_is_inconsistent(base):
    table, *_ = base
    with pytest.raises(InconsistentSchedule):
        table.update(rr(1, 0, 1, {"h1": R(1)}), T(0), T(2))


def test_removing_everything_leaves_no_breakpoints(base):
    table, r1, r2, r3 = base
    extra = table.add(rr(4, 30, 40, {"h1": R(2), "h2": R(2)}))   # starts where r2 ends: shared breakpoint
    assert table.changepoints_after(T(0)) == [T(10), T(15), T(20), T(25), T(30), T(40)]
    table.remove(r2)
    assert table.changepoints_after(T(0), hosts=["h1"]) == [T(10), T(20), T(25), T(30), T(40)]
    for r in (r3, extra, r1):
        table.remove(r)
    assert len(table) == 0
    assert table.reservations() == []
    assert len(table.timeline("h1")) == 0 and len(table.timeline("h2")) == 0
    assert table.timeline("h1").last_breakpoint() is None
    assert table.changepoints_after(EPOCH - timedelta(days=365)) == []
    assert table.reservations_ending_after(EPOCH - timedelta(days=365)) == []
    assert table.usage_at("h1", T(17)) == NOTHING
    assert table.latest_fit("h1", CAP, T(0)) == FOREVER
    assert table.overcommitted() == []


# -- zero-length reservations --------------------------------------------------------------------------------------------

def test_zero_length_reservation_holds_nothing(base):
    table, r1, r2, r3 = base
    z = table.add(rr(8, 12, 12, {"h1": R(8, 8192)}))
    assert z.id == 4 and z in table and len(table) == 4
    assert table.usage_at("h1", T(12)) == R(2, 1024)
    assert table.reservation_count_at("h1", T(12)) == 1
    assert table.changepoints_after(T(0)) == [T(10), T(15), T(20), T(25), T(30)]
    assert table.reservations_of(8) == [z]
    assert table.reservations_overlapping(T(0), T(100)) == [r1, r3, r2]
    assert table.fits("h1", R(6), T(11), T(13)) is True
    assert table.fits("h1", R(6), T(12), T(12), excluding=[z]) is True
    table.update(z, T(12), T(13))                       # grows to a real interval
    assert table.usage_at("h1", T(12)) == R(10, 9216)
    assert table.overcommitted() == [("h1", T(12), R(10, 9216))]
    table.update(z, T(13), T(13))                       # and back to nothing
    assert table.overcommitted() == []
    assert table.changepoints_after(T(0)) == [T(10), T(15), T(20), T(25), T(30)]
    table.remove(z)
    assert len(table) == 3


# -- whole-table checks ------------------------------------------------------------------------------------------------

def test_overcommitted_lists_every_over_capacity_segment(base):
    table, r1, r2, r3 = base
    assert table.overcommitted() == []
    big = table.add(rr(9, 12, 18, {"h1": R(8, 1024)}))   # added without asking fits
    assert table.overcommitted() == [
        ("h1", T(12), R(10, 2048)),
        ("h1", T(15), R(14, 4096)),
    ]
    table.remove(big)
    assert table.overcommitted() == []
    mem = table.add(rr(9, 20, 21, {"h2": R(1, 7169)}))    # 1024 + 7169 MiB > 8192
    assert table.overcommitted() == [("h2", T(20), R(4, 8193))]
    table.remove(mem)
    assert table.overcommitted() == []


def test_hosts_and_capacities():
    table = SlotTable([("a", Resources.of(8, 4096)), ("b", Resources.of(4, 16384, disk=100))])
    assert table.hosts == ["a", "b"]
    assert table.capacity("b") == Resources(400, 16384, 100)
    assert table.largest_capacity() == Resources(800, 16384, 100)
    assert SlotTable().largest_capacity() == NOTHING
    with pytest.raises(InvalidRequest):
        table.add_host("a", CAP)
    with pytest.raises(InvalidRequest) as exc:
        table.add_host("c", Resources.of(0, 1024))
    assert exc.value.field == "host c.cpu"
    table.add(rr(1, 0, 10, {"a": R(1)}))
    with pytest.raises(InvalidRequest):
        table.remove_host("a")
    table.remove_host("b")
    assert table.hosts == ["a"]


def test_hosts_added_together_are_all_or_nothing_and_ranked_at_once():
    """`add_hosts` checks every host first (a name twice, a bad capacity: nothing added), then the host
    states see all of them in one step."""
    table = SlotTable([("a", CAP)])
    for bad in ([("b", CAP), ("b", CAP)], [("b", CAP), ("a", CAP)], [("b", CAP), ("c", Resources.of(0, 1024))]):
        with pytest.raises(InvalidRequest):
            table.add_hosts(bad)
        assert table.hosts == ["a"]
    table.add(rr(1, 0, 10, {"a": R(8)}))
    table.add_hosts([("b", CAP), ("c", Resources.of(4, 4096))])
    assert table.hosts == ["a", "b", "c"]
    states = table.states_at(T(5))
    assert states.names == ["a", "b", "c"] and states.used.tolist()[0][0] == R(8).cpu
    assert states.capacity.tolist()[2][:2] == [Resources.of(4, 4096).cpu, 4096]


def test_a_reservation_taken_out_and_put_back_keeps_its_id(base):
    table, r1, r2, r3 = base
    table.remove(r2)
    assert table.add(r2) is r2 and r2.id == 2 and r2 in table
    assert table.usage_at("h1", T(17)) == R(6, 3072)
    assert table.add(rr(4, 0, 1, {"h1": R(1)})).id == 4


def test_a_kept_id_is_never_handed_out_again():
    table = SlotTable({"h1": CAP})
    foreign = rr(1, 0, 10, {"h1": R(1)})
    foreign.id = 2                                   # issued elsewhere
    table.add(foreign)
    first = table.add(rr(2, 0, 10, {"h1": R(1)}))
    second = table.add(rr(3, 0, 10, {"h1": R(1)}))
    assert foreign.id == 2 and first.id == 3 and second.id == 4
    assert len(table) == 3 and all(r in table for r in (foreign, first, second))
    assert table.usage_at("h1", T(5)) == R(3)


def test_an_id_the_end_time_index_cannot_order_is_refused_naming_the_field():
    """The by-end index orders by end, then id, in one integer: an id outside its range is refused, and
    the table is left as it was."""
    table = SlotTable({"h1": CAP})
    for bad in (-1, 1 << 40):
        foreign = rr(1, 0, 10, {"h1": R(1)})
        foreign.id = bad
        with pytest.raises(InvalidRequest) as err:
            table.add(foreign)
        assert err.value.field == "id" and str(bad) in str(err.value)
    assert len(table) == 0 and table.usage_at("h1", T(5)) == NOTHING
    assert table.add(rr(1, 0, 10, {"h1": R(1)})).id == 1


def test_reservations_ending_at_one_instant_come_by_id_and_only_after_it():
    table = SlotTable({"h1": CAP})
    late = [table.add(rr(i, 0, 30, {"h1": R(1)})) for i in range(1, 4)]
    early = table.add(rr(4, 0, 20, {"h1": R(1)}))
    assert table.reservations_ending_after(T(10)) == [early, *late]
    assert table.reservations_ending_after(T(20)) == late
    assert table.reservations_ending_after(T(10), until=T(20)) == [early]
    assert list(table.iter_ending_after(T(29.99))) == late and list(table.iter_ending_after(T(30))) == []


def test_an_empty_interval_excluding_a_reservation_that_starts_there(base):
    """[t, t) is the point t: an excluded reservation in force at t does not count, even one starting at t."""
    table, r1, r2, r3 = base
    assert table.fits("h1", R(6), T(10), T(10)) is True            # 2 in use
    assert table.fits("h1", R(7), T(10), T(10)) is False
    assert table.fits("h1", R(8), T(10), T(10), excluding=[r1]) is True
    assert table.latest_fit("h1", R(8), T(10), T(10), excluding=[r1]) == T(10)
    assert table.latest_fit("h1", R(8), T(15), T(15), excluding=[r2]) is None   # r1 still holds 2
    assert table.latest_fit("h1", R(6), T(15), T(15), excluding=[r2]) == T(15)


# -- internal representation: integer time keys, shared usage vectors ---------------------------------------------------

def test_times_a_microsecond_apart_and_at_the_ends_of_the_calendar_stay_distinct():
    table = SlotTable({"h1": CAP})
    t = datetime(2026, 1, 1, 12, tzinfo=UTC)
    us = timedelta(microseconds=1)
    a = table.add(rr(1, 0, 0, {"h1": R(1)}))
    table.update(a, t, t + us)                                   # one microsecond long
    b = table.add(Reservation(2, ReservationKind.VM, t + us, t + 2 * us, {"h1": R(2)}))
    assert [table.usage_at("h1", x) for x in (t - us, t, t + us, t + 2 * us)] == [R(0), R(1), R(2), R(0)]
    assert table.changepoints_after(t - us) == [t, t + us, t + 2 * us]
    assert table.latest_fit("h1", R(7), t - us) == t + us
    first = datetime(1, 1, 1, tzinfo=UTC)
    c = table.add(Reservation(3, ReservationKind.VM, first, first + us, {"h1": R(3)}))
    d = table.add(Reservation(4, ReservationKind.VM, FOREVER - us, FOREVER, {"h1": R(4)}))
    assert table.usage_at("h1", first) == R(3) and table.usage_at("h1", first + us) == R(0)
    assert table.usage_at("h1", FOREVER - us) == R(4) and table.usage_at("h1", FOREVER) == R(0)
    assert table.timeline("h1").last_breakpoint() == FOREVER
    assert table.changepoints_after(first) == [first + us, t, t + us, t + 2 * us, FOREVER - us, FOREVER]
    for r in (a, b, c, d):
        table.remove(r)
    assert len(table.timeline("h1")) == 0


def test_times_in_other_timezones_are_the_same_instants():
    plus2 = timezone(timedelta(hours=2))
    table = SlotTable({"h1": CAP})
    local = datetime(2026, 1, 1, 2, 10, tzinfo=plus2)             # 00:10 UTC
    r = table.add(Reservation(1, ReservationKind.VM, local, local + timedelta(minutes=10), {"h1": R(2)}))
    assert table.usage_at("h1", T(10)) == R(2) and table.usage_at("h1", T(9.99)) == R(0)
    assert table.changepoints_after(T(0)) == [T(10), T(20)]
    assert table.fits("h1", R(7), local - timedelta(minutes=5), local) is True
    table.remove(r)
    assert table.changepoints_after(T(0)) == []


def test_a_host_with_many_breakpoints_against_brute_force():
    """Thousands of breakpoints on one host: every answer matches a plain sum."""
    import random
    rng = random.Random(7)
    table = SlotTable({"h1": Resources.of(10_000, 10**9)})
    live = []
    for lease in range(1, 3001):
        start = rng.randrange(0, 20_000)
        live.append(table.add(rr(lease, start, start + rng.randrange(1, 60), {"h1": R(1, rng.randrange(1, 5))})))

    def check():
        points = {p for r in live for p in (r.start, r.end)}
        tl = table.timeline("h1")
        assert len(tl) == len(points)
        assert table.changepoints_after(EPOCH - timedelta(days=1)) == sorted(points)
        for _ in range(300):
            t = T(rng.randrange(-10, 20_100) + rng.choice((0, 0.5)))
            expected = [r for r in live if r.start <= t < r.end]
            assert table.usage_at("h1", t) == Resources(sum(r.resources["h1"].cpu for r in expected),
                                                          sum(r.resources["h1"].memory for r in expected))
            assert table.reservation_count_at("h1", t) == len(expected)
            used, count, lo, hi = tl.window(t)
            assert count == len(expected)
            assert lo == max((p for p in points if p <= t), default=None)
            assert hi == min((p for p in points if p > t), default=None)

    check()
    rng.shuffle(live)
    while len(live) > 50:
        table.remove(live.pop())
    check()
    while live:
        table.remove(live.pop())
    assert len(table.timeline("h1")) == 0
    assert table.usage_at("h1", T(100)) == NOTHING


def test_a_host_filled_at_its_front_then_its_back_then_emptied_anywhere_holds_no_time_it_let_go():
    """Breakpoints go in before all others, then after all others, then out from random places (the
    compiled timeline moves its arrays' tail each time, and grows them when full): answers
    match a plain sum, and no datetime stays referenced once its breakpoints are gone."""
    import random
    import sys
    rng = random.Random(11)
    table = SlotTable({"h1": Resources.of(10_000, 10**9)})
    # (times made here, one object each: their reference counts show what the table still holds)
    times = [EPOCH + timedelta(minutes=m, microseconds=1) for m in range(4000)]
    held_before = [sys.getrefcount(t) for t in times]
    live = []
    for m in range(1998, 0, -2):                    # each new reservation before all the others
        live.append(table.add(Reservation(len(live) + 1, ReservationKind.VM, times[m], times[m + 1],
                                          {"h1": R(1)})))
    for m in range(2000, 3998, 2):                  # then each after all the others
        live.append(table.add(Reservation(len(live) + 1, ReservationKind.VM, times[m], times[m + 1],
                                          {"h1": R(2)})))
    for _ in range(300):                            # and some across many of them
        m = rng.randrange(0, 3900)
        live.append(table.add(Reservation(len(live) + 1, ReservationKind.VM, times[m], times[m + rng.randrange(1, 99)],
                                          {"h1": R(3)})))

    def check():
        points = sorted({p for r in live for p in (r.start, r.end)})
        assert len(table.timeline("h1")) == len(points)
        assert table.changepoints_after(EPOCH - timedelta(days=1)) == points
        for t in rng.sample(times, 200):
            expected = [r for r in live if r.start <= t < r.end]
            assert table.usage_at("h1", t) == R(sum(r.resources["h1"].cpu for r in expected) / 100)
            assert table.reservation_count_at("h1", t) == len(expected)

    check()
    rng.shuffle(live)
    while len(live) > 100:
        table.remove(live.pop())
        if len(live) % 500 == 0:
            check()
    check()
    while live:
        table.remove(live.pop())
    assert len(table.timeline("h1")) == 0
    assert [sys.getrefcount(t) for t in times] == held_before


def test_equal_usage_vectors_are_one_shared_object_and_unused_ones_are_dropped():
    table = SlotTable({"h1": CAP, "h2": CAP})
    a = table.add(rr(1, 0, 10, {"h1": R(1, 512), "h2": R(1, 512)}))
    assert table.usage_at("h1", T(5)) is table.usage_at("h2", T(5))
    shared = table._shared
    for n in range(1, 20):                                        # each step leaves a vector nothing holds
        table.update(a, T(0), T(10), {"h1": R(1, 512 + n), "h2": R(1, 512)})
    assert len(shared.values) >= 20
    shared.limit = len(shared.values)                             # the next new vector sweeps
    table.update(a, T(0), T(10), {"h1": R(1, 600), "h2": R(1, 512)})
    assert set(shared.values) == {NOTHING, R(1, 512), R(1, 600)}
    assert table.usage_at("h1", T(5)) == R(1, 600) and table.usage_at("h2", T(5)) == R(1, 512)
    assert set(shared.vectors.values()) == {NOTHING, R(1, 512), R(1, 600)}   # code -> vector, swept alike


def test_usage_codes_sort_after_every_key():
    """Codes and keys are told apart by value: every code must be above every key a datetime can make."""
    from orchestrator.planning.slottable import keys
    latest = datetime.max.replace(tzinfo=timezone(-timedelta(hours=23, minutes=59)))   # later than FOREVER
    assert keys.time_key(latest) > keys.time_key(FOREVER)
    assert keys.time_key(latest) < keys.NOTHING_CODE
    assert keys.time_key(datetime.min.replace(tzinfo=UTC)) > keys.BEFORE_ALL


@settings(max_examples=300, deadline=None)
@given(t=st.datetimes(timezones=st.sampled_from((UTC, timezone(timedelta(hours=5, minutes=30)),
                                                  timezone(-timedelta(hours=23, minutes=59))))))
def test_a_time_key_counts_the_microseconds_since_the_epoch(t):
    """time_key adds a timedelta's fields up; the plain definition divides by a microsecond."""
    from orchestrator.planning.slottable import keys
    assert keys.time_key(t) == (t - keys.KEY_ORIGIN) // timedelta(microseconds=1)


def test_a_removed_host_leaves_the_shared_usage_registry():
    table = SlotTable({"h1": CAP, "h2": CAP})
    r = table.add(rr(1, 0, 10, {"h2": R(1, 512)}))
    gone = table.timeline("h2")
    table.remove(r)
    table.remove_host("h2")
    shared = table._shared
    assert gone not in shared.timelines
    shared.limit = len(shared.values)                             # the next new vector sweeps
    table.add(rr(2, 0, 10, {"h1": R(2, 256)}))
    assert table.usage_at("h1", T(5)) == R(2, 256)
    with pytest.raises(InvalidRequest):
        table.usage_at("h2", T(5))


def test_the_slot_table_modules_import_only_modules_before_them():
    """No import cycle inside the package (and none kept apart with TYPE_CHECKING): each module imports
    only modules listed before it."""
    import ast
    from pathlib import Path

    import orchestrator.planning.slottable as package
    order = ["keys", "shared_usage", "excluding", "core", "hoststates", "table"]
    folder = Path(package.__path__[0])
    sources = {p.stem: p for p in [*folder.glob("*.py"), *folder.glob("*.pyx")]}
    assert sorted(sources) == sorted([*order, "__init__"])
    prefix = "orchestrator.planning.slottable"
    for position, name in enumerate(order):
        source = sources[name].read_text()
        assert "TYPE_CHECKING" not in source, name
        if sources[name].suffix == ".pyx":   # (Cython: its Python imports, one a line, are Python)
            source = "\n".join(line for line in source.splitlines() if line.startswith(("from ", "import "))
                               and not line.startswith(("from libc", "from cpython")))
        used = set()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module == prefix:
                used.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(prefix + "."):
                used.add(node.module.removeprefix(prefix + ".").split(".")[0])
            elif isinstance(node, ast.Import):
                assert not any(alias.name.startswith(prefix) for alias in node.names), name
        assert used <= set(order[:position]), (name, used - set(order[:position]))
