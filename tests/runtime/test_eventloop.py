"""The one event loop on both clocks: steps in order at the due times, the stop conditions (until, idle,
max_steps, Ctrl-C), polling only on a clock that moves by itself, and the guards against a loop that
would spin or wait forever."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest

from drivers.clock import RealClock, SimulatedClock
from orchestrator.model.errors import InconsistentSchedule
from orchestrator.model.timeutil import UTC
from orchestrator.runtime.eventloop import EventLoop, RunResult

T0 = datetime(2026, 1, 1, 13, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


class Plan:
    """Something to step: events due at fixed times, each handled by the first step at or after it."""

    def __init__(self, *due: datetime, first: datetime | None = None, queued: bool = False):
        self.due = sorted(due)
        self.first = first
        self.queued = queued        # work left that no planned event will do (e.g. a lease that fits nowhere)
        self.steps: list[datetime] = []
        self.handled: list[datetime] = []

    def start(self) -> datetime | None:
        return self.first

    def step_at(self, now: datetime) -> datetime | None:
        self.steps.append(now)
        while self.due and self.due[0] <= now:
            self.handled.append(self.due.pop(0))
        return self.due[0] if self.due else None

    def is_idle(self) -> bool:
        return not self.due and not self.queued


def test_steps_at_each_due_time_in_order_and_ends_idle_without_poll():
    plan = Plan(at(30), at(5), at(5), at(90))
    clock = SimulatedClock(T0)
    ran = EventLoop(clock, plan).run()
    assert plan.steps == [T0, at(5), at(30), at(90)]
    assert plan.handled == [at(5), at(5), at(30), at(90)]
    assert ran == RunResult(steps=4, stopped_by="idle")
    assert clock.now() == at(90)


def test_the_first_step_is_when_the_owner_says():
    plan = Plan(at(20), first=at(10))
    EventLoop(SimulatedClock(T0), plan).run()
    assert plan.steps == [at(10), at(20)]


def test_until_stops_after_the_step_at_that_time():
    plan = Plan(at(10), at(40), at(70))
    clock = SimulatedClock(T0)
    ran = EventLoop(clock, plan).run(until=at(50))
    assert plan.steps == [T0, at(10), at(40), at(50)]   # the last wait is cut short at `until`
    assert ran.stopped_by == "until" and clock.now() == at(50)


def test_a_virtual_clock_jumps_to_the_next_event_past_the_poll_and_polls_only_when_nothing_is_planned():
    plan = Plan(at(10))
    ran = EventLoop(SimulatedClock(T0), plan, poll=timedelta(minutes=1)).run(max_steps=4)
    assert plan.steps == [T0, at(10), at(11), at(12)]
    assert ran == RunResult(steps=4, stopped_by="max steps")


def test_until_idle_stops_when_idle_and_not_before():
    plan = Plan(at(10), queued=True)
    loop = EventLoop(SimulatedClock(T0), plan, poll=timedelta(minutes=1))
    assert loop.run(until_idle=True, max_steps=5).stopped_by == "max steps"   # queued work: not idle
    plan.queued = False
    assert loop.run(until_idle=True) == RunResult(steps=1, stopped_by="idle")


def test_nothing_planned_without_poll_but_work_left_is_an_error_not_a_hang():
    with pytest.raises(InconsistentSchedule, match="nothing is planned"):
        EventLoop(SimulatedClock(T0), Plan(at(10), queued=True)).run()


class Stuck(Plan):
    """Leaves work due at its own time `times` steps in a row (e.g. leases it started just now)."""

    def __init__(self, times: int):
        super().__init__(at(10))
        self.times = times

    def step_at(self, now: datetime) -> datetime | None:
        following = super().step_at(now)
        if self.times > 0:
            self.times -= 1
            return now
        return following


def test_work_left_due_now_is_done_by_another_step_at_the_same_time():
    plan = Stuck(times=2)
    ran = EventLoop(SimulatedClock(T0), plan, max_steps_at_same_time=3).run()
    assert plan.steps == [T0, T0, T0, at(10)]
    assert ran.stopped_by == "idle"


def test_a_step_that_never_moves_time_forward_is_no_progress():
    plan = Stuck(times=10**9)
    with pytest.raises(InconsistentSchedule, match="no progress"):
        EventLoop(SimulatedClock(T0), plan, max_steps_at_same_time=5).run()
    assert len(plan.steps) == 5


class Interrupted(Plan):
    def step_at(self, now: datetime) -> datetime | None:
        if len(self.steps) == 2:
            raise KeyboardInterrupt
        return super().step_at(now)


def test_ctrl_c_stops_the_run_only_where_asked():
    assert EventLoop(SimulatedClock(T0), Interrupted(at(1), at(2), at(3))).run(stop_on_interrupt=True) == \
        RunResult(steps=2, stopped_by="interrupt")
    with pytest.raises(KeyboardInterrupt):
        EventLoop(SimulatedClock(T0), Interrupted(at(1), at(2), at(3))).run()


def test_step_takes_one_step_now():
    plan = Plan(at(10))
    loop = EventLoop(SimulatedClock(at(10)), plan)
    assert loop.now == at(10)
    assert loop.step() is None and plan.handled == [at(10)]


def test_a_clock_that_moves_by_itself_is_slept_on_and_polled_while_an_event_is_far_off():
    """On the wall clock (run 600 times faster: a minute takes 0.1 s) the loop wakes every poll even with
    an event planned an hour ahead, because work can come from outside at any moment."""
    clock = RealClock(speedup=600)
    start = clock.now()
    plan = Plan(start + timedelta(hours=1))
    began = time.monotonic()
    ran = EventLoop(clock, plan, poll=timedelta(minutes=1)).run(max_steps=3)
    took = time.monotonic() - began
    assert ran == RunResult(steps=3, stopped_by="max steps")
    gaps = [(b - a).total_seconds() for a, b in zip(plan.steps, plan.steps[1:])]
    assert all(60 <= gap < 600 for gap in gaps), gaps   # slept a poll each time (and a busy machine's lag)
    assert 0.2 <= took < 5                                   # slept for real, but nowhere near the hour


def test_a_clock_that_moves_by_itself_wakes_for_an_event_before_the_poll():
    clock = RealClock(speedup=600)
    start = clock.now()
    plan = Plan(start + timedelta(seconds=30))
    ran = EventLoop(clock, plan, poll=timedelta(hours=1)).run(until_idle=True)
    assert ran == RunResult(steps=2, stopped_by="idle")
    assert plan.handled == [start + timedelta(seconds=30)]
    assert timedelta(seconds=30) <= plan.steps[1] - start < timedelta(minutes=10)


def test_first_step_is_set_by_the_first_step_and_by_a_run_that_ends_without_one():
    """The server waits for `first_step` before it answers: set once the owner has started and stepped,
    never before, and also when the run fails first (a waiter must not wait forever)."""
    loop = EventLoop(SimulatedClock(T0), Plan(at(10), at(20)))
    seen: list[bool] = []
    step_at = loop.owner.step_at
    loop.owner.step_at = lambda now: (seen.append(loop.first_step.is_set()), step_at(now))[1]
    loop.run()
    assert seen == [False, True, True] and loop.first_step.is_set()

    class Failing(Plan):
        def start(self):
            raise RuntimeError("the hosts cannot be reached")

    failing = EventLoop(SimulatedClock(T0), Failing(at(10)))
    with pytest.raises(RuntimeError):
        failing.run()
    assert failing.first_step.is_set()
