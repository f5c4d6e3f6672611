"""The fixed instants tests plan from, so that expected times can be written as plain numbers."""

from __future__ import annotations

from datetime import datetime, timedelta

from drivers.clock import RealClock
from orchestrator.model.timeutil import UTC

#: where unit tests of the planning core start their plans: T(0)
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
#: where scenario, daemon and report tests start: an afternoon, so plans never cross midnight
T0 = datetime(2026, 1, 1, 13, 0, tzinfo=UTC)
#: the driver tests' clock: a Monday morning
DRIVER_T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
#: the CLI tests' "now" (a date after every example in the README)
CLI_NOW = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)


def T(minutes: float) -> datetime:
    """`minutes` after EPOCH."""
    return EPOCH + timedelta(minutes=minutes)


class MovableClock(RealClock):
    """The wall clock, which a test moves on at once (`advance`): what a server does once some time has
    passed (a token expired) is tried without the test waiting for that time."""

    def __init__(self) -> None:
        super().__init__()
        self._ahead = timedelta(0)

    def now(self) -> datetime:
        return super().now() + self._ahead

    def advance(self, by: timedelta) -> None:
        self._ahead += by
