"""Which end-of-lease notices are due: examples, a plain oracle, and a daemon stepping at any times."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.model.lease import Lease, LeaseRequest, LeaseType
from orchestrator.model.reservations import Reservation, ReservationKind
from orchestrator.model.resources import Resources
from orchestrator.model.states import LeaseState
from orchestrator.planning.notices import ENDED, due_notices, next_notice_time, planned_end
from tests.support.times import T0

H, M = timedelta(hours=1), timedelta(minutes=1)
OFFSETS = (H, 10 * M)


def vm(start: datetime, end: datetime, suspends: bool = False) -> Reservation:
    rr = Reservation(1, ReservationKind.VM, start, end, {"host1": Resources.of(1, 1024)}, nodes={0: "host1"})
    if suspends:
        rr.post.append(Reservation(1, ReservationKind.SUSPEND, end, end + M, {"host1": Resources.of(1, 1024)},
                                   nodes={0: "host1"}, vm=rr))
    return rr


def lease(state: LeaseState, *vms: Reservation, end_time: datetime | None = None, reason: str = "") -> Lease:
    req = LeaseRequest(type=LeaseType.BEST_EFFORT, nodes=(Resources.of(1, 1024),), duration=3 * H, submit_time=T0)
    return Lease(id=1, request=req, state=state, reservations=list(vms), end_time=end_time, reason=reason)


def keys(lease_: Lease, now: datetime, offsets=OFFSETS, **kw) -> list[str]:
    return [n.key for n in due_notices(lease_, now, offsets, **kw)]


# -- examples ------------------------------------------------------------------------------------------------
def test_a_running_lease_gets_each_reminder_from_its_moment_until_its_end():
    running = lease(LeaseState.ACTIVE, vm(T0, T0 + 3 * H))
    assert keys(running, T0 + 2 * H - M) == []
    assert keys(running, T0 + 2 * H) == ["before_end:1h"]
    assert keys(running, T0 + 3 * H - 10 * M) == ["before_end:1h", "before_end:10m"]
    assert keys(running, T0 + 3 * H) == []          # at the end: the step that ends it comes, then `ended`
    due = due_notices(running, T0 + 2 * H + 5 * M, OFFSETS)[0]
    assert (due.due_at, due.end, due.offset, due.kind) == (T0 + 2 * H, T0 + 3 * H, H, "before_end")


def test_a_lease_shorter_than_an_offset_gets_no_reminder_from_before_its_start():
    short = lease(LeaseState.SCHEDULED, vm(T0 + H, T0 + H + 30 * M))
    assert keys(short, T0 + H) == []
    assert keys(short, T0 + H + 25 * M) == ["before_end:10m"]


def test_a_reminder_long_overdue_is_still_due_once_the_daemon_looks():
    running = lease(LeaseState.ACTIVE, vm(T0, T0 + 3 * H))
    assert keys(running, T0 + 3 * H - M) == ["before_end:1h", "before_end:10m"]


def test_no_planned_end_while_suspending_queued_or_suspended_without_a_plan():
    assert planned_end(lease(LeaseState.ACTIVE, vm(T0, T0 + H, suspends=True))) is None
    assert planned_end(lease(LeaseState.QUEUED)) is None
    assert planned_end(lease(LeaseState.SUSPENDED_QUEUED, vm(T0, T0 + H, suspends=True))) is None
    assert keys(lease(LeaseState.ACTIVE, vm(T0, T0 + H, suspends=True)), T0 + 55 * M) == []
    # suspended, planned again: measured against the resumed run's end
    again = lease(LeaseState.SUSPENDED_SCHEDULED, vm(T0, T0 + H, suspends=True), vm(T0 + 2 * H, T0 + 4 * H))
    assert planned_end(again) == T0 + 4 * H
    assert keys(again, T0 + 3 * H) == ["before_end:1h"]


def test_an_extended_lease_is_measured_against_its_new_end():
    running = lease(LeaseState.ACTIVE, vm(T0, T0 + 3 * H))
    assert keys(running, T0 + 2 * H) == ["before_end:1h"]
    running.last_vm.end = T0 + 5 * H                 # `lease extend 1 --by 2h`
    assert keys(running, T0 + 2 * H) == []
    assert keys(running, T0 + 4 * H) == ["before_end:1h"]   # (the sender sends a key once: not again)


def test_a_final_lease_gets_only_ended_with_its_reason():
    failed = lease(LeaseState.FAILED, vm(T0, T0 + 3 * H), end_time=T0 + 2 * H + 55 * M, reason="host1 is gone")
    [notice] = due_notices(failed, T0 + 3 * H, OFFSETS)
    assert (notice.key, notice.end, notice.reason) == (ENDED, T0 + 2 * H + 55 * M, "failed: host1 is gone")
    done = lease(LeaseState.DONE, vm(T0, T0 + 3 * H), end_time=T0 + 3 * H)
    assert due_notices(done, T0 + 3 * H, OFFSETS)[0].reason == "done: its time is up"
    cancelled = lease(LeaseState.CANCELLED, end_time=T0)
    assert due_notices(cancelled, T0, OFFSETS)[0].reason == "cancelled"
    assert keys(lease(LeaseState.REJECTED, end_time=T0), T0) == []
    assert keys(done, T0 + 3 * H, at_end=False) == []


def test_a_lease_that_ended_before_notices_began_is_not_announced():
    done = lease(LeaseState.DONE, vm(T0, T0 + 3 * H), end_time=T0 + 3 * H)
    assert keys(done, T0 + 4 * H, ended_after=T0 + 3 * H) == []
    assert keys(done, T0 + 4 * H, ended_after=T0 + 3 * H - timedelta(seconds=1)) == [ENDED]


# -- against a plain oracle ----------------------------------------------------------------------------------
def label(offset: timedelta) -> str:
    seconds = int(offset.total_seconds())
    text = ""
    if seconds >= 3600:
        text += f"{seconds // 3600}h"
    if seconds % 3600 >= 60:
        text += f"{seconds % 3600 // 60}m"
    if seconds % 60:
        text += f"{seconds % 60}s"
    return text


def oracle(lease_: Lease, now: datetime, offsets, at_end: bool, since: datetime | None) -> set[str]:
    s = LeaseState
    if lease_.state in (s.DONE, s.CANCELLED, s.FAILED):
        ok = at_end and lease_.end_time is not None and (since is None or lease_.end_time > since)
        return {"ended"} if ok else set()
    if lease_.state not in (s.SCHEDULED, s.PREPARING, s.READY, s.ACTIVE, s.RESUMING, s.RESUMED_READY,
                            s.SUSPENDED_SCHEDULED, s.MIGRATING) or not lease_.reservations:
        return set()
    last = lease_.reservations[-1]
    if last.post and last.post[0].kind is ReservationKind.SUSPEND:
        return set()
    return {f"before_end:{label(o)}" for o in offsets
            if lease_.reservations[0].start + o <= last.end and last.end - o <= now < last.end}


minutes = st.integers(min_value=0, max_value=600)
offsets_st = st.lists(st.integers(min_value=1, max_value=4 * 3600), min_size=0, max_size=4, unique=True).map(
    lambda xs: tuple(timedelta(seconds=x) for x in xs))


@st.composite
def leases(draw) -> Lease:
    state = draw(st.sampled_from(list(LeaseState)))
    cuts = sorted(draw(st.lists(minutes, min_size=0, max_size=6, unique=True)))
    vms = [vm(T0 + a * M, T0 + b * M) for a, b in zip(cuts[::2], cuts[1::2])]
    if vms and draw(st.booleans()):
        vms[-1] = vm(vms[-1].start, vms[-1].end, suspends=True)
    end_time = T0 + draw(minutes) * M if draw(st.booleans()) else None
    return lease(state, *vms, end_time=end_time)


@settings(max_examples=400, deadline=None)
@given(leases(), minutes, offsets_st, st.booleans(), st.none() | minutes.map(lambda m: T0 + m * M))
def test_due_notices_agree_with_the_oracle(lease_, now, offsets, at_end, since):
    at = T0 + now * M
    got = due_notices(lease_, at, offsets, at_end=at_end, ended_after=since)
    assert {n.key for n in got} == oracle(lease_, at, offsets, at_end, since)
    assert len(got) == len({n.key for n in got})
    assert all(n.due_at <= at for n in got if n.key != ENDED)   # (an ended one: whenever it ended)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=1, max_value=300), st.integers(min_value=1, max_value=300), offsets_st,
       st.lists(st.integers(min_value=0, max_value=400 * 60), max_size=30))
def test_a_daemon_stepping_at_any_times_sends_each_reminder_once_between_its_moment_and_the_end(
        start_m, length_m, offsets, step_seconds):
    start, end = T0 + start_m * M, T0 + (start_m + length_m) * M
    running = lease(LeaseState.ACTIVE, vm(start, end))
    steps = sorted(T0 + timedelta(seconds=s) for s in step_seconds)
    sent: dict[str, datetime] = {}
    for now in steps:
        for notice in due_notices(running, now, offsets):
            sent.setdefault(notice.key, now)
    for offset in offsets:
        key = f"before_end:{label(offset)}"
        moment = end - offset
        stepped_in_window = any(moment <= t < end for t in steps)
        if moment < start or not stepped_in_window:
            assert key not in sent
        else:
            assert moment <= sent[key] < end
            assert sent[key] == min(t for t in steps if moment <= t < end)


@settings(max_examples=300, deadline=None)
@given(leases(), minutes, offsets_st, st.lists(st.integers(min_value=1, max_value=600 * 60), max_size=8))
def test_nothing_new_is_due_before_the_next_notice_time_and_something_is_then(lease_, now_m, offsets, probes):
    now = T0 + now_m * M
    following = next_notice_time(lease_, now, offsets)
    before = {n.key for n in due_notices(lease_, now, offsets)}
    for seconds in probes:
        at = now + timedelta(seconds=seconds)
        if following is None or at < following:
            assert {n.key for n in due_notices(lease_, at, offsets)} <= before
    if following is not None:
        assert following > now
        assert {n.key for n in due_notices(lease_, following, offsets)} - before
