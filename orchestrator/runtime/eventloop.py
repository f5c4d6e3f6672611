"""The one event loop: the simulator runs it on a virtual clock, the daemon on the wall clock.

SimPy's shape (Environment / RealtimeEnvironment): the loop steps its owner at `now`, learns from the
step when something is next due, and waits for then on its clock: a `SimulatedClock` jumps, a
`RealClock` sleeps. What a step does is the owner's (the simulator feeds arrivals to the scheduler; the
daemon reads the store, enacts through a driver and commits); when to wake and when to stop is the
loop's, the same for both.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, Protocol

from drivers.clock import Clock
from orchestrator.model.errors import InconsistentSchedule

StopReason = Literal["idle", "until", "max steps", "interrupt", "stopped"]


class Steppable(Protocol):
    """What the loop steps (the simulator, the daemon)."""

    def start(self) -> datetime | None:
        """Get ready to run; returns when the first step is due (None: now)."""
        ...

    def step_at(self, now: datetime) -> datetime | None:
        """Handle everything due by `now`; returns when something is next due (None: nothing is planned)."""
        ...

    def is_idle(self) -> bool:
        """Nothing planned, queued or pending (asked only after a step that planned nothing)."""
        ...


@dataclass(frozen=True)
class RunResult:
    steps: int
    stopped_by: StopReason


class EventLoop:
    """Steps `owner` on `clock` from one due time to the next.

    `poll`: the longest wait between two steps, for work that comes from outside the owner's plan (leases
    that other processes write to the store). On a clock that moves by itself such work can come at any
    moment, so the loop wakes at least every `poll`; on a clock that moves only when waited on, nothing
    comes between two steps, so the loop jumps to the next due time and polls only when none is planned.
    Without `poll` nothing can wake an owner with nothing planned: the run ends there.

    `max_steps_at_same_time`: a step may leave work due at its own time (the daemon commits after one
    scheduling pass, leaving the leases it just started for the next step); a step that does so this many
    times in a row makes no progress, and the loop raises `InconsistentSchedule` rather than spin.
    """

    def __init__(self, clock: Clock, owner: Steppable, poll: timedelta | None = None,
                 max_steps_at_same_time: int = 100, wakeup: threading.Event | None = None,
                 coalesce_s: float = 0.0):
        """`wakeup`: set by another thread to take the next step soon on a clock that moves by itself (an
        operation ended, a lease was submitted), `coalesce_s` (wall seconds) after it was set, so a burst
        of wake-ups makes one step; `stop()` ends the run after the step under way. `first_step` is set once
        the owner has started and taken its first step, or the run has ended without one (another thread
        waits for it: the server answers once its daemon has caught up with the hosts)."""
        if max_steps_at_same_time < 1:
            raise ValueError(f"max_steps_at_same_time must be at least 1: got {max_steps_at_same_time}")
        self.clock = clock
        self.owner = owner
        self.poll = poll
        self.max_steps_at_same_time = max_steps_at_same_time
        self.wakeup = wakeup
        self.coalesce_s = coalesce_s
        self._stopping = False
        self.first_step = threading.Event()

    def stop(self) -> None:
        """End the run (from another thread): after the step under way, or at once while waiting."""
        self._stopping = True
        if self.wakeup is not None:
            self.wakeup.set()

    def _sleep_until(self, when: datetime) -> None:
        wakeup = self.wakeup
        if wakeup is None or not self.clock.moves_by_itself:
            self.clock.sleep_until(when)
            return
        seconds = (when - self.clock.now()).total_seconds() / getattr(self.clock, "speedup", 1.0)
        if seconds > 0 and wakeup.wait(seconds) and self.coalesce_s > 0 and not self._stopping:
            time.sleep(min(self.coalesce_s, seconds))
        wakeup.clear()

    @property
    def now(self) -> datetime:
        return self.clock.now()

    def step(self) -> datetime | None:
        """One step at `now`; returns when something is next due (None: nothing is planned)."""
        return self.owner.step_at(self.clock.now())

    def wake_time(self, now: datetime, following: datetime | None) -> datetime | None:
        """When to take the step after the one taken at `now`, given the next due time (None: never)."""
        poll = self.poll
        if poll is None:
            return following
        polled = now + poll
        if following is None or (self.clock.moves_by_itself and polled < following):
            return polled
        return following

    def run(self, until: datetime | None = None, until_idle: bool = False, max_steps: int | None = None,
            stop_on_interrupt: bool = False) -> RunResult:
        """Start the owner, then step it until it is idle (when `until_idle`, or always without `poll`),
        a step at or past `until` has been taken, or `max_steps` have been. With `stop_on_interrupt`,
        Ctrl-C stops the run too (the daemon's: a step cut short rolls back, and the next start redoes it).
        """
        owner, clock = self.owner, self.clock
        # the hot loop of a simulation (one pass per instant of a trace): names bound once, no allocation
        clock_now = clock.now
        sleep_until = self._sleep_until if self.wakeup is not None else clock.sleep_until
        step_at, is_idle, wake_time = owner.step_at, owner.is_idle, self.wake_time
        limit = self.max_steps_at_same_time
        steps = at_same_time = 0
        try:
            first = owner.start()
            if first is not None:
                sleep_until(first if until is None else min(first, until))
            while True:
                if self._stopping:
                    return RunResult(steps, "stopped")
                now = clock_now()
                following = step_at(now)
                steps += 1
                if steps == 1:
                    self.first_step.set()
                if following is None and until_idle and is_idle():
                    return RunResult(steps, "idle")
                if until is not None and now >= until:
                    return RunResult(steps, "until")
                if max_steps is not None and steps >= max_steps:
                    return RunResult(steps, "max steps")
                if following is not None and following <= now:
                    at_same_time += 1
                    if at_same_time >= limit:
                        raise InconsistentSchedule(f"no progress at {now}: {at_same_time} steps in a row left "
                                                   f"work due at their own time (next due {following})")
                else:
                    at_same_time = 0
                wake = wake_time(now, following)
                if wake is None:
                    if is_idle():
                        return RunResult(steps, "idle")
                    raise InconsistentSchedule(f"nothing is planned after {now}, yet work is left that no "
                                               "step will ever do")
                if until is not None and wake > until:
                    wake = until
                sleep_until(wake)
                if self._stopping:
                    return RunResult(steps, "stopped")
        except KeyboardInterrupt:
            if not stop_on_interrupt:
                raise
            return RunResult(steps, "interrupt")
        finally:
            self.first_step.set()
