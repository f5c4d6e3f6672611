"""Calibration: fit the scheduler's cost models to measured migrations, suspensions and resumptions.

The calibration campaign (orchestrator/runtime/calibration/, run by `leasewise calibrate migration|suspend`)
measures the samples; this module only fits, builds the records to store, with no I/O.

Live migration follows the pre-copy model (`orchestrator.planning.precopy.predict_precopy`), whose free parameters are
the effective bandwidth (MiB/s), a fixed per-migration overhead (s), the switch-over cost (ms: the part of
every pause that is not the final transfer) and the dirty-rate factor. The fit is least squares over the
measured total times, with the measured downtimes as a secondary term (both as seconds, so a downtime
counts for what it adds to the migration). For any bandwidth, overhead and factor, the switch-over cost is
the median of measured downtime less the model's final transfer (not below 0): a median, since a pass that
TCG lost or a loaded host gives a few downtimes far above the rest.

1. idle guests (dirty rate 0) take `overhead + (disk + memory) / bandwidth + switch-over` in the model (a
   disk copied with the migration goes first, at the same bandwidth; none without one): a linear
   least-squares fit (`numpy.linalg.lstsq`) of those gives bandwidth and overhead plus switch-over
   (>= 0, bandwidth > 0); their downtimes give the switch-over, hence the overhead;
2. with those fixed, the dirty factor minimises the residuals of the dirtying guests: a search over a
   log-spaced grid, then golden-section search around the best grid point (the model is piecewise: the
   number of passes changes with the factor, so a local method alone could stop in the wrong piece);
3. a joint refinement of the three (Nelder-Mead, started from 1-2) over every sample; it only ever
   lowers the sum of squares;
4. how well the measurements pin the factor down: the factors whose sum of squares stays within an
   F-test bound of the minimum (a 95% profile interval, bandwidth and overhead held). When that interval
   reaches 0 or `MAX_DIRTY_FACTOR` the dirtying made no measurable difference (dirty rates too low for
   the bandwidth, or noise): the factor is reported but not stored, so the configured one stays.

Suspend and resume times are `overhead + memory / rate`: linear least squares again (`fit_rates`).

The records built here (`migration_record`, `suspend_record`) are kept in the store by
`orchestrator.state.calibrated`, which also puts them into a `SchedulingConfig` in place of the
configured values.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from orchestrator.model.timeutil import iso
from orchestrator.planning.precopy import PrecopyResult, predict_precopy
# the samples it fits (importable from here too, with the dirty rate's unit)
from orchestrator.runtime.calibration.samples import MigrationSample, RateSample, pages_to_mib_s  # noqa: F401
from orchestrator.state.calibrated import CalibrationError

#: the dirty factor is searched within [0, MAX_DIRTY_FACTOR]
MAX_DIRTY_FACTOR = 20.0
#: weight of a squared downtime residual (in seconds) against a squared total-time residual (in seconds):
#: a secondary term, since real downtimes also hold costs the model does not have (device state)
DOWNTIME_WEIGHT = 0.1
#: F(1, nu) 95% quantiles for nu = 1..30 degrees of freedom (then 3.84), for the factor's interval
_F95 = (161.4, 18.51, 10.13, 7.71, 6.61, 5.99, 5.59, 5.32, 5.12, 4.96, 4.84, 4.75, 4.67, 4.60, 4.54, 4.49,
        4.45, 4.41, 4.38, 4.35, 4.32, 4.30, 4.28, 4.26, 4.24, 4.23, 4.21, 4.20, 4.18, 4.17)


# -- results ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MigrationFit:
    """The pre-copy model's parameters fitted to migrations, and how well they fit.

    `dirty_factor` is the best fit, None when no dirtying guest was measured (nothing to fit it to);
    `dirty_factor_interval` the factors that fit about as well (95%), and `dirty_factor_determined`
    whether the measurements bound it at all (False: the interval reaches 0 or `MAX_DIRTY_FACTOR`).
    """

    bandwidth_mib_s: float
    overhead_s: float
    dirty_factor: float | None
    samples: int
    rms_total_s: float
    rms_downtime_ms: float
    max_rel_total_error: float           # largest |predicted - measured| / measured total time
    dirty_factor_interval: tuple[float, float] | None = None
    dirty_factor_determined: bool = False
    switchover_ms: float = 0.0

    def predict(self, sample: MigrationSample) -> PrecopyResult:
        """The model's prediction for the conditions of `sample` with the fitted parameters."""
        factor = 1.0 if self.dirty_factor is None else self.dirty_factor
        return predict_sample(sample, self.bandwidth_mib_s, self.overhead_s, factor, self.switchover_ms)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class RateFit:
    """`seconds = overhead_s + memory_mib / rate_mib_s`, fitted."""

    rate_mib_s: float
    overhead_s: float
    samples: int
    rms_s: float

    def predict(self, memory_mib: float) -> float:
        return self.overhead_s + memory_mib / self.rate_mib_s

    def __iter__(self):
        """`rate, overhead = fit_rates(samples)`"""
        return iter((self.rate_mib_s, self.overhead_s))


# -- the model for one sample ----------------------------------------------------------------------------
def predict_sample(sample: MigrationSample, bandwidth_mib_s: float, overhead_s: float,
                   dirty_factor: float, switchover_ms: float = 0.0) -> PrecopyResult:
    """predict_precopy under the sample's conditions (memory, dirty rate, working set, the job's downtime
    limit, timeout, and the disk copied first, as the planner counts a block migration)."""
    return predict_precopy(
        sample.memory_mib,
        bandwidth_mib_s,
        sample.dirty_rate_mib_s,
        sample.max_downtime_ms,
        working_set_mib=sample.working_set_mib,
        timeout_s=sample.timeout_s,
        on_timeout="abort",
        overhead_s=overhead_s,
        dirty_factor=dirty_factor,
        switchover_ms=switchover_ms,
        disk_mib=sample.disk_mib,
    )


def _switchover_ms(measured_ms: np.ndarray, transfer_ms: np.ndarray) -> float:
    """The switch-over cost that best explains the downtimes: the median gap, never below 0."""
    if len(measured_ms) == 0:
        return 0.0
    return max(0.0, float(np.median(measured_ms - transfer_ms)))


def _residuals(samples: Sequence[MigrationSample], bandwidth: float, overhead: float,
               factor: float) -> tuple[np.ndarray, np.ndarray, float]:
    """(predicted - measured total s, predicted - measured downtime s) per sample, with the switch-over
    cost that fits these parameters best (which the predictions include)."""
    total = np.empty(len(samples))
    transfer_ms = np.empty(len(samples))
    for i, s in enumerate(samples):
        r = predict_sample(s, bandwidth, overhead, factor)
        total[i] = r.total_seconds - s.total_s
        transfer_ms[i] = r.downtime_ms
    measured_ms = np.array([s.downtime_ms for s in samples], dtype=float)
    switchover = _switchover_ms(measured_ms, transfer_ms)
    return total + switchover / 1000.0, (transfer_ms + switchover - measured_ms) / 1000.0, switchover


def _objective(samples: Sequence[MigrationSample], bandwidth: float, overhead: float, factor: float) -> float:
    total, down, _ = _residuals(samples, bandwidth, overhead, factor)
    return float(np.dot(total, total) + DOWNTIME_WEIGHT * np.dot(down, down))


# -- numerical helpers ------------------------------------------------------------------------------------
def _linear_time_fit(memory: Sequence[float], seconds: Sequence[float], what: str) -> tuple[float, float]:
    """Least squares of `seconds = overhead + memory * k` with overhead >= 0 and k > 0: (1/k, overhead)."""
    m = np.asarray(memory, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if len(set(m.tolist())) < 2:
        raise CalibrationError(f"{what}: need measurements of at least two different memory sizes "
                               f"(got {sorted(set(m.tolist())) or 'none'})")
    if not np.all(np.isfinite(t)) or np.any(t < 0):
        raise CalibrationError(f"{what}: measured times must be finite and not negative")
    design = np.column_stack([np.ones_like(m), m])
    (overhead, k), *_ = np.linalg.lstsq(design, t, rcond=None)
    if overhead < 0:  # the constrained optimum lies on overhead = 0: least squares through the origin
        overhead, k = 0.0, float(np.dot(m, t) / np.dot(m, m))
    if not k > 0 or not math.isfinite(1.0 / k):
        raise CalibrationError(
            f"{what}: the measured times do not grow with memory ({', '.join(f'{a:g} MiB: {b:.3g} s' for a, b in zip(m, t))}); "
            "no rate can be fitted: measure sizes further apart")
    return 1.0 / float(k), float(overhead)


_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


def _golden_section(f: Callable[[float], float], lo: float, hi: float, tol: float = 1e-9,
                    max_iter: int = 200) -> tuple[float, float]:
    """Minimum of `f` on [lo, hi] (unimodal there): (x, f(x))."""
    a, b = lo, hi
    c = b - _GOLDEN * (b - a)
    d = a + _GOLDEN * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(max_iter):
        if abs(b - a) <= tol * max(1.0, abs(a) + abs(b)):
            break
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - _GOLDEN * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + _GOLDEN * (b - a)
            fd = f(d)
    candidates = [(fc, c), (fd, d), (f(lo), lo), (f(hi), hi)]
    best = min(candidates)
    return best[1], best[0]


def _nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, steps: np.ndarray,
                 max_iter: int = 600, ftol: float = 1e-14) -> tuple[np.ndarray, float]:
    """Minimise `f` from `x0` (standard Nelder-Mead; the best vertex never gets worse than f(x0))."""
    n = len(x0)
    simplex = [np.array(x0, dtype=float)]
    for i in range(n):
        x = np.array(x0, dtype=float)
        x[i] += steps[i]
        simplex.append(x)
    values = [f(x) for x in simplex]
    for _ in range(max_iter):
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if abs(values[-1] - values[0]) <= ftol * max(1.0, abs(values[0])):
            break
        centroid = np.mean(simplex[:-1], axis=0)
        worst = simplex[-1]
        xr = centroid + (centroid - worst)
        fr = f(xr)
        if fr < values[0]:
            xe = centroid + 2.0 * (centroid - worst)
            fe = f(xe)
            simplex[-1], values[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = xr, fr
        else:
            if fr < values[-1]:
                xc = centroid + 0.5 * (xr - centroid)
            else:
                xc = centroid + 0.5 * (worst - centroid)
            fc = f(xc)
            if fc < min(fr, values[-1]):
                simplex[-1], values[-1] = xc, fc
            else:  # shrink towards the best vertex
                best = simplex[0]
                simplex = [best] + [best + 0.5 * (x - best) for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    i = int(np.argmin(values))
    return simplex[i], values[i]


def _factor_grid() -> np.ndarray:
    return np.concatenate([[0.0], np.geomspace(1e-3, MAX_DIRTY_FACTOR, 600)])


def _clamp_factor(factor: float) -> float:
    return min(max(factor, 0.0), MAX_DIRTY_FACTOR)


def _fit_dirty_factor(samples: Sequence[MigrationSample], bandwidth: float, overhead: float) -> float:
    """The factor in [0, MAX_DIRTY_FACTOR] minimising the residuals: grid, then golden section."""
    def cost(factor: float) -> float:
        return _objective(samples, bandwidth, overhead, _clamp_factor(factor))

    grid = _factor_grid()
    costs = np.array([cost(x) for x in grid])
    i = int(np.argmin(costs))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    x, fx = _golden_section(cost, float(lo), float(hi))
    return _clamp_factor(x) if fx <= costs[i] else float(grid[i])


def _factor_interval(samples: Sequence[MigrationSample], bandwidth: float, overhead: float, factor: float,
                     parameters: int = 3) -> tuple[float, float] | None:
    """The factors whose sum of squares is within the F-test bound of the best one's (None: too few
    samples to say)."""
    dof = len(samples) - parameters
    if dof < 1:
        return None
    best = _objective(samples, bandwidth, overhead, factor)
    scale = sum(s.total_s ** 2 for s in samples)
    f95 = _F95[dof - 1] if dof <= len(_F95) else 3.84
    threshold = best * (1.0 + f95 / dof) + 1e-12 * scale
    inside = [float(x) for x in _factor_grid() if _objective(samples, bandwidth, overhead, float(x)) <= threshold]
    inside.append(factor)
    return min(inside), max(inside)


# -- the fits --------------------------------------------------------------------------------------------
def fit_migration(samples: Iterable[MigrationSample], max_downtime_ms: float | None = None,
                  *, refine: bool = True) -> MigrationFit:
    """Fit bandwidth, overhead and dirty factor of the pre-copy model to measured migrations.

    Each sample carries the max downtime it ran with; `max_downtime_ms`, when given, overrides it for
    every sample. Needs idle migrations (dirty rate 0) of at least two sizes; the dirty factor needs
    at least one dirtying guest (otherwise it is None). Raises `CalibrationError`.
    """
    data = list(samples)
    if max_downtime_ms is not None:
        data = [dataclasses.replace(s, max_downtime_ms=max_downtime_ms) for s in data]
    for s in data:
        for name in ("memory_mib", "total_s", "max_downtime_ms"):
            value = getattr(s, name)
            if not (math.isfinite(value) and value > 0):
                raise CalibrationError(f"migration sample {s}: {name} must be greater than 0")
        for name in ("dirty_rate_mib_s", "disk_mib"):
            if not (math.isfinite(getattr(s, name)) and getattr(s, name) >= 0):
                raise CalibrationError(f"migration sample {s}: {name} must not be negative")
    idle = [s for s in data if s.dirty_rate_mib_s == 0]
    dirty = [s for s in data if s.dirty_rate_mib_s > 0]
    # (a disk goes first at the same bandwidth: an idle guest's time grows with memory plus disk)
    bandwidth, fixed = _linear_time_fit(
        [s.memory_mib + s.disk_mib for s in idle], [s.total_s for s in idle], "migrations of idle guests (dirty rate 0)")
    # An idle guest's pause is all switch-over; the rest of the fixed time is the setup overhead.
    idle_switchover = _switchover_ms(np.array([s.downtime_ms for s in idle], dtype=float), np.zeros(len(idle)))
    overhead = max(fixed - idle_switchover / 1000.0, 0.0)
    factor: float | None = None
    if dirty:
        factor = _fit_dirty_factor(dirty, bandwidth, overhead)
        if refine:
            def cost(x: np.ndarray) -> float:
                if not x[0] < 700:  # exp overflows: no bandwidth that large is worth trying
                    return math.inf
                return _objective(data, math.exp(x[0]), max(x[1], 0.0), _clamp_factor(x[2]))

            x0 = np.array([math.log(bandwidth), overhead, factor])
            start = cost(x0)
            steps = np.array([0.05, max(0.05 * overhead, 0.05), max(0.05 * factor, 0.02)])
            x, value = _nelder_mead(cost, x0, steps)
            if value < start:
                bandwidth, overhead, factor = math.exp(x[0]), max(float(x[1]), 0.0), _clamp_factor(float(x[2]))
    interval = None
    determined = False
    if factor is not None:
        interval = _factor_interval(data, bandwidth, overhead, factor)
        determined = interval is None or (interval[0] > 0.0 and interval[1] < MAX_DIRTY_FACTOR)
    total, down, switchover = _residuals(data, bandwidth, overhead, 1.0 if factor is None else factor)
    measured = np.array([s.total_s for s in data])
    return MigrationFit(
        bandwidth_mib_s=float(bandwidth),
        overhead_s=float(overhead),
        dirty_factor=None if factor is None else float(factor),
        samples=len(data),
        rms_total_s=float(np.sqrt(np.mean(total ** 2))),
        rms_downtime_ms=float(np.sqrt(np.mean(down ** 2)) * 1000.0),
        max_rel_total_error=float(np.max(np.abs(total) / measured)),
        dirty_factor_interval=interval,
        dirty_factor_determined=determined,
        switchover_ms=switchover,
    )


def fit_rates(samples: Iterable[RateSample], what: str = "suspend/resume") -> RateFit:
    """Least squares of `seconds = overhead + memory / rate` (overhead >= 0); unpacks as (rate, overhead)."""
    data = list(samples)
    for s in data:
        if not (math.isfinite(s.memory_mib) and s.memory_mib > 0):
            raise CalibrationError(f"{what} sample {s}: memory_mib must be greater than 0")
    rate, overhead = _linear_time_fit([s.memory_mib for s in data], [s.seconds for s in data], what)
    residuals = np.array([overhead + s.memory_mib / rate - s.seconds for s in data])
    return RateFit(rate_mib_s=rate, overhead_s=overhead, samples=len(data),
                   rms_s=float(np.sqrt(np.mean(residuals ** 2))))


# -- what is stored --------------------------------------------------------------------------------------
def migration_record(fit: MigrationFit, hosts: Sequence[str], at: datetime, driver: str,
                     max_downtime_ms: float) -> dict[str, Any]:
    """The `migration` section of the stored calibration."""
    return {
        "bandwidth_mib_s": fit.bandwidth_mib_s,
        "overhead_s": fit.overhead_s,
        "switchover_ms": fit.switchover_ms,
        # applied only when the measurements bound it; the best fit and its interval are kept either way
        "dirty_factor": fit.dirty_factor if fit.dirty_factor_determined else None,
        "dirty_factor_fit": fit.dirty_factor,
        "dirty_factor_interval": list(fit.dirty_factor_interval) if fit.dirty_factor_interval else None,
        "rms_total_s": fit.rms_total_s,
        "rms_downtime_ms": fit.rms_downtime_ms,
        "max_downtime_ms": max_downtime_ms,
        "hosts": list(hosts),
        "driver": driver,
        "at": iso(at),
        "samples": fit.samples,
    }


def suspend_record(suspend: RateFit, resume: RateFit, hosts: Sequence[str], at: datetime,
                   driver: str) -> dict[str, Any]:
    """The `suspend` section of the stored calibration."""
    return {
        "suspend_rate_mib_s": suspend.rate_mib_s,
        "suspend_overhead_s": suspend.overhead_s,
        "suspend_rms_s": suspend.rms_s,
        "resume_rate_mib_s": resume.rate_mib_s,
        "resume_overhead_s": resume.overhead_s,
        "resume_rms_s": resume.rms_s,
        "hosts": list(hosts),
        "driver": driver,
        "at": iso(at),
        "samples": suspend.samples + resume.samples,
    }
