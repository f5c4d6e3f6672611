"""The rates the planner times its overheads with, and where each comes from (`leasewise calibrate show`).

A rate is configured (`[scheduling]`), replaced by the last calibration campaign that measured it
(`calibrate migration`, `calibrate suspend`), and, for one pair of hosts or one host, by what the daemon
learned from the operations it enacted there (seeded by `host check`'s probe migrations).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.config import Config
from orchestrator.planning.learning import KINDS, LIVE_MIGRATE, MOVE, RESUME, SUSPEND
from orchestrator.service.backend import NoStore
from orchestrator.state.calibrated import MIGRATION_SECTION, SUSPEND_SECTION, load_calibration
from orchestrator.state.learned import load_learned
from orchestrator.state.store import Store

#: kind -> (the section of the calibration that measures it and its key there, the setting, its unit)
_SOURCES: dict[str, tuple[tuple[str, str] | None, str, str]] = {
    LIVE_MIGRATE: ((MIGRATION_SECTION, "bandwidth_mib_s"), "live_migration_bandwidth", "MiB/s"),
    MOVE: (None, "migration_bandwidth", "MB/s"),
    SUSPEND: ((SUSPEND_SECTION, "suspend_rate_mib_s"), "suspend_rate", "MB/s"),
    RESUME: ((SUSPEND_SECTION, "resume_rate_mib_s"), "resume_rate", "MB/s"),
}


def planner_rates(cfg: Config, calibration: dict[str, Any]) -> list[dict[str, Any]]:
    """Each kind's rate for the pairs and hosts with nothing learned: calibrated, else configured."""
    scheduling = cfg.scheduling
    rows = []
    for kind in KINDS:
        measured_by, setting, unit = _SOURCES[kind]
        section = calibration.get(measured_by[0]) if measured_by else None
        if measured_by and isinstance(section, dict):
            value = section.get(measured_by[1])
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                rows.append({"kind": kind, "rate": float(value), "unit": "MiB/s",
                             "source": f"calibrate {measured_by[0]}", "at": section.get("at"),
                             "hosts": list(section.get("hosts") or [])})
                continue
        configured = getattr(scheduling, setting)
        if configured is None:   # (live migrations with no bandwidth of their own: the image moves' one)
            setting, configured = "migration_bandwidth", scheduling.migration_bandwidth
        rows.append({"kind": kind, "rate": float(configured), "unit": unit, "source": f"[scheduling] {setting}",
                     "at": None, "hosts": []})
    return rows


def learned_rows(learned: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every learned rate, by kind then pair or host, as stored."""
    return [{"kind": kind, "key": key, "rate_mib_s": entry.get("rate_mib_s"), "samples": entry.get("samples"),
             "rejected": entry.get("rejected"), "source": entry.get("source"), "at": entry.get("at")}
            for kind in KINDS for key, entry in sorted(learned.get(kind, {}).items()) if isinstance(entry, dict)]


def rates_in_use(path: Path, cfg: Config) -> dict[str, list[dict[str, Any]]]:
    """`planner` (`planner_rates`) and `learned` (`learned_rows`) as the store at `path` has them."""
    if not path.exists():
        raise NoStore(path, "nothing calibrated or learned yet")
    with Store.open(path) as store, store.snapshot():
        calibration, learned = load_calibration(store), load_learned(store)
    return {"planner": planner_rates(cfg, calibration), "learned": learned_rows(learned)}
