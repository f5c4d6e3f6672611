"""The lease model: the state table, request validation, capacities, time parsing."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from orchestrator.model.errors import IllegalTransition, InvalidRequest
from orchestrator.model.lease import Lease, LeaseRequest, LeaseType
from orchestrator.model.reservations import Reservation, ReservationKind
from orchestrator.model.resources import Resources, metered, parse_capacity, within
from orchestrator.model.states import (
    FINAL_STATES,
    TRANSITIONS,
    LeaseState,
    can_transition,
)
from orchestrator.model.timeutil import (
    UTC,
    ceil_seconds,
    iso,
    parse_duration,
    parse_time,
)
from orchestrator.planning.slottable.table import SlotTable
from tests.support.times import EPOCH

S = LeaseState
ALL_PAIRS = [(a, b) for a in LeaseState for b in LeaseState]


def request(**overrides) -> LeaseRequest:
    fields = dict(type=LeaseType.BEST_EFFORT, nodes=(Resources.of(1, 1024),), duration=timedelta(hours=1),
                  submit_time=EPOCH)
    fields.update(overrides)
    return LeaseRequest(**fields)


def lease_in(state: LeaseState) -> Lease:
    le = Lease(7, request())
    le.state = state
    return le


# -- state table ---------------------------------------------------------------------------------------------------------

def test_the_table_covers_every_state():
    assert set(TRANSITIONS) == set(LeaseState)


@pytest.mark.parametrize("current,target", ALL_PAIRS, ids=[f"{a.value}->{b.value}" for a, b in ALL_PAIRS])
def test_every_pair_of_states(current, target):
    le = lease_in(current)
    at = EPOCH + timedelta(minutes=5)
    if target in TRANSITIONS[current]:
        assert can_transition(current, target)
        le.set_state(target, at)
        assert le.state is target
        assert le.history == [(at, target)]
        assert le.end_time == (at if target in FINAL_STATES else None)
    else:
        assert not can_transition(current, target)
        with pytest.raises(IllegalTransition) as exc:
            le.set_state(target, at)
        assert le.state is current and le.history == [] and le.end_time is None
        assert exc.value.current is current and exc.value.target is target and exc.value.lease_id == 7
        assert str(exc.value) == f"lease 7: illegal state transition {current.value} -> {target.value}"


def test_final_states_have_no_exits():
    assert FINAL_STATES == {S.DONE, S.REJECTED, S.CANCELLED, S.FAILED}
    for state in FINAL_STATES:
        assert TRANSITIONS[state] == frozenset()
        assert lease_in(state).is_final


def test_every_live_state_can_be_cancelled_and_leads_somewhere():
    for state in set(LeaseState) - FINAL_STATES:
        assert S.CANCELLED in TRANSITIONS[state], state
        assert not lease_in(state).is_final


def test_every_state_is_reachable_from_new():
    seen, frontier = {S.NEW}, [S.NEW]
    while frontier:
        for nxt in TRANSITIONS[frontier.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    assert seen == set(LeaseState)


def test_history_records_a_whole_life_with_suspension():
    le = Lease(1, request())
    path = [S.PENDING, S.QUEUED, S.SCHEDULED, S.PREPARING, S.READY, S.ACTIVE, S.SUSPENDING,
            S.SUSPENDED_PENDING, S.SUSPENDED_QUEUED, S.SUSPENDED_SCHEDULED, S.MIGRATING,
            S.SUSPENDED_SCHEDULED, S.RESUMING, S.RESUMED_READY, S.ACTIVE, S.DONE]
    times = [EPOCH + timedelta(minutes=i) for i in range(len(path))]
    for state, at in zip(path, times):
        le.set_state(state, at)
    assert le.history == list(zip(times, path))
    assert le.state is S.DONE and le.is_final and le.end_time == times[-1]
    with pytest.raises(IllegalTransition):
        le.set_state(S.ACTIVE, times[-1])
    assert len(le.history) == len(path)


def test_state_strings():
    assert str(S.SUSPENDED_QUEUED) == "suspended-queued"
    assert str(LeaseType.ADVANCE_RESERVATION) == "advance-reservation"
    assert [t.short for t in LeaseType] == ["AR", "BE", "IM"]


# -- request validation ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides,field", [
    (dict(duration=timedelta(minutes=-5)), "duration"),
    (dict(duration=timedelta(0)), "duration"),
    (dict(nodes=()), "nodes"),
    (dict(nodes=(Resources.of(1, 1024), Resources.of(1, -1))), "nodes[1].memory"),
    (dict(nodes=(Resources.of(1, 0),)), "nodes[0].memory"),
    (dict(nodes=(Resources.of(0, 1024),)), "nodes[0].cpu"),
    (dict(nodes=(Resources.of(-1, 1024),)), "nodes[0].cpu"),
    (dict(nodes=(Resources(100, 1024, -1),)), "nodes[0].disk"),
    (dict(type=LeaseType.ADVANCE_RESERVATION), "start"),
    (dict(submit_time=datetime(2026, 1, 1)), "submit_time"),
    (dict(type=LeaseType.ADVANCE_RESERVATION, start=datetime(2026, 1, 1, 12)), "start"),
    (dict(real_duration=timedelta(0)), "real_duration"),
    (dict(dirty_rate_mib_s=-1.0), "dirty_rate"),
])
def test_invalid_requests_name_the_field(overrides, field):
    with pytest.raises(InvalidRequest) as exc:
        request(**overrides)
    message = str(exc.value)
    assert exc.value.field == field
    assert message.startswith(f"{field}: ")
    assert "\n" not in message


def test_valid_requests_are_normalised_to_utc():
    plus2 = timezone(timedelta(hours=2))
    r = request(type=LeaseType.ADVANCE_RESERVATION, submit_time=datetime(2026, 1, 1, 2, tzinfo=plus2),
                start=datetime(2026, 1, 1, 14, tzinfo=plus2), duration=timedelta(minutes=90))
    assert r.submit_time == EPOCH and r.submit_time.tzinfo is UTC
    assert r.start == datetime(2026, 1, 1, 12, tzinfo=UTC) and r.start.tzinfo is UTC
    assert r.end == datetime(2026, 1, 1, 13, 30, tzinfo=UTC)
    assert r.numnodes == 1
    assert request().end is None


def test_lease_shortcuts():
    le = Lease(3, request(nodes=(Resources.of(1, 1024),) * 3, preemptible=False, real_duration=timedelta(minutes=40)))
    le.accumulated = timedelta(minutes=15)
    assert (le.numnodes, le.preemptible, le.type, le.submit_time) == (3, False, LeaseType.BEST_EFFORT, EPOCH)
    assert le.remaining == timedelta(minutes=45)
    assert le.remaining_real == timedelta(minutes=25)
    assert le.last_vm is None


# -- resources ----------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("CPU:100,Memory:1024", Resources(100, 1024)),
    ("cpu:400, memory:16384, disk:20000", Resources(400, 16384, 20000)),
    (" Memory:512 ,CPU:50,", Resources(50, 512)),
    ("CPU:800,Mem:2048,Net-in:100,Net-out:50", Resources(800, 2048, 0, 100, 50)),
    ("CPU:100,Memory:1024,net_in:10,netout:20", Resources(100, 1024, 0, 10, 20)),
    ("CPU:12.5,Memory:0", Resources(12.5, 0)),
])
def test_parse_capacity_good(text, expected):
    assert parse_capacity(text) == expected


@pytest.mark.parametrize("text,field", [
    ("", "capacity"),
    ("CPU:100", "capacity"),
    ("Memory:1024", "capacity"),
    ("CPU100,Memory:1024", "capacity"),
    ("GPU:1,CPU:100,Memory:1024", "capacity"),
    ("CPU:abc,Memory:1024", "capacity.cpu"),
    ("CPU:100,Memory:", "capacity.memory"),
    ("CPU:-100,Memory:1024", "capacity.cpu"),
    ("CPU:100,Memory:nan", "capacity.memory"),
    ("CPU:inf,Memory:1024", "capacity.cpu"),
])
def test_parse_capacity_bad(text, field):
    with pytest.raises(InvalidRequest) as exc:
        parse_capacity(text)
    assert exc.value.field == field
    assert str(exc.value).startswith(f"{field}: ")


def test_parse_capacity_names_the_caller_field():
    with pytest.raises(InvalidRequest) as exc:
        parse_capacity("CPU:x,Memory:1", field="hosts[3].capacity")
    assert str(exc.value).startswith("hosts[3].capacity.cpu: ")


def test_resources_helpers():
    r = Resources.of(2, 4096, disk=10)
    assert r == Resources(200, 4096, 10, 0, 0) and r.vcpus == 2
    assert r.describe() == "2 vCPU, 4096 MiB, disk 10 MiB"
    assert Resources.of(0.5, 512, net_in=1, net_out=2).describe() == "0.5 vCPU, 512 MiB, net 1/2 MB/s"
    assert within(Resources.of(8, 8192), Resources.of(8, 8192))
    assert not within(Resources.of(8, 8193), Resources.of(8, 8192))
    # (a host that declares no disk or network does not meter them)
    assert metered(Resources(100, 512, 512, 10, 20), Resources.of(8, 8192)) == Resources(100, 512, 0, 0, 0)
    assert metered(Resources(100, 512, 512, 10, 20), Resources(800, 8192, 1, 1, 1)) == Resources(100, 512, 512, 10, 20)


def test_resources_validate_refuses_nan():
    with pytest.raises(InvalidRequest) as exc:
        Resources(float("nan"), 1024).validate("nodes[0]")
    assert exc.value.field == "nodes[0].cpu"


# -- slot table guards ---------------------------------------------------------------------------------------------------------

def test_slot_table_refuses_end_before_start_naming_the_field():
    table = SlotTable({"h1": Resources.of(8, 8192)})
    bad = Reservation(1, ReservationKind.VM, EPOCH + timedelta(hours=1), EPOCH, {"h1": Resources.of(1, 1)})
    with pytest.raises(InvalidRequest) as exc:
        table.add(bad)
    assert exc.value.field == "end"
    assert str(exc.value).startswith("end: reservation ends (")


def test_memory_larger_than_any_host_is_detectable():
    table = SlotTable({"small": Resources.of(16, 4096), "big": Resources.of(4, 65536)})
    largest = table.largest_capacity()
    assert largest == Resources.of(16, 65536)
    assert within(Resources.of(4, 65536), largest)
    assert not within(Resources.of(1, 65537), largest)
    assert not within(Resources.of(17, 1), largest)


# -- time -----------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,seconds", [
    ("90", 90), ("90s", 90), ("15m", 900), ("2h", 7200), ("1d", 86400), ("1h30m", 5400),
    ("1.5h", 5400), ("01:30:00", 5400), ("1:02:03:04", 93784), ("00:00:01", 1),
    ("  2H ", 7200), ("-5m", -300), ("0", 0),
])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == timedelta(seconds=seconds)


def test_parse_duration_of_a_number():
    assert parse_duration(45) == timedelta(seconds=45)


@pytest.mark.parametrize("text", [
    "", "   ", "abc", "5x", "h", "1h h", "1 h", "1:2:3:4:5", "1::2", "01:xx:00", "1.2.3m", ".", "1..5h", "nan", "inf",
])
def test_parse_duration_bad(text):
    with pytest.raises(InvalidRequest) as exc:
        parse_duration(text, field="duration")
    assert exc.value.field == "duration"
    assert str(exc.value).startswith("duration: ")


@pytest.mark.parametrize("text,expected", [
    ("2026-01-01T14:00:00Z", datetime(2026, 1, 1, 14, tzinfo=UTC)),
    ("2026-01-01T14:00:00z", datetime(2026, 1, 1, 14, tzinfo=UTC)),
    ("2026-01-01T14:00:00+00:00", datetime(2026, 1, 1, 14, tzinfo=UTC)),
    ("2026-01-01T16:30:00+02:00", datetime(2026, 1, 1, 14, 30, tzinfo=UTC)),
    ("2025-12-31T23:00:00-05:00", datetime(2026, 1, 1, 4, tzinfo=UTC)),
    (" 2026-01-01 14:00:05Z ", datetime(2026, 1, 1, 14, 0, 5, tzinfo=UTC)),
])
def test_parse_time(text, expected):
    value = parse_time(text)
    assert value == expected
    assert value.tzinfo is UTC


@pytest.mark.parametrize("text", ["2026-01-01T14:00:00", "2026-01-01", "tomorrow", "", "2026-13-01T00:00:00Z"])
def test_parse_time_bad(text):
    with pytest.raises(InvalidRequest) as exc:
        parse_time(text, field="start")
    assert exc.value.field == "start"


def test_iso_and_ceil_seconds():
    assert iso(datetime(2026, 1, 1, 16, tzinfo=timezone(timedelta(hours=2)))) == "2026-01-01T14:00:00Z"
    assert iso(None) is None
    assert ceil_seconds(1.2) == timedelta(seconds=2)
    assert ceil_seconds(2.0) == timedelta(seconds=2)
    assert ceil_seconds(0) == timedelta(0)
