"""The plot people make from a sweep's table: a metric against one column, one line per value of another.

Runs that share an x value and a line (the other axes, the other injected files) are summarised: the line
goes through their mean and a band shows their range, so that what the mean hides stays visible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from orchestrator.analysis.timeline import PlotUnavailable, save_png
from orchestrator.model.errors import InvalidRequest


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
                     *, dpi: int = 100) -> Path:
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
    ax.set_xlabel(x)
    ax.set_ylabel(y + (" (mean; band: min to max)" if banded else ""))
    ax.grid(alpha=0.3)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if hue is not None:
        ax.legend(title=hue, frameon=False)
    runs = sum(sum(line.counts) for line in lines)
    ax.set_title(title or f"{y} against {x}" + (f", one line per {hue}" if hue else "") + f" ({runs} runs)",
                 loc="left", fontsize=11)
    return save_png(fig, path, dpi)
