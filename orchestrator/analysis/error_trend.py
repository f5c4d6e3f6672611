"""Whether the predictions get better as operations accumulate: per kind of timed operation, the median
relative error of the earlier half of its rows against the later half (`leasewise report`'s "prediction error
as operations accumulate").

The daemon learns the model's rates from every live migration, save, restore and memory-image move it
enacts (orchestrator.runtime.learner): on a fresh install the first plans use the configured rates, so the
earlier half's error is the configured model's and the later half's the learned one's.

A row's error is |measured - predicted| / measured duration: for a live migration the pre-copy model's
prediction against libvirt's measured time (the slowest VM of the reservation), for the others the planned
reservation's length against the enacted one. Rows without both, failed rows, and rows that took no time are
left out.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from orchestrator.model.reservations import ReservationKind

K = ReservationKind
#: the kinds whose duration the planner predicts from a learned rate
TIMED_KINDS = (K.LIVE_MIGRATE.value, K.SUSPEND.value, K.RESUME.value, K.MIGRATE.value)


class RowLike(Protocol):
    @property
    def kind(self) -> str: ...

    @property
    def failed(self) -> bool: ...

    @property
    def predicted_seconds(self) -> float | None: ...

    @property
    def measured_seconds(self) -> float | None: ...

    @property
    def planned_seconds(self) -> float | None: ...

    @property
    def enacted_seconds(self) -> float | None: ...


@dataclass(frozen=True)
class Trend:
    """One kind: its timed rows, and the median error (percent of the measured time) of each half."""

    kind: str
    operations: int
    earlier_pct: float
    later_pct: float

    @property
    def falling(self) -> bool:
        return self.later_pct < self.earlier_pct

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "falling": self.falling}


def error_pct(row: RowLike) -> float | None:
    """The row's relative error, percent; None when it cannot be told."""
    if row.failed or row.kind not in TIMED_KINDS:
        return None
    if row.kind == K.LIVE_MIGRATE.value:
        predicted, measured = row.predicted_seconds, row.measured_seconds
    else:
        predicted, measured = row.planned_seconds, row.enacted_seconds
    if predicted is None or measured is None or measured <= 0:
        return None
    return abs(measured - predicted) / measured * 100.0


def error_trend(rows: Iterable[RowLike]) -> list[Trend]:
    """Per timed kind with at least two measurable rows (in the order given: the report's, by time)."""
    errors: dict[str, list[float]] = {}
    for row in rows:
        error = error_pct(row)
        if error is not None:
            errors.setdefault(row.kind, []).append(error)
    return [_trend(kind, errors[kind]) for kind in TIMED_KINDS if len(errors.get(kind, ())) >= 2]


def _trend(kind: str, errors: Sequence[float]) -> Trend:
    half = len(errors) // 2
    return Trend(kind, len(errors), statistics.median(errors[:half]), statistics.median(errors[half:]))
