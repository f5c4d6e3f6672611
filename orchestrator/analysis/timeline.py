"""The plan drawn per host: a Gantt timeline of reservations, in the terminal (rich) or as a PNG (matplotlib).

The model is plain data: one row per host, one bar per reservation on that host (a migration appears on
its source and on its destination), bars that overlap in time on one host put on separate lanes so nothing
hides anything. The renderers only read it:

* `render_terminal` draws one line per lane with a character and colour per reservation kind, the lease's
  label written on bars wide enough to hold it, a UTC time axis and a legend;
* `render_png` draws the same with matplotlib's object API (a `Figure` on a `FigureCanvasAgg`: no pyplot,
  no global backend switch). matplotlib is optional (`pip install 'leasewise[plot]'`).

`timeline_from_result` builds the timeline of a simulation, `build_timeline` that of any list of
(lease, reservation) pairs such as `Cluster.plan()` returns.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.model.errors import LeasewiseError
from orchestrator.model.lease import Lease
from orchestrator.model.reservations import (
    Reservation,
    ReservationKind,
    ReservationState,
)
from orchestrator.model.timeutil import UTC

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console
    from rich.text import Text

    from orchestrator.runtime.simulator import SimulationResult

K = ReservationKind

#: one colour per kind, shared by the terminal (rich accepts hex) and the PNG
KIND_COLOURS: dict[ReservationKind, str] = {
    K.VM: "#4c72b0",            # blue
    K.SUSPEND: "#dd8452",       # orange
    K.RESUME: "#55a868",        # green
    K.SHUTDOWN: "#c44e52",      # red
    K.MIGRATE: "#8172b3",       # purple
    K.LIVE_MIGRATE: "#da8bc3",  # pink
}
#: the terminal's character per kind; a zero-length reservation of any kind is drawn as TICK
KIND_CHARS: dict[ReservationKind, str] = {
    K.VM: "█",
    K.SUSPEND: "▓",
    K.RESUME: "░",
    K.SHUTDOWN: "▏",
    K.MIGRATE: "▒",
    K.LIVE_MIGRATE: "▒",
}
TICK = "▏"        # a zero-length reservation, at the left edge of the cell its instant falls in
TICK_END = "▕"    # the same at the very end of the window (right edge of the last cell)
NOW_MARK = "▼"
#: drawing order in legends
KIND_ORDER = (K.VM, K.SUSPEND, K.RESUME, K.MIGRATE, K.LIVE_MIGRATE, K.SHUTDOWN)

PLOT_INSTALL_HINT = "pip install 'leasewise[plot]'"


class TimelineError(LeasewiseError):
    """The timeline cannot be drawn (matplotlib missing, the PNG cannot be written)."""


class PlotUnavailable(TimelineError):
    def __init__(self) -> None:
        super().__init__(f"--png needs matplotlib, which is not installed: {PLOT_INSTALL_HINT}")


# -- the model ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Bar:
    """One reservation as seen on one host. `role` is "from" / "to" (or "from+to") for migrations."""

    host: str
    kind: ReservationKind
    lease_id: int
    label: str
    start: datetime
    end: datetime
    reservation_id: int = 0
    state: ReservationState = ReservationState.SCHEDULED
    role: str = ""
    lane: int = 0

    @property
    def zero_length(self) -> bool:
        return self.end <= self.start

    @property
    def duration(self) -> timedelta:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class LeaseInfo:
    id: int
    label: str
    type: str      # AR / BE / IM
    state: str
    placement: str = ""   # its constraints, spread or pack, exclusive (`Placement.describe`); "" for none


@dataclass
class HostRow:
    name: str
    bars: list[Bar] = field(default_factory=list)   # sorted by (start, end); each has its lane
    lanes: int = 1                                  # at least one line per host, even when empty


@dataclass
class Timeline:
    rows: list[HostRow]
    start: datetime
    end: datetime
    now: datetime | None = None
    leases: dict[int, LeaseInfo] = field(default_factory=dict)

    @property
    def hosts(self) -> list[str]:
        return [row.name for row in self.rows]

    @property
    def bars(self) -> list[Bar]:
        return [bar for row in self.rows for bar in row.bars]

    @property
    def empty(self) -> bool:
        return not any(row.bars for row in self.rows)

    def row(self, host: str) -> HostRow:
        for row in self.rows:
            if row.name == host:
                return row
        raise KeyError(host)

    @property
    def kinds(self) -> list[ReservationKind]:
        present = {bar.kind for bar in self.bars}
        return [k for k in KIND_ORDER if k in present]


def reservation_hosts(rr: Reservation) -> list[tuple[str, str]]:
    """(host, role) for every host a reservation touches: the hosts it holds resources on, and for a
    migration both ends of every transfer (a migration that holds nothing still shows on both)."""
    roles: dict[str, set[str]] = {h: set() for h in rr.resources}
    for src, dst in rr.transfers.values():
        roles.setdefault(src, set()).add("from")
        roles.setdefault(dst, set()).add("to")
    if not roles:
        roles = {h: set() for h in rr.nodes.values()}
    return [(h, "+".join(r for r in ("from", "to") if r in roles[h])) for h in sorted(roles)]


def _meets(start: datetime, end: datetime, lo: datetime | None, hi: datetime | None) -> bool:
    """Whether [start, end) meets [lo, hi]; a zero-length reservation meets it when its instant is inside."""
    if start >= end:
        return (lo is None or start >= lo) and (hi is None or start <= hi)
    return (hi is None or start < hi) and (lo is None or end > lo)


def bars_from_plan(pairs: Iterable[tuple[Lease, Reservation]], labels: Mapping[int, str] | None = None) -> list[Bar]:
    """One bar per (reservation, host) of the plan; lanes are assigned by `build_timeline`."""
    labels = labels or {}
    bars = []
    for lease, rr in pairs:
        label = labels.get(lease.id) or str(lease.id)
        for host, role in reservation_hosts(rr):
            bars.append(Bar(host=host, kind=rr.kind, lease_id=lease.id, label=label, start=rr.start, end=rr.end,
                            reservation_id=rr.id, state=rr.state, role=role))
    return bars


def pick_window(bars: Sequence[Bar], *, now: datetime | None = None, start: datetime | None = None,
                end: datetime | None = None) -> tuple[datetime, datetime] | None:
    """The window to draw: `start` / `end` when given; otherwise from the start of the earliest reservation
    not finished at `now` (every reservation when `now` is None) to the last end of what is in the window.
    None when nothing is left to show. Never an empty interval."""
    if start is None:
        if now is None:
            candidates = list(bars)
        else:
            candidates = [b for b in bars if b.state is not ReservationState.DONE
                          and (b.end > now or (b.zero_length and b.start >= now))]
        candidates = [b for b in candidates if _meets(b.start, b.end, None, end)]
        if not candidates:
            return None
        start = min(b.start for b in candidates)
    if end is None:
        inside = [b for b in bars if _meets(b.start, b.end, start, None)]
        if not inside:
            return None
        end = max(b.end for b in inside)
    if end <= start:
        end = start + timedelta(minutes=1)
    return start, end


def assign_lanes(bars: Iterable[Bar]) -> tuple[list[Bar], int]:
    """Greedy interval partitioning of one host's bars: a bar goes on the first lane whose bars all end by
    its start (zero-length bars hold nothing, so they only need to fall outside every bar of the lane).
    Returns the bars with their lane, sorted, and the number of lanes (at least 1)."""
    ordered = sorted(bars, key=lambda b: (b.start, b.end, b.lease_id, b.reservation_id))
    lane_ends: list[datetime] = []
    out = []
    for bar in ordered:
        for lane, lane_end in enumerate(lane_ends):
            if bar.start >= lane_end:
                break
        else:
            lane = len(lane_ends)
            lane_ends.append(bar.start)
        if not bar.zero_length:
            lane_ends[lane] = max(lane_ends[lane], bar.end)
        out.append(_with_lane(bar, lane))
    return out, max(1, len(lane_ends))


def _with_lane(bar: Bar, lane: int) -> Bar:
    return Bar(bar.host, bar.kind, bar.lease_id, bar.label, bar.start, bar.end, bar.reservation_id, bar.state,
               bar.role, lane)


def build_timeline(pairs: Iterable[tuple[Lease, Reservation]], hosts: Iterable[str], *,
                   start: datetime | None = None, end: datetime | None = None, now: datetime | None = None,
                   labels: Mapping[int, str] | None = None) -> Timeline:
    """The timeline of a plan over `hosts` (in that order; a host only the plan names is added after them).

    The window is `pick_window(..., now=now, start=start, end=end)`; with nothing to show the timeline is
    empty (`.empty`) over [start or now, end or start + 1 min]."""
    pairs = list(pairs)
    all_bars = bars_from_plan(pairs, labels)
    window = pick_window(all_bars, now=now, start=start, end=end)
    if window is None:
        lo = start or now or datetime.now(UTC)
        window = (lo, end if end is not None and end > lo else lo + timedelta(minutes=1))
        shown: list[Bar] = []
    else:
        shown = [b for b in all_bars if _meets(b.start, b.end, *window)]
    names = list(dict.fromkeys(hosts))
    names += sorted({b.host for b in shown} - set(names))
    by_host: dict[str, list[Bar]] = {h: [] for h in names}
    for bar in shown:
        by_host[bar.host].append(bar)
    rows = []
    for name in names:
        laned, lanes = assign_lanes(by_host[name])
        rows.append(HostRow(name, laned, lanes))
    shown_ids = {b.lease_id for b in shown}
    leases = {}
    for lease, _ in pairs:
        if lease.id in shown_ids and lease.id not in leases:
            placement = lease.request.placement
            leases[lease.id] = LeaseInfo(lease.id, (labels or {}).get(lease.id) or str(lease.id), lease.type.short,
                                         lease.state.value, "" if placement is None else placement.describe())
    return Timeline(rows=rows, start=window[0], end=window[1], now=now, leases=dict(sorted(leases.items())))


def timeline_from_result(result: "SimulationResult", *, start: datetime | None = None,
                         end: datetime | None = None) -> Timeline:
    """The whole plan of a finished simulation (every lease, every host), labelled by workload id."""
    pairs = [(lease, rr) for lease in result.leases for vm in lease.reservations for rr in vm.all_parts()]
    labels = {lease.id: result.workload_ids.get(lease.id, str(lease.id)) for lease in result.leases}
    return build_timeline(pairs, result.hosts, start=start, end=end, labels=labels)


# -- terminal ------------------------------------------------------------------------------------------------
_TICK_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
               2 * 86400, 7 * 86400, 14 * 86400, 30 * 86400)
_MIN_AREA = 10
_MAX_HOST_LABEL = 24


def _time_format(step: float, multi_day: bool) -> str:
    if step >= 86400:
        return "%m-%d"
    clock = "%H:%M:%S" if step < 60 else "%H:%M"
    return f"%m-%d {clock}" if multi_day else clock


def _ticks(start: datetime, end: datetime, columns: int) -> tuple[list[datetime], str]:
    """Round UTC instants for the axis, spaced so that their labels fit, and their strftime format."""
    span = (end - start).total_seconds()
    per_column = span / columns
    multi_day = start.date() != end.date() or span > 86400
    for step in _TICK_STEPS:
        fmt = _time_format(step, multi_day)
        if step / per_column >= len(start.strftime(fmt)) + 2:
            break
    else:
        step = math.ceil(per_column * 8 / 86400) * 86400
        fmt = _time_format(step, multi_day)
    first = math.ceil(start.timestamp() / step) * step
    ticks = []
    t = first
    while t <= end.timestamp() + 1e-6:
        ticks.append(datetime.fromtimestamp(t, UTC))
        t += step
    return ticks, fmt


def _contrast(colour: str) -> str:
    r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "white"


@dataclass
class _Cell:
    char: str
    style: str
    bar: Bar | None = None
    long: bool = False


class _Canvas:
    """The columns of the terminal timeline: maps times to cells and places bars on lines."""

    def __init__(self, start: datetime, end: datetime, columns: int):
        self.start = start
        self.columns = columns
        self.per_column = (end - start).total_seconds() / columns

    def col(self, t: datetime) -> float:
        return (t - self.start).total_seconds() / self.per_column

    def draw_host(self, row: HostRow) -> list[list[_Cell | None]]:
        """The lines of one host, one per lane. A bar shorter than a cell still gets one (the nearest free
        one within two cells); a 0 s reservation is a tick at the cell edge nearest its instant."""
        lines: list[list[_Cell | None]] = [[None] * self.columns for _ in range(row.lanes)]
        owned: dict[int, int] = {}         # id(bar) -> cells it still holds
        short: list[tuple[Bar, int, str]] = []
        long_spans: list[tuple[Bar, int, int]] = []
        n = self.columns
        for bar in row.bars:
            style = KIND_COLOURS[bar.kind]
            if bar.zero_length:
                c = round(self.col(bar.start))
                short.append((bar, min(max(c, 0), n - 1), TICK_END if c >= n else TICK))
                continue
            c0 = min(max(round(self.col(bar.start)), 0), n)
            c1 = min(max(round(self.col(bar.end)), 0), n)
            if c1 <= c0:
                short.append((bar, min(c0, n - 1), KIND_CHARS[bar.kind]))
                continue
            for c in range(c0, c1):
                lines[bar.lane][c] = _Cell(KIND_CHARS[bar.kind], style, bar, long=True)
            owned[id(bar)] = c1 - c0
            long_spans.append((bar, c0, c1))
        # bars narrower than a cell first (they hold time), then the 0 s ticks, each in time order
        short.sort(key=lambda item: (item[0].zero_length, item[0].start, item[0].lease_id))
        for bar, want, char in short:
            colour = KIND_COLOURS[bar.kind]
            placed = False
            if char in (TICK, TICK_END):
                # the instant is the left edge of `want`, which is also the right edge of the cell before
                options = [(want, char), (want - 1, TICK_END), (want + 1, TICK), (want - 2, TICK_END), (want + 2, TICK)]
            else:
                options = [(want, char), (want + 1, char), (want - 1, char), (want + 2, char), (want - 2, char)]
            for lane in [bar.lane] + [i for i in range(len(lines)) if i != bar.lane]:
                line = lines[lane]
                for c, ch in options:
                    if not 0 <= c < n:
                        continue
                    there = line[c]
                    if there is None or (there.long and owned[id(there.bar)] > 1):
                        if there is not None:
                            owned[id(there.bar)] -= 1
                        line[c] = _Cell(ch, colour, bar)
                        placed = True
                        break
                if placed:
                    break
            # not placed: every nearby cell already shows a reservation shorter than a cell; at this
            # scale one more mark would say nothing new (true overlaps are on lanes of their own)
        for bar, c0, c1 in long_spans:
            self._label(lines[bar.lane], bar, c0, c1)
        return lines

    @staticmethod
    def _label(line: list[_Cell | None], bar: Bar, c0: int, c1: int) -> None:
        """Write the lease label in the middle of the longest run of cells the bar still holds."""
        best, run_start = (0, 0), None
        for c in range(c0, c1 + 1):
            mine = c < c1 and (cell := line[c]) is not None and cell.bar is bar
            if mine and run_start is None:
                run_start = c
            elif not mine and run_start is not None:
                if c - run_start > best[1] - best[0]:
                    best = (run_start, c)
                run_start = None
        text = bar.label
        width = best[1] - best[0]
        if width < len(text) + 2:
            return
        first = best[0] + (width - len(text)) // 2
        colour = KIND_COLOURS[bar.kind]
        style = f"bold {_contrast(colour)} on {colour}"
        for i, ch in enumerate(text):
            line[first + i] = _Cell(ch, style, bar, long=True)


def _text(cells: Sequence[_Cell | None], blank: Mapping[int, str] | None = None) -> "Text":
    from rich.text import Text

    text = Text()
    run: list[str] = []
    run_style: str | None = None
    for c, cell in enumerate(cells):
        char, style = (cell.char, cell.style) if cell else ((blank or {}).get(c, " "), "dim")
        if style != run_style and run:
            text.append("".join(run), style=run_style)
            run = []
        run.append(char)
        run_style = style
    if run:
        text.append("".join(run), style=run_style)
    return text


def _host_label(name: str, width: int) -> str:
    return (name if len(name) <= width else name[: width - 1] + "…").ljust(width)


def render_terminal(timeline: Timeline, width: int | None = None, console: "Console | None" = None) -> None:
    """Print the timeline as a Gantt chart: one line per lane of every host, a UTC time axis, a legend."""
    from rich.console import Console
    from rich.text import Text

    console = console or Console(highlight=False)
    width = width or console.width
    label_width = min(max([len(h) for h in timeline.hosts] + [4]), _MAX_HOST_LABEL)
    columns = max(width - label_width - 1, _MIN_AREA)
    canvas = _Canvas(timeline.start, timeline.end, columns)
    pad = " " * (label_width + 1)

    def out(text: "Text") -> None:
        console.print(text, no_wrap=True, overflow="crop", crop=True, soft_wrap=False)

    same_day = timeline.start.date() == timeline.end.date()
    end_text = timeline.end.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S")
    header = Text(f"{timeline.start:%Y-%m-%d %H:%M:%S} → {end_text} UTC", style="bold")
    header.append(f"  ·  {len(timeline.leases)} lease{'s' * (len(timeline.leases) != 1)} on "
                  f"{len(timeline.rows)} host{'s' * (len(timeline.rows) != 1)}", style="")
    out(header)

    # time axis: labels, then a rule with a mark under each label
    ticks, fmt = _ticks(timeline.start, timeline.end, columns)
    labels = [" "] * columns
    rule = ["─"] * columns
    tick_columns: dict[int, str] = {}
    next_free = 0
    for t in ticks:
        c = round(canvas.col(t))
        if not 0 <= c < columns:
            continue
        rule[c] = "┬"
        tick_columns[c] = "·"
        text = t.strftime(fmt)
        if c >= next_free and c + len(text) <= columns:
            labels[c:c + len(text)] = text
            next_free = c + len(text) + 1
    axis = Text(pad + "".join(labels), style="dim")
    now_col = None
    if timeline.now is not None and timeline.start <= timeline.now <= timeline.end:
        now_col = min(round(canvas.col(timeline.now)), columns - 1)
    marks = Text(pad + "".join(rule[:now_col] if now_col is not None else rule), style="dim")
    if now_col is not None:
        marks.append(NOW_MARK, style="bold red")
        marks.append("".join(rule[now_col + 1:]), style="dim")
    out(axis)
    out(marks)

    for row in timeline.rows:
        for i, cells in enumerate(canvas.draw_host(row)):
            line = Text()
            line.append(_host_label(row.name if i == 0 else "", label_width) + " ", style="bold")
            line.append_text(_text(cells, tick_columns))
            out(line)

    items = [(KIND_CHARS[kind], KIND_COLOURS[kind], kind.value) for kind in timeline.kinds or [K.VM]]
    if any(b.zero_length and b.kind is not K.SHUTDOWN for b in timeline.bars):
        items.append((TICK, "bold", "0 s (kind's colour)"))
    if now_col is not None:
        items.append((NOW_MARK, "bold red", "now"))
    _wrapped(out, "legend:", items, width)
    if timeline.leases and len(timeline.leases) <= 40:
        _wrapped(out, "leases:", [(info.label, "bold", f"{info.type} {info.state}"
                                                       + (f" ({info.placement})" if info.placement else ""))
                                  for info in timeline.leases.values()], width)


def _wrapped(out, title: str, items: Sequence[tuple[str, str, str]], width: int) -> None:
    """`title mark name  mark name ...` over as many lines as `width` needs."""
    from rich.text import Text

    line = Text(title, style="dim")
    for mark, style, name in items:
        if line.cell_len + len(mark) + len(name) + 3 > width and line.cell_len > len(title):
            out(line)
            line = Text(" " * len(title), style="dim")
        line.append("  ")
        line.append(mark, style=style)
        line.append(f" {name}")
    out(line)


# -- PNG -----------------------------------------------------------------------------------------------------
def plot_available() -> bool:
    try:
        import matplotlib
    except ImportError:
        return False
    return matplotlib is not None


def require_plot() -> None:
    """Raise `PlotUnavailable` (one line: what to install) when matplotlib is missing."""
    if not plot_available():
        raise PlotUnavailable()


_MAX_PNG_LABELS = 400


def render_png(timeline: Timeline, path: str | os.PathLike[str], title: str | None = None, *, dpi: int = 100) -> Path:
    """Draw the timeline into a PNG at `path` (written next to it and renamed: never half a file).

    Uses matplotlib's object API on the Agg canvas only: no pyplot, no change to the global backend."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.dates import date2num
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
    except ImportError:
        raise PlotUnavailable() from None

    path = Path(path)
    lane_height, gap = 1.0, 0.35
    total_lanes = sum(row.lanes for row in timeline.rows)
    height = min(max(2.8, 1.6 + 0.32 * total_lanes + 0.12 * len(timeline.rows)), 60.0)
    fig = Figure(figsize=(12, height), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()

    x0, x1 = date2num(timeline.start), date2num(timeline.end)
    span = x1 - x0
    axes_px = 12 * dpi * 0.85
    min_width = span * 1.5 / axes_px          # a short reservation stays visible (1.5 px)
    busiest = max((len(row.bars) / row.lanes for row in timeline.rows), default=0)
    tick_width = 2.0 if busiest <= 40 else 0.7   # a dense plan: 0 s ticks must not hide the bars
    y = 0.0
    yticks, ylabels = [], []
    labels_drawn = 0
    for row in timeline.rows:
        lane_y = [y + lane * lane_height for lane in range(row.lanes)]
        yticks.append(y + row.lanes * lane_height / 2)
        ylabels.append(row.name)
        groups: dict[tuple[int, ReservationKind], list[tuple[float, float]]] = {}
        ticks: dict[tuple[int, ReservationKind], list[float]] = {}
        for bar in row.bars:
            s = max(date2num(bar.start), x0)
            e = min(date2num(bar.end), x1)
            if bar.zero_length:
                ticks.setdefault((bar.lane, bar.kind), []).append(s)
                continue
            groups.setdefault((bar.lane, bar.kind), []).append((s, max(e - s, min_width)))
            if labels_drawn < _MAX_PNG_LABELS and (e - s) / span * axes_px >= 7 * len(bar.label) + 8:
                colour = KIND_COLOURS[bar.kind]
                ax.text((s + e) / 2, lane_y[bar.lane] + lane_height / 2, bar.label, ha="center", va="center",
                        fontsize=8, color=_contrast(colour), clip_on=True)
                labels_drawn += 1
        for (lane, kind), spans in groups.items():
            ax.broken_barh(spans, (lane_y[lane] + 0.08, lane_height - 0.16), facecolors=KIND_COLOURS[kind],
                           edgecolor="white", linewidth=0.4)
        for (lane, kind), xs in ticks.items():
            ax.vlines(xs, lane_y[lane] + 0.02, lane_y[lane] + lane_height - 0.02, colors=KIND_COLOURS[kind],
                      linewidth=tick_width)
        y += row.lanes * lane_height + gap
        if row is not timeline.rows[-1]:
            ax.axhline(y - gap / 2, color="0.85", linewidth=0.6)
    ax.set_xlim(x0 - span * 0.005, x1 + span * 0.005)   # room for a tick at either end
    ax.set_ylim(y, -gap)                       # first host at the top
    ax.set_yticks(yticks, ylabels)
    ax.tick_params(axis="y", length=0)
    style_time_axis(ax)

    handles: list[Patch | Line2D] = [Patch(facecolor=KIND_COLOURS[k], label=k.value) for k in timeline.kinds
                                     if k is not K.SHUTDOWN]
    if K.SHUTDOWN in timeline.kinds:
        handles.append(Line2D([], [], color=KIND_COLOURS[K.SHUTDOWN], linewidth=2, label=K.SHUTDOWN.value))
    if timeline.now is not None and timeline.start <= timeline.now <= timeline.end:
        ax.axvline(date2num(timeline.now), color="black", linestyle="--", linewidth=1)
        handles.append(Line2D([], [], color="black", linestyle="--", linewidth=1, label="now"))
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False)
    same_day = timeline.start.date() == timeline.end.date()
    default_title = (f"leasewise plan · {timeline.start:%Y-%m-%d %H:%M:%S} → "
                     f"{timeline.end.strftime('%H:%M:%S' if same_day else '%Y-%m-%d %H:%M:%S')} UTC")
    ax.set_title(title or default_title, loc="left", fontsize=11)

    return save_png(fig, path, dpi)


def save_png(fig, path: Path, dpi: int) -> Path:
    """Write a matplotlib figure to `path` whole or not at all (through a temporary file beside it)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        fig.savefig(tmp, format="png", dpi=dpi)
        tmp.replace(path)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise TimelineError(f"cannot write {path} ({exc.strerror or exc})") from None
    return path


def style_time_axis(ax) -> None:
    """The x axis of a time chart as every leasewise PNG draws it: UTC dates, light grid, open frame."""
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    locator = AutoDateLocator(tz=UTC)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(ConciseDateFormatter(locator, tz=UTC))
    ax.set_xlabel("time (UTC)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
