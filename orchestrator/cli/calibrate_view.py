"""What `leasewise calibrate` prints: the tables of predicted vs measured (live migration: one row per grid
point, the disk's column only when a guest had a disk), the fitted parameters next to the configured ones,
and the same as JSON (`--json`)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from orchestrator.analysis.calibration import MAX_DIRTY_FACTOR, MigrationFit, pages_to_mib_s
from orchestrator.analysis.fidelity import Comparison, Fidelity, fidelity
from orchestrator.cli.tables import Column, print_table
from orchestrator.config import Config
from orchestrator.runtime.calibration.campaign import GridPoint


def error_pct(predicted: float, measured: float) -> float | None:
    """How far the prediction is off, in percent of the measurement (None: nothing measured to compare)."""
    return None if measured <= 0 else 100.0 * (predicted - measured) / measured


def pct(predicted: float, measured: float) -> str:
    error = error_pct(predicted, measured)
    if error is None:
        return "-"
    return "0.0%" if abs(error) < 0.05 else f"{error:+.1f}%"


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


MIGRATION_COLUMNS = (
    Column("size MiB", "right"), Column("disk MiB", "right"), Column("dirty pages/s", "right"),
    Column("dirty MiB/s", "right", drop=1),
    Column("runs", "right", drop=3), Column("predicted s", "right"), Column("measured s", "right"),
    Column("error", "right"), Column("predicted downtime ms", "right"), Column("measured ms", "right"),
    Column("error ms", "right", drop=2), Column("passes pred/meas", "right", wraps=True, drop=4),   # or why not measured
)


def migration_table(console: Console, points: list[GridPoint], fit: MigrationFit | None, title: str) -> None:
    """The predicted vs measured table, its disk column only when a guest had a disk."""
    rows = migration_rows(points, fit)
    columns = list(MIGRATION_COLUMNS)
    if not any(p.disk_mib for p in points):
        del columns[1]
        rows = [row[:1] + row[2:] for row in rows]
    print_table(console, columns, rows, title=title)


def migration_rows(points: list[GridPoint], fit: MigrationFit | None) -> list[list[str]]:
    """The predicted vs measured table: one row per grid point, MIGRATION_COLUMNS."""
    rows = []
    for p in points:
        runs = f"{len(p.samples)}/{len(p.samples) + len(p.failures)}"
        row = [str(p.memory_mib), str(p.disk_mib), str(p.pages_per_second), f"{pages_to_mib_s(p.pages_per_second):.2f}",
               runs]
        if not p.samples:
            why = p.failures[-1] if p.failures else "no measurement"
            rows.append([*row, "-", "-", "-", "-", "-", "-", escape(why[:60])])
            continue
        measured_s = mean([s.total_s for s in p.samples])
        measured_ms = mean([s.downtime_ms for s in p.samples])
        passes = mean([float(s.iterations) for s in p.samples])
        if any(s.guest_survived is False for s in p.samples):
            row[4] += " died"
        if fit is None:
            rows.append([*row, "-", f"{measured_s:.2f}", "-", "-", f"{measured_ms:.1f}", "-", f"-/{passes:g}"])
            continue
        predicted = fit.predict(p.samples[0])
        if predicted.outcome == "aborted":
            rows.append([*row, "aborts", f"{measured_s:.2f}", "-", "-", f"{measured_ms:.1f}", "-", f"-/{passes:g}"])
            continue
        rows.append([*row, f"{predicted.total_seconds:.2f}", f"{measured_s:.2f}",
                     pct(predicted.total_seconds, measured_s), f"{predicted.downtime_ms:.1f}",
                     f"{measured_ms:.1f}", f"{predicted.downtime_ms - measured_ms:+.1f}",
                     f"{predicted.passes}/{passes:g}"])
    return rows


def migration_json(points: list[GridPoint], fit: MigrationFit | None, cfg: Config, hosts: list[str], driver: str,
                    max_downtime: float) -> dict:
    """What `--json` prints: every grid point measured and predicted, the fit and the configured values."""
    s = cfg.scheduling
    return {"hosts": hosts, "driver": driver, "max_downtime_ms": max_downtime, "points": points_json(points, fit),
            "fit": None if fit is None else fit.as_dict(),
            "in_sample": None if fit is None else json_or_none(fit_fidelity(points, fit, max_downtime)),
            "validation": None,
            "configured": {"live_migration_bandwidth": s.live_bandwidth,
                           "live_migration_overhead": s.live_migration_overhead.total_seconds(),
                           "live_migration_switchover_ms": s.live_migration_switchover_ms,
                           "live_migration_dirty_factor": s.live_migration_dirty_factor},
            "stored": None}


def points_json(points: list[GridPoint], fit: MigrationFit | None) -> list[dict]:
    """Every grid point measured, and predicted when there is a fit."""
    out = []
    for p in points:
        point: dict = {"memory_mib": p.memory_mib, "disk_mib": p.disk_mib, "dirty_pages_s": p.pages_per_second,
                       "dirty_mib_s": pages_to_mib_s(p.pages_per_second), "runs": len(p.samples) + len(p.failures),
                       "failures": list(p.failures), "measured": None, "predicted": None}
        if p.samples:
            measured_s = mean([s.total_s for s in p.samples])
            point["measured"] = {"total_s": measured_s, "downtime_ms": mean([s.downtime_ms for s in p.samples]),
                                 "passes": mean([float(s.iterations) for s in p.samples]),
                                 "guest_died": any(s.guest_survived is False for s in p.samples),
                                 "disk_copied_mib": mean_or_none([s.disk_copied_mib for s in p.samples])}
            if fit is not None:
                predicted = fit.predict(p.samples[0])
                aborts = predicted.outcome == "aborted"
                point["predicted"] = {"outcome": predicted.outcome, "total_s": predicted.total_seconds,
                                      "disk_mib": p.samples[0].disk_mib, "disk_s": predicted.disk_seconds,
                                      "downtime_ms": predicted.downtime_ms, "passes": predicted.passes,
                                      "error_pct": None if aborts else error_pct(predicted.total_seconds, measured_s)}
        out.append(point)
    return out


def mean_or_none(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return mean(known) if known else None


def fit_fidelity(points: list[GridPoint], fit: MigrationFit, max_downtime: float) -> Fidelity | None:
    """How the fit predicts every measured run of `points` (runs the model says would abort are left out:
    there is no predicted time to compare)."""
    comparisons = []
    for s in (s for p in points for s in p.samples):
        predicted = fit.predict(s)
        if predicted.outcome != "aborted":
            comparisons.append(Comparison(predicted.total_seconds, s.total_s, predicted.downtime_ms, s.downtime_ms,
                                          max_downtime))
    return fidelity(comparisons)


def json_or_none(summary: Fidelity | None) -> dict | None:
    return None if summary is None else summary.to_json()


def died_note(points: list[GridPoint]) -> str | None:
    """One line on the guests that died after a migration, or None."""
    died = [(p, s) for p in points for s in p.samples if s.guest_survived is False]
    if not died:
        return None
    runs = ", ".join(f"{p.memory_mib} MiB at {p.pages_per_second} pages/s ({s.iterations} passes)" for p, s in died)
    return (f"guest died after migrating: {runs}. QEMU 7.2 under TCG loses pages dirtied from the fourth pre-copy "
            "pass on; these runs are kept (the migration itself was measured) but no later run of that guest is")


#: fitted values next to the configured ones, with the key each replaces
FIT_COLUMNS = (Column("parameter", wraps=True, style="bold"), Column("fitted", "right", wraps=True),
               Column("configured", "right"), Column("\\[scheduling] key", drop=1))


def migration_fit_rows(fit: MigrationFit, cfg: Config) -> list[list[str]]:
    s = cfg.scheduling
    rows = [["bandwidth MiB/s", f"{fit.bandwidth_mib_s:.3f}", f"{s.live_bandwidth:g}", "live_migration_bandwidth"],
            ["overhead s", f"{fit.overhead_s:.3f}", f"{s.live_migration_overhead.total_seconds():g}",
             "live_migration_overhead"],
            ["switch-over ms", f"{fit.switchover_ms:.1f}", f"{s.live_migration_switchover_ms:g}",
             "live_migration_switchover_ms"]]
    if fit.dirty_factor is None:
        factor = "not fitted (no dirtying guest)"
    elif fit.dirty_factor_determined:
        factor = f"{fit.dirty_factor:.3f}"
        if fit.dirty_factor_interval is not None:
            lo, hi = fit.dirty_factor_interval
            factor += f" ({lo:.3g}-{hi:.3g})"
    else:
        lo, hi = fit.dirty_factor_interval or (0.0, MAX_DIRTY_FACTOR)
        factor = (f"not determined: {lo:.3g}-{hi:.3g} fit as well (best {fit.dirty_factor:.3g}); "
                  "not stored, raise --dirty")
    rows += [["dirty factor", factor, f"{s.live_migration_dirty_factor:g}", "live_migration_dirty_factor"],
             ["rms error, total", f"{fit.rms_total_s:.3f} s", "", ""],
             ["rms error, downtime", f"{fit.rms_downtime_ms:.1f} ms", "", ""],
             ["samples", str(fit.samples), "", ""]]
    return rows
