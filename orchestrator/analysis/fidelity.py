"""How well live-migration predictions held on runs they were not fitted to: the figures a reader of
`calibrate migration --validate` and of `report` wants (median and 90th-percentile absolute errors of total
time and downtime, and how many pauses stayed within the maximum downtime), computed one way for both.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Comparison:
    """One migration: what the model predicted and what was measured."""

    predicted_s: float
    measured_s: float
    predicted_downtime_ms: float
    measured_downtime_ms: float
    max_downtime_ms: float               # the pause the migration was allowed


@dataclass(frozen=True)
class Fidelity:
    """Absolute errors over `runs` migrations (percent of the measured total time; ms of downtime)."""

    runs: int
    total_error_pct_median: float
    total_error_pct_p90: float
    downtime_error_ms_median: float
    downtime_error_ms_p90: float
    within_max_downtime: int
    max_downtime_ms: float               # the largest allowed pause among the runs
    same_max_downtime: bool = True       # whether every run was allowed the same pause

    @property
    def within_share(self) -> float:
        return self.within_max_downtime / self.runs

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "within_share": self.within_share}

    def sentence(self) -> str:
        """The figures in one line, as both commands print them."""
        bound = f"{self.max_downtime_ms:g} ms" if self.same_max_downtime else "the maximum"
        return (f"{self.runs} run{'s' * (self.runs != 1)}: total time error median {self.total_error_pct_median:.1f}%, "
                f"90th percentile {self.total_error_pct_p90:.1f}%; downtime error median "
                f"{self.downtime_error_ms_median:.0f} ms, 90th percentile {self.downtime_error_ms_p90:.0f} ms; "
                f"downtime within {bound} in {self.within_max_downtime}/{self.runs} "
                f"({100.0 * self.within_share:.0f}%)")


def fidelity(comparisons: Iterable[Comparison]) -> Fidelity | None:
    """The summary of `comparisons` (None when there are none)."""
    runs = [c for c in comparisons if c.measured_s > 0]
    if not runs:
        return None
    total = np.array([abs(c.predicted_s - c.measured_s) / c.measured_s * 100.0 for c in runs])
    down = np.array([abs(c.predicted_downtime_ms - c.measured_downtime_ms) for c in runs])
    return Fidelity(
        runs=len(runs),
        total_error_pct_median=float(np.median(total)),
        total_error_pct_p90=float(np.percentile(total, 90)),
        downtime_error_ms_median=float(np.median(down)),
        downtime_error_ms_p90=float(np.percentile(down, 90)),
        within_max_downtime=sum(1 for c in runs if c.measured_downtime_ms <= c.max_downtime_ms),
        max_downtime_ms=max(c.max_downtime_ms for c in runs),
        same_max_downtime=len({c.max_downtime_ms for c in runs}) == 1,
    )
