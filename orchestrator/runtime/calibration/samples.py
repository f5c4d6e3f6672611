"""What the calibration campaign measures: one sample per migration, suspension or resumption, with the
conditions it ran under (the fit in `orchestrator.analysis.calibration` needs both)."""

from __future__ import annotations

from dataclasses import dataclass

#: the lab guest's dirtier counts 4 KiB pages
PAGE_BYTES = 4096
MIB = 1024 * 1024


def pages_to_mib_s(pages_per_second: float) -> float:
    """A dirty rate in 4 KiB pages/s as MiB/s (256 pages/s = 1 MiB/s)."""
    return pages_per_second * PAGE_BYTES / MIB


@dataclass(frozen=True)
class MigrationSample:
    """One measured live migration of a guest with known memory and dirty rate."""

    memory_mib: float
    dirty_rate_mib_s: float
    max_downtime_ms: float               # the limit the migration job was given
    total_s: float                       # measured: start of the job to the guest running on the destination
    downtime_ms: float                   # measured pause of the stop-and-copy, switch-over included
    iterations: int = 0                  # measured passes over memory (libvirt's memory_iteration)
    working_set_mib: float | None = None  # what the guest keeps dirtying (None: the model's 90% of memory)
    timeout_s: float | None = None       # the completion timeout the migration ran with
    guest_survived: bool | None = None   # the guest still ran after it (None: not known, e.g. simulated)
    disk_mib: float = 0.0                # its overlay's allocation, copied before memory (a block migration)
    disk_copied_mib: float | None = None  # measured: disk MiB the migration copied (None: no disk went)


@dataclass(frozen=True)
class RateSample:
    """One measured suspension (or resumption) of a guest of `memory_mib`."""

    memory_mib: float
    seconds: float
