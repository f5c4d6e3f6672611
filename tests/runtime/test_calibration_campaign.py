"""The calibration campaign on the simulated driver: it stops between two runs once its caller's stop event
is set, and whatever ends it, no guest and no save image is left on the hosts."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from drivers.base import MigrationReport
from drivers.errors import MigrationFailed, OperationFailed
from orchestrator.config import Config
from orchestrator.runtime.calibration.campaign import (
    CalibrationStopped,
    MigrationPlan,
    MigrationRun,
    SuspendPlan,
    SuspendPoint,
    measure_migrations,
    measure_suspensions,
    migration_grid,
    suspend_points,
)
from orchestrator.runtime.calibration.guests import VM_PREFIX, guest_prefix
from orchestrator.runtime.calibration.testbed import Setup, open_setup
from tests.support.times import T0


class Recorder:
    """A campaign's Progress that keeps what it is told, and sets `stop` after `stop_after` runs."""

    def __init__(self, stop: threading.Event, stop_after: int):
        self.stop, self.stop_after = stop, stop_after
        self.runs: list[str] = []
        self.warnings: list[str] = []

    def _ended(self, what: str) -> None:
        self.runs.append(what)
        if len(self.runs) >= self.stop_after:
            self.stop.set()

    def migrated(self, run: MigrationRun, report: MigrationReport, survived: bool | None) -> None:
        self._ended(f"{run.point.memory_mib}/{run.point.pages_per_second} {run.source}->{run.destination}")

    def migration_failed(self, run: MigrationRun, outcome: str, error: MigrationFailed) -> None:
        self._ended(f"failed {outcome}")

    def cycled(self, point: SuspendPoint, run: int, repeat: int, suspend_s: float, resume_s: float) -> None:
        self._ended(f"{point.host}/{point.memory_mib} cycle {run}")

    def warning(self, message: str) -> None:
        self.warnings.append(message)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    testbed = open_setup(["a", "b"], [128, 256], True, None, tmp_path / "none.sqlite", Config(), T0)
    yield testbed
    testbed.driver.close()


def _guests_left(setup: Setup) -> list[str]:
    return [vm for host in setup.driver.hosts() for vm in setup.driver.list_vms(host)]


def test_a_whole_migration_grid_is_measured_and_its_guests_removed(setup):
    stop = threading.Event()
    progress = Recorder(stop, stop_after=1000)
    points = migration_grid([128, 256], [0, 1000])
    measure_migrations(setup, MigrationPlan("a", "b", 2, 300.0, 120.0, 0.0, "/guest"), points, guest_prefix(),
                       progress, stop)
    assert [len(p.samples) for p in points] == [2, 2, 2, 2]
    assert progress.runs[:2] == ["128/0 a->b", "128/0 b->a"]
    assert _guests_left(setup) == [] and progress.warnings == []


def test_a_set_stop_event_ends_the_migrations_at_the_next_run_and_removes_the_guest(setup):
    stop = threading.Event()
    progress = Recorder(stop, stop_after=1)
    points = migration_grid([128, 256], [0])
    with pytest.raises(CalibrationStopped):
        measure_migrations(setup, MigrationPlan("a", "b", 3, 300.0, 120.0, 0.0, "/guest"), points, guest_prefix(),
                           progress, stop)
    assert progress.runs == ["128/0 a->b"]                    # the second run never started
    assert [len(p.samples) for p in points] == [1, 0]
    assert _guests_left(setup) == []                           # the guest booted for the first point is gone


def test_a_set_stop_event_ends_the_suspensions_and_leaves_no_guest_or_image(setup):
    stop = threading.Event()
    progress = Recorder(stop, stop_after=2)
    points = suspend_points(["a", "b"], [128, 256])
    plan = SuspendPlan(repeat=2, settle_s=0.0, guest_dir="/guest", state_dir="/var/lib/lw-cal",
                       default_state_dir="/var/lib/lw")
    with pytest.raises(CalibrationStopped):
        measure_suspensions(setup, plan, points, f"{VM_PREFIX}test-", progress, stop)
    assert progress.runs == ["a/128 cycle 1", "a/128 cycle 2"]
    assert [len(p.suspend) for p in points] == [2, 0, 0, 0]
    assert _guests_left(setup) == []
    with pytest.raises(OperationFailed, match="no save image"):   # the one save image made was removed
        setup.driver.move_state(f"/var/lib/lw-cal/{VM_PREFIX}test-128m.state", "a", "b")
