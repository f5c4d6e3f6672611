"""[scheduling]: how the scheduler plans, with Haizea's option names in snake_case (`backfilling`,
`suspend_rate`, ...): backfilling depth, suspension, migration and their costs, the policies, and the
pre-copy model's parameters for live migration as a planning move."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from datetime import timedelta

from drivers.downtime import DowntimeSchedule
from orchestrator.config.values import (
    read_choice,
    read_duration,
    read_integer,
    read_name,
    read_number,
    read_optional_duration,
    read_rate,
    set_field,
    value_kind,
)
from orchestrator.model.errors import ConfigError
from orchestrator.model.lease import MAX_DIRTY_RATE_MIB_S
from orchestrator.model.numbers import ascii_whole
from orchestrator.model.timeutil import ZERO

#: the largest factor (scheduling_threshold_factor, live_migration_dirty_factor) that means anything
MAX_FACTOR = 1000.0

BACKFILLING = ("off", "aggressive", "conservative")
SUSPENSION = ("none", "serial", "all")
EXCLUSION = ("local", "global")
MIGRATION = ("no", "yes", "yes-notransfer")
ON_ENACTMENT_ERROR = ("fail-lease", "stop")
PREEMPTION_MODE = ("migrate-first", "suspend-only")


@dataclass(frozen=True)
class SchedulingConfig:
    """How the scheduler plans: backfilling depth, suspension, migration and their costs, policies."""

    backfilling: str | int = "aggressive"
    suspension: str = "all"
    suspend_rate: float = 32.0               # MB/s a memory image is written at
    resume_rate: float = 32.0                # MB/s it is read back at
    suspendresume_exclusion: str = "local"
    migration: str = "yes"
    migration_bandwidth: float = 12.5        # MB/s (100 Mbit/s)
    shutdown_time: timedelta = ZERO
    enactment_overhead: timedelta = ZERO
    scheduling_threshold_factor: float = 1.0
    force_scheduling_threshold: timedelta | None = None
    override_suspend_time: timedelta | None = None
    override_resume_time: timedelta | None = None
    non_schedulable_interval: timedelta = ZERO
    policy_admission: str = "accept-all"
    policy_preemption: str = "ar-preempts-be"
    policy_host_selection: str = "greedy"
    on_enactment_error: str = "fail-lease"
    # live migration as a planning move (preemption by evacuation, drain): the pre-copy model's parameters
    preemption_mode: str = "migrate-first"
    live_migration_bandwidth: float | None = None   # MiB/s effective; None = migration_bandwidth
    live_migration_bandwidth_limit: float | None = None   # MiB/s libvirt may use (VIR_MIGRATE_PARAM_BANDWIDTH)
    live_migration_overhead: timedelta = ZERO       # fixed setup time of one live migration
    live_migration_dirty_factor: float = 1.0        # measured dirtying / declared dirty rate
    max_downtime_ms: float = 300.0                  # the stop-and-copy may pause a guest this long
    live_migration_switchover_ms: float = 0.0       # fixed part of every pause (device state, takeover)
    live_migration_downtime_steps: int = 1          # Nova-style steps up to the downtime limit
    live_migration_downtime_delay: float = 75.0     # seconds per GiB of guest between two steps
    dirty_rate: float = 0.0                         # MiB/s a VM dirties when its lease does not say
    dirty_rate_margin: float = 1.25                 # a measured dirty rate is planned with this factor
    live_migration_margin: timedelta = timedelta(seconds=30)   # evacuations end this long before the AR
    live_migration_disk_mib: float = 1024.0         # a VM's overlay, copied with it between hosts sharing no storage

    def __post_init__(self) -> None:
        p = "scheduling."
        bf: object = self.backfilling   # (as the file gave it: checked here)
        if isinstance(bf, str) and (whole := ascii_whole(bf)) is not None:
            bf = whole
        if isinstance(bf, int) and not isinstance(bf, bool):
            if bf < 0:
                raise ConfigError(p + "backfilling", f'must be "off", "aggressive", "conservative" or an integer >= 0 (got {bf})')
        elif isinstance(bf, str) and bf in BACKFILLING:
            pass
        else:
            shown = repr(bf) if isinstance(bf, str) else value_kind(bf)
            hint = difflib.get_close_matches(bf, BACKFILLING, n=1) if isinstance(bf, str) else []
            extra = f"; did you mean {hint[0]!r}?" if hint else ""
            raise ConfigError(p + "backfilling",
                              f'must be "off", "aggressive", "conservative" or an integer >= 0 (got {shown}{extra})')
        set_field(self, "backfilling", bf)
        set_field(self, "suspension", read_choice(p + "suspension", self.suspension, SUSPENSION))
        set_field(self, "suspend_rate", read_rate(p + "suspend_rate", self.suspend_rate))
        set_field(self, "resume_rate", read_rate(p + "resume_rate", self.resume_rate))
        set_field(self, "suspendresume_exclusion",
                  read_choice(p + "suspendresume_exclusion", self.suspendresume_exclusion, EXCLUSION))
        set_field(self, "migration", read_choice(p + "migration", self.migration, MIGRATION))
        set_field(self, "migration_bandwidth", read_rate(p + "migration_bandwidth", self.migration_bandwidth))
        for name in ("shutdown_time", "enactment_overhead", "non_schedulable_interval"):
            set_field(self, name, read_duration(p + name, getattr(self, name)))
        for name in ("force_scheduling_threshold", "override_suspend_time", "override_resume_time"):
            set_field(self, name, read_optional_duration(p + name, getattr(self, name)))
        set_field(self, "scheduling_threshold_factor",
                  read_number(p + "scheduling_threshold_factor", self.scheduling_threshold_factor, maximum=MAX_FACTOR))
        for name in ("policy_admission", "policy_preemption", "policy_host_selection"):
            set_field(self, name, read_name(p + name, getattr(self, name)))
        set_field(self, "on_enactment_error",
                  read_choice(p + "on_enactment_error", self.on_enactment_error, ON_ENACTMENT_ERROR))
        set_field(self, "preemption_mode", read_choice(p + "preemption_mode", self.preemption_mode, PREEMPTION_MODE))
        if self.live_migration_bandwidth is not None:
            set_field(self, "live_migration_bandwidth",
                      read_rate(p + "live_migration_bandwidth", self.live_migration_bandwidth))
        if self.live_migration_bandwidth_limit is not None:
            set_field(self, "live_migration_bandwidth_limit",
                      read_rate(p + "live_migration_bandwidth_limit", self.live_migration_bandwidth_limit))
        for name in ("live_migration_overhead", "live_migration_margin"):
            set_field(self, name, read_duration(p + name, getattr(self, name)))
        set_field(self, "live_migration_dirty_factor",
                  read_number(p + "live_migration_dirty_factor", self.live_migration_dirty_factor, maximum=MAX_FACTOR))
        set_field(self, "live_migration_disk_mib",
                  read_number(p + "live_migration_disk_mib", self.live_migration_disk_mib, maximum=float(1 << 30)))
        set_field(self, "max_downtime_ms", read_number(p + "max_downtime_ms", self.max_downtime_ms, positive=True))
        set_field(self, "live_migration_switchover_ms",
                  read_number(p + "live_migration_switchover_ms", self.live_migration_switchover_ms,
                              maximum=3_600_000.0))
        set_field(self, "live_migration_downtime_steps",
                  read_integer(p + "live_migration_downtime_steps", self.live_migration_downtime_steps, minimum=1))
        if self.live_migration_downtime_steps > 1000:
            raise ConfigError(p + "live_migration_downtime_steps",
                              f"is too large (got {self.live_migration_downtime_steps}; at most 1000)")
        set_field(self, "live_migration_downtime_delay",
                  read_number(p + "live_migration_downtime_delay", self.live_migration_downtime_delay,
                              maximum=86_400.0))
        set_field(self, "dirty_rate", read_number(p + "dirty_rate", self.dirty_rate, maximum=MAX_DIRTY_RATE_MIB_S))
        set_field(self, "dirty_rate_margin",
                  read_number(p + "dirty_rate_margin", self.dirty_rate_margin, maximum=1000.0))
        if self.dirty_rate_margin < 1:
            raise ConfigError(p + "dirty_rate_margin", f"must be at least 1 (got {self.dirty_rate_margin:g})")

    @property
    def downtime_schedule(self) -> DowntimeSchedule:
        """How the allowed downtime rises during a live migration (the driver's and the model's)."""
        return DowntimeSchedule(self.live_migration_downtime_steps, self.live_migration_downtime_delay)

    @property
    def live_bandwidth(self) -> float:
        """MiB/s a live migration gets: its own setting, else the memory-image migration bandwidth."""
        return self.live_migration_bandwidth if self.live_migration_bandwidth is not None else self.migration_bandwidth

    @property
    def max_in_future(self) -> int:
        """How many future reservations backfilling may make: 0 off, 1 aggressive, -1 unlimited, else N."""
        bf = self.backfilling
        if bf == "off":
            return 0
        if bf == "aggressive":
            return 1
        if bf == "conservative":
            return -1
        return int(bf)
