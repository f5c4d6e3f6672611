"""A live migration between simulated hosts, timed by the pre-copy model the driver is given (the planner's,
so a dry run moves VMs as the plan expects): the model's passes are spent on the driver's clock, one
progress sample per pass over memory, and the report carries what the model measured."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from drivers.base import (
    MigrationCost,
    MigrationModel,
    MigrationProgress,
    MigrationReport,
    OnTimeout,
    ProgressCallback,
    VMSpec,
)
from drivers.clock import Clock
from drivers.errors import MigrationFailed

from .config import MIB, SimulatedDriverConfig


@dataclass(frozen=True)
class Figures:
    """What a migration that ran measured."""

    total_seconds: float
    downtime_ms: float
    iterations: int
    bytes_transferred: int
    samples: tuple[MigrationProgress, ...]
    disk_bytes: int = 0


@dataclass(frozen=True)
class SimulatedMigration:
    """One migration being tried: what every report and error of it names."""

    vm: str
    source: str
    destination: str
    memory_total: int   # bytes

    def report(self, outcome: str, figures: Figures | None = None, error: str = "") -> MigrationReport:
        # (the model's outcome is one of the report's: completed, forced or aborted)
        report = MigrationReport(
            vm=self.vm, source=self.source, destination=self.destination, success=not error, total_seconds=0.0,
            downtime_ms=0.0, iterations=0, bytes_transferred=0, memory_total=self.memory_total,
            outcome=outcome, error=error,  # type: ignore[arg-type]
        )
        if figures is None:
            return report
        return replace(report, total_seconds=figures.total_seconds, downtime_ms=figures.downtime_ms,
                       iterations=figures.iterations, bytes_transferred=figures.bytes_transferred,
                       samples=figures.samples, disk_bytes=figures.disk_bytes)

    def failed(self, message: str, outcome: str = "failed", figures: Figures | None = None) -> MigrationFailed:
        return MigrationFailed(f"migrate {self.vm} {self.source} -> {self.destination}: {message}",
                               self.report(outcome, figures, error=message))


def migration_cost(model: MigrationModel, spec: VMSpec, config: SimulatedDriverConfig, bandwidth_mib_s: float | None,
                   max_downtime_ms: float, timeout_s: float, on_timeout: OnTimeout,
                   disk_mib: float = 0.0) -> MigrationCost:
    """The model's passes for `spec`'s guest, after `disk_mib` of its disk (a block migration), at the
    configured link's bandwidth, or at `bandwidth_mib_s` when that limit is lower (as libvirt's
    VIR_MIGRATE_PARAM_BANDWIDTH: a ceiling, never a faster link)."""
    link = config.migration_bandwidth_mib_s
    return model(
        spec.memory_mib,
        link if bandwidth_mib_s is None else min(bandwidth_mib_s, link),
        spec.dirty_rate_mib_s,
        max_downtime_ms,
        working_set_mib=spec.working_set_mib,
        timeout_s=timeout_s,
        on_timeout=on_timeout,
        overhead_s=config.migration_overhead.total_seconds(),
        dirty_factor=config.dirty_factor,
        switchover_ms=config.migration_switchover_ms,
        downtime_schedule=config.downtime_schedule,
        disk_mib=disk_mib,
    )


def run_passes(cost: MigrationCost, spec: VMSpec, config: SimulatedDriverConfig, max_downtime_ms: float,
               clock: Clock, spend: Callable[[float], float], sleep_until: Callable[[datetime], None],
               progress: ProgressCallback | None, disk_mib: float = 0.0) -> Figures:
    """Spend the migration's time on the clock (its fixed cost, the disk's copy, then each pass, then whatever
    the model adds up to beyond them), a progress sample after the disk and after each pass."""
    memory_total = spec.memory_mib * MIB
    start = clock.now()
    spend(config.migration_overhead.total_seconds())
    samples: list[MigrationProgress] = []
    sent = 0.0
    dirty_bytes_s = spec.dirty_rate_mib_s * config.dirty_factor * MIB
    disk_bytes = round(disk_mib * MIB)
    if cost.disk_seconds > 0:
        spend(cost.disk_seconds)
        samples.append(MigrationProgress(
            elapsed_seconds=(clock.now() - start).total_seconds(), memory_total=memory_total, memory_processed=0,
            memory_remaining=memory_total, dirty_rate_bytes_s=dirty_bytes_s, iteration=0,
            max_downtime_ms=max_downtime_ms, disk_processed=disk_bytes))
        if progress is not None:
            progress(samples[-1])
    for index, (seconds, mib) in enumerate((r.seconds, r.mib) for r in cost.rounds):
        spend(seconds)
        sent += mib
        is_last = index + 1 == len(cost.rounds)
        left = (0.0 if cost.outcome != "aborted" else cost.remaining_mib) if is_last else cost.rounds[index + 1].mib
        sample = MigrationProgress(
            elapsed_seconds=(clock.now() - start).total_seconds(),
            memory_total=memory_total,
            memory_processed=round(sent * MIB),
            memory_remaining=round(left * MIB),
            dirty_rate_bytes_s=dirty_bytes_s,
            iteration=index + 1,
            max_downtime_ms=max_downtime_ms,
            disk_processed=disk_bytes,
        )
        samples.append(sample)
        if progress is not None:
            progress(sample)
    sleep_until(start + timedelta(seconds=cost.total_seconds))
    return Figures(total_seconds=cost.total_seconds, downtime_ms=cost.downtime_ms, iterations=cost.passes,
                   bytes_transferred=round(cost.transferred_mib * MIB), samples=tuple(samples), disk_bytes=disk_bytes)
