"""The plot people make from a sweep's table: a metric against one column, one line per value of another.

Runs that share an x value and a line (the other axes, the other injected files) are summarised: the line
goes through their mean and a band shows their range, so that what the mean hides stays visible.

The axes say what they show in words, with units (`best-effort mean wait (s)`, not `be_wait_mean_seconds`):
the simulator's metrics and the table's own columns by a label of their own, any other column by its name
in words with the unit its name ends in; `--x-label` and `--y-label` name a column of the sweep's own (a
field taken from a file name means what the sweep's author says it means). The title is wrapped to the
figure's width.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from orchestrator.analysis.timeline import PlotUnavailable, save_png
from orchestrator.model.errors import InvalidRequest


#: the table's columns and the simulator's metrics, in words (a unit in parentheses)
LABELS = {
    "run": "run", "workload": "workload", "inject": "injected leases",
    "all_best_effort_seconds": "all best-effort leases done after (s)",
    "be_wait_mean_seconds": "best-effort mean wait (s)",
    "be_bounded_slowdown_mean": "best-effort mean bounded slowdown (10 s)",
    "utilization": "CPU utilization (fraction of the hosts' CPUs)",
    "ar_accepted": "advance reservations accepted", "ar_rejected": "advance reservations rejected",
    "im_accepted": "immediate leases accepted", "im_rejected": "immediate leases rejected",
    "leases_done": "leases done", "leases_total": "leases",
    "suspensions": "suspensions", "requeues": "requeues", "migrations": "live migrations",
    "image_migrations": "memory image migrations",
    "predicted_downtime_ms_total": "predicted downtime, all migrations (ms)",
    "premature_ends": "leases ended early", "simulated_seconds": "simulated time (s)",
    "wall_seconds": "wall time (s)",
}
#: the unit a column's name ends in
_UNITS = (("_seconds", "s"), ("_mib_s", "MiB/s"), ("_ms", "ms"), ("_mib", "MiB"), ("_s", "s"), ("_pct", "%"))
#: a title longer than this (characters of the title's font, the figure's width) goes on to a second line
TITLE_WIDTH = 90


def label_of(column: str) -> str:
    """A column in words: its own label, else its name with spaces and the unit its name ends in."""
    if column in LABELS:
        return LABELS[column]
    for suffix, unit in _UNITS:
        if column.endswith(suffix) and len(column) > len(suffix):
            return f"{column[:-len(suffix)].replace('_', ' ')} ({unit})"
    return column.replace("_", " ")


@dataclass(frozen=True)
class Line:
    label: str | None
    xs: list[Any]
    means: list[float]
    lows: list[float]
    highs: list[float]
    counts: list[int]


def _sort_key(value: Any) -> tuple:
    return (0, value, "") if isinstance(value, (int, float)) and not isinstance(value, bool) else (1, 0, str(value))


def summarise(columns: Sequence[str], rows: Sequence[dict[str, Any]], x: str, y: str, hue: str | None) -> list[Line]:
    """Mean, min and max of `y` per x value, one line per `hue` value (or one line)."""
    for option, name in (("--x", x), ("--y", y), ("--hue", hue)):
        if name is not None and name not in columns:
            raise InvalidRequest(option, f"no column {name!r} in the table (columns: {', '.join(columns)})")
    groups: dict[Any, dict[Any, list[float]]] = {}
    for row in rows:
        value = row.get(y)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidRequest("--y", f"column {y!r} is not a number ({value!r}): plot a metric")
        if isinstance(value, float) and math.isnan(value):
            continue
        line = row.get(hue) if hue else None
        groups.setdefault(line, {}).setdefault(row.get(x), []).append(float(value))
    if not groups:
        raise InvalidRequest("--y", f"column {y!r} has no values to plot")
    lines = []
    for label in sorted(groups, key=_sort_key):
        points = groups[label]
        xs = sorted(points, key=_sort_key)
        lines.append(Line(label=None if hue is None else str(label), xs=xs,
                          means=[sum(points[v]) / len(points[v]) for v in xs], lows=[min(points[v]) for v in xs],
                          highs=[max(points[v]) for v in xs], counts=[len(points[v]) for v in xs]))
    return lines


def render_sweep_png(lines: list[Line], x: str, y: str, hue: str | None, path: Path, title: str | None = None,
                     *, x_label: str | None = None, y_label: str | None = None, dpi: int = 100) -> Path:
    return save_png(sweep_figure(lines, x, y, hue, title, x_label=x_label, y_label=y_label, dpi=dpi), path, dpi)


def sweep_figure(lines: list[Line], x: str, y: str, hue: str | None, title: str | None = None,
                 *, x_label: str | None = None, y_label: str | None = None, dpi: int = 100):
    """The figure: `y` against `x` (labelled `x_label`, `y_label`, else `label_of` them), a line per `hue`."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotUnavailable() from None
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for line in lines for v in line.xs)
    categories = sorted({v for line in lines for v in line.xs}, key=_sort_key)
    fig = Figure(figsize=(8, 4.8), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    banded = False
    for line in lines:
        xs = line.xs if numeric else [categories.index(v) for v in line.xs]
        drawn = ax.plot(xs, line.means, marker="o", label=line.label)[0]
        if any(n > 1 for n in line.counts):
            banded = True
            ax.fill_between(xs, line.lows, line.highs, color=drawn.get_color(), alpha=0.15, linewidth=0)
    if not numeric:
        ax.set_xticks(range(len(categories)), [str(c) for c in categories], rotation=30 if len(categories) > 6 else 0,
                      ha="right" if len(categories) > 6 else "center")
    across, along = x_label or label_of(x), y_label or label_of(y)
    ax.set_xlabel(across)
    ax.set_ylabel(along)
    ax.grid(alpha=0.3)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if hue is not None:
        ax.legend(title=label_of(hue), frameon=False)
    runs = sum(sum(line.counts) for line in lines)
    if title is None:
        title = (f"{along[:1].upper()}{along[1:]} by {across}" + (f", one line per {label_of(hue)}" if hue else "")
                 + f" ({runs} runs" + ("; each point their mean, the band their range)" if banded else ")"))
    ax.set_title(textwrap.fill(title, TITLE_WIDTH), loc="left", fontsize=11)
    return fig
