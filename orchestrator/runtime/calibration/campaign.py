"""The measurement plan and the measuring: a grid of guests migrated between two hosts, or suspended and
resumed on each host, every run recorded as a sample.

A campaign reports each run to its caller's `Progress` as it ends, and stops between two steps once the
caller's `stop` event is set (`CalibrationStopped`); a step under way (a migration, a wait on a guest's
console) runs to its end, so a caller that must cut one short interrupts its thread instead (the CLI's
SIGTERM handler raises KeyboardInterrupt, as Ctrl-C does). Whatever ends it, no guest is left behind.
"""

from __future__ import annotations

import posixpath
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from drivers.base import MigrationReport
from drivers.errors import MigrationFailed
from orchestrator.runtime.calibration.guests import guest_spec, guests, remove_image, still_alive, wait_ready
from orchestrator.runtime.calibration.disks import ProbeDisks, probe_disks
from orchestrator.runtime.calibration.samples import MIB, MigrationSample
from orchestrator.runtime.calibration.testbed import Setup
from orchestrator.state.calibrated import store_calibration
from orchestrator.state.store import Store


class CalibrationStopped(Exception):
    """The caller's stop event was set: the campaign ended between two steps, its guests removed."""


# -- the plan ----------------------------------------------------------------------------------------------
@dataclass
class GridPoint:
    """One guest of the migration grid (memory size x dirty rate x disk), and what its runs measured."""

    memory_mib: int
    pages_per_second: int
    disk_mib: int = 0                # MiB written to its disk, copied with it (a block migration); 0: no disk
    samples: list[MigrationSample] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)    # the outcome of each run that did not complete


@dataclass(frozen=True)
class MigrationPlan:
    """How every grid point is measured: booted on `source`, migrated `repeat` times (alternating)."""

    source: str
    destination: str
    repeat: int
    max_downtime_ms: float           # the limit each migration job is given
    timeout_s: float                 # each migration's completion timeout (then aborted)
    settle_s: float                  # seconds between a guest's ready line and its first run
    guest_dir: str


@dataclass
class SuspendPoint:
    """One guest size on one host, and the suspend and resume times its cycles measured."""

    host: str
    memory_mib: int
    suspend: list[float] = field(default_factory=list)
    resume: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class SuspendPlan:
    """How every host and size is measured: `repeat` suspend/resume cycles of one guest."""

    repeat: int
    settle_s: float
    guest_dir: str
    state_dir: str | None            # where the save images go on the hosts; None: each host's own
    default_state_dir: str           # a host's own when the inventory names none ([daemon] state_dir)


def migration_grid(sizes: list[int], dirty: list[int], disks: list[int] | None = None) -> list[GridPoint]:
    """Every memory size (MiB) with every dirty rate (pages/s) and every disk (MiB written; none: no disk),
    sizes first."""
    return [GridPoint(m, p, d) for m in sizes for p in dirty for d in (disks or [0])]


def suspend_points(hosts: list[str], sizes: list[int]) -> list[SuspendPoint]:
    """Every size (MiB) on every host, hosts first."""
    return [SuspendPoint(h, m) for h in hosts for m in sizes]


# -- what the caller is told -------------------------------------------------------------------------------
@dataclass(frozen=True)
class MigrationRun:
    """Which migration of a grid point just ended: run `run` of `repeat`, `source` -> `destination`."""

    point: GridPoint
    run: int
    repeat: int
    source: str
    destination: str


class Progress(Protocol):
    """Told of every run as it ends, and of a guest or save image that could not be removed."""

    def migrated(self, run: MigrationRun, report: MigrationReport, survived: bool | None) -> None: ...

    def migration_failed(self, run: MigrationRun, outcome: str, error: MigrationFailed) -> None: ...

    def cycled(self, point: SuspendPoint, run: int, repeat: int, suspend_s: float, resume_s: float) -> None: ...

    def warning(self, message: str) -> None: ...


def _check(stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise CalibrationStopped("stopped")


# -- migrations --------------------------------------------------------------------------------------------
def measure_migrations(setup: Setup, plan: MigrationPlan, points: list[GridPoint], name_prefix: str,
                       progress: Progress, stop: threading.Event | None = None) -> None:
    """Every point's migrations, recorded in the points; the guests (and their disks, on both hosts) are
    removed whatever happens."""
    with probe_disks(setup, (plan.source, plan.destination), name_prefix, progress.warning) as disks, \
            guests(setup, progress.warning) as started:
        for point in points:
            _check(stop)
            name = f"{name_prefix}{point.memory_mib}m-{point.pages_per_second}p"
            if point.disk_mib:
                name += f"-{point.disk_mib}d"
            _migrate_point(setup, plan, point, name, disks, started, progress, stop)


def _migrate_point(setup: Setup, plan: MigrationPlan, point: GridPoint, name: str, disks: ProbeDisks,
                   started: list[str], progress: Progress, stop: threading.Event | None) -> None:
    """Boot one guest on the source, migrate it `repeat` times (alternating), record each run, stop it."""
    spec = guest_spec(name, point.memory_mib, point.pages_per_second, plan.guest_dir)
    spec = disks.attach(spec, point.disk_mib, plan.source)
    setup.driver.start(spec, plan.source)
    started.append(name)
    wait_ready(setup, name, plan.settle_s)
    here, there = plan.source, plan.destination
    for run in range(1, plan.repeat + 1):
        _check(stop)
        which = MigrationRun(point, run, plan.repeat, here, there)
        # what a block migration will copy, as the planner reads it (the overlay's allocation)
        disk_bytes = setup.driver.disk_allocation(name) if point.disk_mib else None
        try:
            report = setup.driver.migrate(name, there, max_downtime_ms=plan.max_downtime_ms,
                                          timeout_s=plan.timeout_s, on_timeout="abort")
            survived = still_alive(setup, name)
        except MigrationFailed as exc:
            outcome = exc.report.outcome if isinstance(exc.report, MigrationReport) else "failed"
            point.failures.append(outcome)
            progress.migration_failed(which, outcome, exc)
            if setup.driver.locate(name) is None:
                break  # the guest is gone: nothing more to measure at this point
            continue
        point.samples.append(MigrationSample(
            memory_mib=float(point.memory_mib),
            dirty_rate_mib_s=spec.dirty_rate_mib_s,
            max_downtime_ms=plan.max_downtime_ms,
            total_s=report.total_seconds,
            downtime_ms=report.downtime_ms,
            iterations=report.iterations,
            working_set_mib=spec.working_set_mib,
            timeout_s=plan.timeout_s,
            guest_survived=survived,
            disk_mib=disk_bytes / MIB if disk_bytes else float(point.disk_mib),
            disk_copied_mib=report.disk_bytes / MIB if point.disk_mib else None,
        ))
        progress.migrated(which, report, survived)
        if survived is False:
            break   # a dead guest dirties nothing: later runs would not measure this grid point
        here, there = there, here
    setup.driver.stop(name, graceful_timeout=0)
    started.remove(name)


# -- suspend and resume ------------------------------------------------------------------------------------
def measure_suspensions(setup: Setup, plan: SuspendPlan, points: list[SuspendPoint], name_prefix: str,
                        progress: Progress, stop: threading.Event | None = None) -> None:
    """Every point's suspend/resume cycles, recorded in the points; the guests and their save images are
    removed whatever happens."""
    with guests(setup, progress.warning) as started:
        for point in points:
            _check(stop)
            name = f"{name_prefix}{point.memory_mib}m"
            path = posixpath.join(_state_dir(setup, point.host, plan), f"{name}.state")
            try:
                _cycle_point(setup, plan, point, name, path, started, progress, stop)
            finally:
                remove_image(setup, point.host, path, progress.warning)


def _state_dir(setup: Setup, host: str, plan: SuspendPlan) -> str:
    if plan.state_dir is not None:
        return plan.state_dir
    host_cfg = setup.host_configs.get(host)
    return host_cfg.state_dir if host_cfg is not None else plan.default_state_dir


def _cycle_point(setup: Setup, plan: SuspendPlan, point: SuspendPoint, name: str, path: str, started: list[str],
                 progress: Progress, stop: threading.Event | None) -> None:
    spec = guest_spec(name, point.memory_mib, 0, plan.guest_dir)
    setup.driver.start(spec, point.host)
    started.append(name)
    wait_ready(setup, name, plan.settle_s)
    for run in range(1, plan.repeat + 1):
        _check(stop)
        saved = setup.driver.suspend(name, path)
        point.suspend.append(saved.wall_seconds)
        restored = setup.driver.resume(name, path, point.host)
        point.resume.append(restored.wall_seconds)
        progress.cycled(point, run, plan.repeat, saved.wall_seconds, restored.wall_seconds)
    setup.driver.stop(name, graceful_timeout=0)
    started.remove(name)


# -- the result --------------------------------------------------------------------------------------------
def store_fit(store_path: Path, section: str, record: dict) -> None:
    """Keep a fit in the store (`orchestrator.state.calibrated`), where the scheduler picks it up. One
    write, which the caller may try again while the store is busy."""
    with Store.open(store_path) as store:
        store_calibration(store, section, record)
