"""The calibrated model parameters kept in the store, applied over the configured ones.

`leasewise calibrate` fits (orchestrator.analysis.calibration) and stores the result here, in the store's
meta table under `CALIBRATION_KEY`:
`{"migration": {"bandwidth_mib_s", "overhead_s", "switchover_ms", "dirty_factor", ..., "hosts", "at", "samples"},
"suspend": {"suspend_rate_mib_s", "suspend_overhead_s", "resume_rate_mib_s", "resume_overhead_s", ...}}`;
the cluster rebuilds its scheduler with `apply_calibration` so every plan uses the measured values.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from orchestrator.model.errors import LeasewiseError
from orchestrator.planning.learning import LIVE_MIGRATE, RESUME, SUSPEND
from orchestrator.state.learned import forget

if TYPE_CHECKING:  # pragma: no cover
    from orchestrator.config import SchedulingConfig
    from orchestrator.state.store import Store

#: the store meta key holding every calibration result
CALIBRATION_KEY = "calibration"
#: its sections
MIGRATION_SECTION = "migration"
SUSPEND_SECTION = "suspend"


class CalibrationError(LeasewiseError):
    """The measurements cannot determine the parameters (too few, or inconsistent with the model), or a
    stored result is unusable."""


def load_calibration(store: "Store") -> dict[str, Any]:
    """Everything stored under `CALIBRATION_KEY` ({} when nothing was calibrated)."""
    value = store.get_meta(CALIBRATION_KEY)
    return dict(value) if isinstance(value, Mapping) else {}


def store_calibration(store: "Store", section: str, record: Mapping[str, Any]) -> dict[str, Any]:
    """Replace one section (`migration` or `suspend`) of the stored calibration, keeping the other, in one
    transaction; returns the whole stored value. What the daemon learned of the operations the section
    measured is forgotten: a deliberate campaign takes precedence, and learning goes on from its values."""
    if section not in (MIGRATION_SECTION, SUSPEND_SECTION):
        raise ValueError(f"unknown calibration section {section!r}")
    with store.transaction():
        value = load_calibration(store)
        value[section] = dict(record)
        store.set_meta(CALIBRATION_KEY, value)
        forget(store, (LIVE_MIGRATE,) if section == MIGRATION_SECTION else (SUSPEND, RESUME))
    return value


def _stored_number(stored: Mapping[str, Any], section: str, key: str, *, positive: bool,
                   optional: bool = False) -> float | None:
    value = stored.get(key)
    if value is None and optional:
        return None
    where = f"{CALIBRATION_KEY}.{section}.{key}"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise CalibrationError(f"stored {where}: must be a number (got {value!r}); run `leasewise calibrate` again")
    if (positive and value <= 0) or value < 0:
        bound = "greater than 0" if positive else "not negative"
        raise CalibrationError(f"stored {where}: must be {bound} (got {value!r}); run `leasewise calibrate` again")
    return float(value)


def apply_calibration(config: "SchedulingConfig", stored: Mapping[str, Any] | None) -> "SchedulingConfig":
    """`config` with the calibrated values in place of the configured ones.

    `stored` is the value under `CALIBRATION_KEY` (None or {}: nothing changes). From `migration`:
    live_migration_bandwidth, live_migration_overhead, live_migration_switchover_ms and (when it was fitted)
    live_migration_dirty_factor;
    from `suspend`: suspend_rate and resume_rate. The fitted suspend/resume overheads are reported and
    stored but not applied: the scheduler's only fixed cost is `enactment_overhead`, which also applies to
    starts and migrations. Raises `CalibrationError` naming a stored value that is not usable.
    """
    if not stored:
        return config
    if not isinstance(stored, Mapping):
        raise CalibrationError(f"stored {CALIBRATION_KEY}: must be a table (got {type(stored).__name__})")
    changes: dict[str, Any] = {}
    migration = stored.get(MIGRATION_SECTION)
    if migration:
        if not isinstance(migration, Mapping):
            raise CalibrationError(f"stored {CALIBRATION_KEY}.{MIGRATION_SECTION}: must be a table")
        changes["live_migration_bandwidth"] = _stored_number(migration, MIGRATION_SECTION, "bandwidth_mib_s",
                                                             positive=True)
        overhead = _stored_number(migration, MIGRATION_SECTION, "overhead_s", positive=False)
        changes["live_migration_overhead"] = timedelta(seconds=overhead or 0.0)
        factor = _stored_number(migration, MIGRATION_SECTION, "dirty_factor", positive=False, optional=True)
        if factor is not None:
            changes["live_migration_dirty_factor"] = factor
        switchover = _stored_number(migration, MIGRATION_SECTION, "switchover_ms", positive=False, optional=True)
        if switchover is not None:   # calibrations made before the downtime model have none
            changes["live_migration_switchover_ms"] = switchover
    suspend = stored.get(SUSPEND_SECTION)
    if suspend:
        if not isinstance(suspend, Mapping):
            raise CalibrationError(f"stored {CALIBRATION_KEY}.{SUSPEND_SECTION}: must be a table")
        changes["suspend_rate"] = _stored_number(suspend, SUSPEND_SECTION, "suspend_rate_mib_s", positive=True)
        changes["resume_rate"] = _stored_number(suspend, SUSPEND_SECTION, "resume_rate_mib_s", positive=True)
    return dataclasses.replace(config, **changes) if changes else config
