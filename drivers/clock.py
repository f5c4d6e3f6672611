"""Virtual time and real time behind one interface (as SimPy's Environment / RealtimeEnvironment).

The simulator and the simulated driver run on `SimulatedClock`: waiting is a jump of the clock, never a sleep.
The daemon and the libvirt driver run on `RealClock` (the daemon on a `SimulatedClock` when fast-forwarded).
Code that waits asks the clock, so the one event loop (`orchestrator.runtime.eventloop`) serves both: it
jumps or sleeps by the clock's `sleep_until`, and polls for outside work only on a clock that
`moves_by_itself`. The clocks live with the drivers, the lowest layer, because a driver waits on the same
clock as the loop that calls it.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Protocol

UTC = timezone.utc


def as_utc(value: datetime, field: str = "time") -> datetime:
    """`value` in UTC; a naive datetime is refused rather than guessed at (drivers keep UTC inside, too)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{field}: {value.isoformat()} has no timezone (give e.g. 2026-01-01T14:00:00Z)")
    return value.astimezone(UTC)


class Clock(Protocol):
    #: True for the wall clock, whose time passes while code runs (operations take some of it, and requests
    #: from outside can come at any moment); False for a clock that moves only when waited on.
    moves_by_itself: bool

    def now(self) -> datetime: ...

    def sleep(self, delta: timedelta) -> None: ...

    def sleep_until(self, when: datetime) -> None: ...


class SimulatedClock:
    """A clock that only moves when told to; `sleep` advances it instantly."""

    moves_by_itself = False

    def __init__(self, start: datetime):
        self._now = as_utc(start, "start")

    def now(self) -> datetime:
        return self._now

    def advance_to(self, when: datetime) -> None:
        if when < self._now:
            raise ValueError(f"simulated clock cannot go back from {self._now} to {when}")
        self._now = when

    def sleep(self, delta: timedelta) -> None:
        if delta.total_seconds() > 0:
            self._now = self._now + delta

    def sleep_until(self, when: datetime) -> None:
        if when > self._now:
            self._now = when


class RealClock:
    """Wall-clock time in UTC; `speedup` > 1 runs it faster than the wall (so a test of real-time waiting
    stays short)."""

    moves_by_itself = True

    def __init__(self, speedup: float = 1.0):
        self._speedup = speedup
        self.speedup = speedup
        self._origin_wall = time.monotonic()
        self._origin = datetime.now(UTC)

    def now(self) -> datetime:
        elapsed = (time.monotonic() - self._origin_wall) * self._speedup
        return self._origin + timedelta(seconds=elapsed)

    def sleep(self, delta: timedelta) -> None:
        seconds = delta.total_seconds() / self._speedup
        if seconds > 0:
            time.sleep(seconds)

    def sleep_until(self, when: datetime) -> None:
        self.sleep(when - self.now())
