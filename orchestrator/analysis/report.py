"""Plan vs reality: what the daemon enacted next to what the plan said, from the event log (`leasewise report`).

The daemon records one "enacted" event per VM operation (see `scheduler/driver_enactor.py` and
`Daemon._record`): which reservation it enacted, that reservation's planned start and end at the time, and
when the operation really ran (`enacted_start`, `enacted_end`). `build_report` turns those events into one
row per enacted reservation and a summary; it is pure (events in, `Report` out) and reads nothing else.

* Rows. The "enacted" events of one reservation (one per VM) make one row: the earliest `enacted_start`
  against the planned start, the latest `enacted_end` against the planned end, both as signed deltas in
  seconds (positive: later than planned). A VM reservation is enacted by starting its VMs, which says
  nothing of its end, so its row compares the start only; when its VMs were stopped or killed while it
  was running (an early end, a cancellation, a requeue: the plan cut it at that moment) that stop is a
  second row of the same reservation comparing the end only. Shutdown, suspension, resumption and
  migration rows compare both. Live migrations also compare the pre-copy model's predicted duration and
  downtime with the measured ones (the slowest VM of the reservation for each). "enactment-failed"
  events make rows marked failed (with the errors); they are left out of the summary's deltas. A failure
  logged without its reservation is matched to the lease's last "planned" event before it (the
  reservation of the operation's kind on that host that started last at or before the failure).
* Summary: per reservation kind and overall, the number of rows, how many failed, and the mean and worst
  (largest absolute, sign kept) start and end deltas; for live migrations the same of the duration error
  (measured - predicted, s) and the downtime error (ms).
* "enactment-skipped" events that name their reservation (an operation found already done: libvirt finished
  it while no daemon ran) are rows too, outcome "found done"; others are counted. Their enacted times are the
  real ones when the daemon waited for the job to end, else unknown ("not measured", never the moment it was
  found); a live migration's measured time and downtime are libvirt's completed job statistics, when the
  destination kept them.
* "enacted" events that name no reservation (the stops of a failed start's rollback, or logs written before
  leasewise recorded plans in its events) cannot be compared: they are only counted.

Rendering: the CLI prints the tables (`orchestrator.cli.report`, with the text helpers here); `render_png`
draws planned and enacted intervals per row with matplotlib's object API (`pip install 'leasewise[plot]'`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.analysis.error_trend import Trend, error_trend
from orchestrator.analysis.fidelity import Comparison, Fidelity, fidelity
from orchestrator.analysis.host_losses import EventLike as LoggedEvent, HostLossRow, host_losses
from orchestrator.analysis.timeline import (
    KIND_COLOURS,
    KIND_ORDER,
    PlotUnavailable,
    save_png,
    style_time_axis,
)
from orchestrator.model.errors import LeasewiseError
from orchestrator.model.reservations import ReservationKind
from orchestrator.model.timeutil import UTC, iso, parse_time

if TYPE_CHECKING:  # pragma: no cover
    pass

K = ReservationKind

#: the reservation kind an operation enacts, for failures logged without their reservation
OPERATION_KIND = {
    "start": K.VM.value,
    "stop": K.SHUTDOWN.value,
    "kill": K.VM.value,
    "suspend": K.SUSPEND.value,
    "resume": K.RESUME.value,
    "move_state": K.MIGRATE.value,
    "migrate": K.LIVE_MIGRATE.value,
}
#: summary order: the kinds as the timeline lists them, then any other kind, then "all"
KIND_NAMES = tuple(k.value for k in KIND_ORDER)
ALL = "all"


class EventLike(LoggedEvent, Protocol):
    """An event of the log as the report reads it: a host loss's fields, and its id."""

    @property
    def id(self) -> int: ...


# -- the model -------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ReportRow:
    """One enacted reservation (or, for a VM reservation, the start of its VMs or their early stop)."""

    lease_id: int | None
    reservation_id: int | None
    kind: str                          # the reservation's kind: vm, shutdown, suspend, resume, migrate, live-migrate
    operation: str                     # what was done: start, stop, kill, suspend, resume, move_state, migrate
    hosts: tuple[str, ...]
    vms: tuple[str, ...]
    planned_start: datetime | None     # the reservation's plan when it was enacted
    planned_end: datetime | None
    enacted_start: datetime | None     # earliest start of its operations
    enacted_end: datetime | None       # latest end of its operations
    compares_start: bool = True
    compares_end: bool = True
    failed: bool = False
    errors: tuple[str, ...] = ()
    failed_at: datetime | None = None  # when the first failure was logged
    predicted_seconds: float | None = None      # live migrations: the pre-copy model's prediction ...
    measured_seconds: float | None = None       # ... and what libvirt measured (slowest VM of the reservation)
    predicted_downtime_ms: float | None = None
    downtime_ms: float | None = None
    network_outage_ms: float | None = None      # the longest silence of the VM's address (pinged every 10 ms)
    disk_mib: float | None = None               # block migrations: the disk copied with the VMs (all of them)
    outcome: str | None = None
    first_event: int = 0
    comparisons: tuple[Comparison, ...] = ()    # live migrations: predicted vs measured, one per VM moved

    @property
    def delta_start(self) -> float | None:
        """Enacted start - planned start, seconds (positive: late); None when not compared or unknown."""
        if not self.compares_start or self.planned_start is None or self.enacted_start is None:
            return None
        return (self.enacted_start - self.planned_start).total_seconds()

    @property
    def delta_end(self) -> float | None:
        if not self.compares_end or self.planned_end is None or self.enacted_end is None:
            return None
        return (self.enacted_end - self.planned_end).total_seconds()

    @property
    def duration_error(self) -> float | None:
        """Live migration: measured - predicted duration, seconds."""
        if self.measured_seconds is None or self.predicted_seconds is None:
            return None
        return self.measured_seconds - self.predicted_seconds

    @property
    def downtime_error(self) -> float | None:
        """Live migration: measured - predicted downtime, milliseconds."""
        if self.downtime_ms is None or self.predicted_downtime_ms is None:
            return None
        return self.downtime_ms - self.predicted_downtime_ms

    @property
    def planned_seconds(self) -> float | None:
        """The planned reservation's length, when the row compares both ends."""
        if not (self.compares_start and self.compares_end) or self.planned_start is None or self.planned_end is None:
            return None
        return (self.planned_end - self.planned_start).total_seconds()

    @property
    def enacted_seconds(self) -> float | None:
        if not (self.compares_start and self.compares_end) or self.enacted_start is None or self.enacted_end is None:
            return None
        return (self.enacted_end - self.enacted_start).total_seconds()

    @property
    def found_done(self) -> bool:
        """Found already done after a restart (its times are known only if the daemon saw its job end)."""
        return self.outcome is not None and "found done" in self.outcome

    @property
    def is_live_migration(self) -> bool:
        return self.kind == K.LIVE_MIGRATE.value

    @property
    def sort_time(self) -> datetime | None:
        """The planned instant the row is about (its start, or its end when only the end is compared)."""
        if self.compares_start and self.planned_start is not None:
            return self.planned_start
        return self.planned_end or self.planned_start or self.enacted_start or self.failed_at

    @property
    def what(self) -> str:
        """The kind, and the operation when the kind does not say it (a VM reservation's early stop or kill,
        the stops of a failed start)."""
        expected = {K.VM.value: "start", K.SHUTDOWN.value: "stop", K.SUSPEND.value: "suspend",
                    K.RESUME.value: "resume", K.MIGRATE.value: "move_state", K.LIVE_MIGRATE.value: "migrate"}
        return self.kind if expected.get(self.kind) == self.operation else f"{self.kind} {self.operation}"

    @property
    def label(self) -> str:
        lease = self.lease_id if self.lease_id is not None else "?"
        return f"lease {lease} rr {self.reservation_id or '?'} {self.what}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "lease": self.lease_id,
            "reservation": self.reservation_id,
            "kind": self.kind,
            "operation": self.operation,
            "hosts": list(self.hosts),
            "vms": list(self.vms),
            "status": "failed" if self.failed else "ok",
            "planned_start": iso(self.planned_start) if self.compares_start else None,
            "enacted_start": iso(self.enacted_start) if self.compares_start else None,
            "delta_start_s": self.delta_start,
            "planned_end": iso(self.planned_end) if self.compares_end else None,
            "enacted_end": iso(self.enacted_end) if self.compares_end else None,
            "delta_end_s": self.delta_end,
        }
        if self.failed:
            out["failed_at"] = iso(self.failed_at)
            out["errors"] = list(self.errors)
        if self.is_live_migration:
            out.update({
                "predicted_seconds": self.predicted_seconds,
                "measured_seconds": self.measured_seconds,
                "duration_error_s": self.duration_error,
                "predicted_downtime_ms": self.predicted_downtime_ms,
                "downtime_ms": self.downtime_ms,
                "downtime_error_ms": self.downtime_error,
                "network_outage_ms": self.network_outage_ms,
                "disk_mib": self.disk_mib,
                "outcome": self.outcome,
            })
        return out


@dataclass(frozen=True, slots=True)
class Stats:
    """Count, mean, mean of the absolute values and worst (largest absolute value, sign kept) of some deltas."""

    count: int = 0
    mean: float | None = None
    mean_abs: float | None = None
    worst: float | None = None

    @classmethod
    def of(cls, values: Iterable[float | None]) -> "Stats":
        xs = [float(v) for v in values if v is not None and math.isfinite(v)]
        if not xs:
            return cls()
        return cls(len(xs), math.fsum(xs) / len(xs), math.fsum(abs(x) for x in xs) / len(xs), max(xs, key=abs))

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "mean": self.mean, "mean_abs": self.mean_abs, "worst": self.worst}


@dataclass(frozen=True, slots=True)
class KindSummary:
    kind: str                          # a reservation kind, or "all"
    rows: int
    failed: int
    start: Stats                       # start deltas, s (rows that compare their start and did not fail)
    end: Stats                         # end deltas, s
    duration_error: Stats = Stats()    # live migrations: measured - predicted duration, s
    downtime_error: Stats = Stats()    # live migrations: measured - predicted downtime, ms

    def to_json(self) -> dict[str, Any]:
        out = {"rows": self.rows, "failed": self.failed, "delta_start_s": self.start.to_json(),
               "delta_end_s": self.end.to_json()}
        if self.duration_error.count or self.downtime_error.count:
            out["duration_error_s"] = self.duration_error.to_json()
            out["downtime_error_ms"] = self.downtime_error.to_json()
        return out


@dataclass
class Report:
    rows: list[ReportRow]
    summary: list[KindSummary]         # one per kind present (KIND_NAMES order), then ALL (when any row)
    unattributed: int = 0              # "enacted" events naming no reservation: not compared
    lease_id: int | None = None        # the lease the report is limited to, if any
    skipped: int = 0                   # "enactment-skipped" events (idempotent no-ops)
    host_losses: list[HostLossRow] = field(default_factory=list)   # what each lost host cost
    #: lease id -> its placement as submitted (`--where`, spread or pack, exclusive), for leases with one
    placements: dict[int, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.rows and not self.host_losses

    @property
    def failed(self) -> list[ReportRow]:
        return [row for row in self.rows if row.failed]

    @property
    def live_migrations(self) -> list[ReportRow]:
        return [row for row in self.rows if row.is_live_migration]

    @property
    def live_fidelity(self) -> Fidelity | None:
        """How the pre-copy model's predictions held for every VM the daemon migrated live (as
        `calibrate migration --validate` reports its validation grid)."""
        return fidelity(c for row in self.live_migrations for c in row.comparisons)

    @property
    def error_trend(self) -> list[Trend]:
        """Per timed kind, the prediction error of its earlier operations against its later ones."""
        return error_trend(self.rows)

    def kind(self, name: str) -> KindSummary | None:
        return next((s for s in self.summary if s.kind == name), None)

    @property
    def overall(self) -> KindSummary | None:
        return self.kind(ALL)

    def to_json(self) -> dict[str, Any]:
        return {
            "lease": self.lease_id,
            "rows": [row.to_json() for row in self.rows],
            "summary": {s.kind: s.to_json() for s in self.summary},
            "unattributed": self.unattributed,
            "skipped": self.skipped,
            "live_migration_fidelity": None if self.live_fidelity is None else self.live_fidelity.to_json(),
            "error_trend": [t.to_json() for t in self.error_trend],
            "host_losses": [row.to_json() for row in self.host_losses],
            "placements": {str(i): text for i, text in sorted(self.placements.items())},
        }


# -- building ----------------------------------------------------------------------------------------------
def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return parse_time(value)
    except (LeasewiseError, ValueError):
        return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _rid(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _operation(detail: dict[str, Any]) -> str:
    op = str(detail.get("operation") or "?")
    if detail.get("rollback"):
        return f"{op} (rollback)"
    return "kill" if detail.get("killed") and op == "stop" else op


@dataclass
class _Group:
    lease_id: int | None
    reservation_id: int | None
    kind: str
    phase: str
    first_event: int
    operations: list[str] = field(default_factory=list)
    hosts: set[str] = field(default_factory=set)
    vms: list[str] = field(default_factory=list)
    planned_start: datetime | None = None
    planned_end: datetime | None = None
    starts: list[datetime] = field(default_factory=list)
    ends: list[datetime] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    failed_at: datetime | None = None
    predicted: list[float] = field(default_factory=list)
    measured: list[float] = field(default_factory=list)
    predicted_downtime: list[float] = field(default_factory=list)
    downtime: list[float] = field(default_factory=list)
    network_outage: list[float] = field(default_factory=list)
    disk: list[float] = field(default_factory=list)
    outcomes: list[str] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)

    def add(self, event: EventLike, detail: dict[str, Any], op: str) -> None:
        if op not in self.operations:
            self.operations.append(op)
        for key in ("host", "src", "dst"):
            if isinstance(detail.get(key), str) and detail[key]:
                self.hosts.add(detail[key])
        vm = detail.get("vm")
        if isinstance(vm, str) and vm and vm not in self.vms:
            self.vms.append(vm)
        # the plan the reservation had when (last) enacted
        self.planned_start = _time(detail.get("planned_start")) or self.planned_start
        self.planned_end = _time(detail.get("planned_end")) or self.planned_end
        if event.kind == "enactment-failed":
            self.errors.append(str(detail.get("error") or "failed"))
            if self.failed_at is None:
                self.failed_at = event.time
            return
        start, end = _time(detail.get("enacted_start")), _time(detail.get("enacted_end"))
        if start is not None:
            self.starts.append(start)
        if end is not None:
            self.ends.append(end)
        for values, key in ((self.predicted, "predicted_seconds"), (self.measured, "total_seconds"),
                            (self.predicted_downtime, "predicted_downtime_ms"), (self.downtime, "downtime_ms"),
                            (self.network_outage, "network_outage_ms"), (self.disk, "disk_mib")):
            number = _number(detail.get(key))
            if number is not None:
                values.append(number)
        compared = [_number(detail.get(key)) for key in ("predicted_seconds", "total_seconds", "predicted_downtime_ms",
                                                          "downtime_ms", "max_downtime_ms")]
        known = [value for value in compared if value is not None]
        if len(known) == len(compared):
            self.comparisons.append(Comparison(*known))
        if detail.get("outcome") is not None and str(detail["outcome"]) not in self.outcomes:
            self.outcomes.append(str(detail["outcome"]))

    def row(self) -> ReportRow:
        vm_kind = self.kind == K.VM.value
        return ReportRow(
            lease_id=self.lease_id,
            reservation_id=self.reservation_id,
            kind=self.kind,
            operation="/".join(self.operations),
            hosts=tuple(sorted(self.hosts)),
            vms=tuple(self.vms),
            planned_start=self.planned_start,
            planned_end=self.planned_end,
            enacted_start=min(self.starts) if self.starts else None,
            enacted_end=max(self.ends) if self.ends else None,
            compares_start=not vm_kind or self.phase == "start",
            compares_end=not vm_kind or self.phase == "end",
            failed=bool(self.errors),
            errors=tuple(self.errors),
            failed_at=self.failed_at,
            predicted_seconds=max(self.predicted) if self.predicted else None,
            measured_seconds=max(self.measured) if self.measured else None,
            predicted_downtime_ms=max(self.predicted_downtime) if self.predicted_downtime else None,
            downtime_ms=max(self.downtime) if self.downtime else None,
            network_outage_ms=max(self.network_outage) if self.network_outage else None,
            disk_mib=math.fsum(self.disk) if self.disk else None,
            outcome="/".join(self.outcomes) or None,
            first_event=self.first_event,
            comparisons=tuple(self.comparisons),
        )


def _plan_hosts(r: dict[str, Any]) -> set[str]:
    hosts = set(r.get("resources") or {}) | {h for h in (r.get("nodes") or {}).values() if isinstance(h, str)}
    for pair in (r.get("transfers") or {}).values():
        if isinstance(pair, (list, tuple)):
            hosts.update(h for h in pair if isinstance(h, str))
    return hosts


def _from_plan(plan: list[Any], kind: str, host: Any, at: datetime) -> dict[str, Any] | None:
    """The reservation a failure logged without one most likely belongs to: in the lease's last "planned"
    event before it, the reservation of that kind on that host that started last at or before the failure."""
    best, best_start = None, None
    for r in plan:
        if not isinstance(r, dict) or r.get("kind") != kind or _rid(r.get("id")) is None:
            continue
        start = _time(r.get("start"))
        if start is None or start > at or (isinstance(host, str) and host and host not in _plan_hosts(r)):
            continue
        if best_start is None or start > best_start:
            best, best_start = r, start
    if best is None:
        return None
    return {"reservation": _rid(best.get("id")), "planned_start": best.get("start"), "planned_end": best.get("end")}


def build_rows(events: Iterable[EventLike], lease_id: int | None = None) -> tuple[list[ReportRow], int, int]:
    """(rows, unattributed, skipped) from the event log: see the module docstring."""
    groups: dict[tuple, _Group] = {}
    plans: dict[int | None, list[Any]] = {}
    unattributed = skipped = 0
    for event in events:
        if lease_id is not None and event.lease_id != lease_id:
            continue
        detail = event.detail if isinstance(event.detail, dict) else {}
        if event.kind == "planned":
            if isinstance(detail.get("reservations"), list):
                plans[event.lease_id] = detail["reservations"]
            continue
        if event.kind == "enactment-skipped":
            skipped += 1
            if _rid(detail.get("reservation")) is None:
                continue
            # found already done (libvirt finished it while no daemon watched): its times are known only
            # when the daemon waited for its job to end; libvirt's measurements of it, when it kept them
            detail = {**detail, "outcome": "found done"}
        elif event.kind not in ("enacted", "enactment-failed"):
            continue
        op = _operation(detail)
        rid = _rid(detail.get("reservation", detail.get("rr")))
        if rid is None and event.kind == "enacted":
            unattributed += 1
            continue
        if detail.get("rollback"):       # undoing a failed start: part of the VM reservation
            kind = K.VM.value
        else:
            kind = str(detail.get("reservation_kind") or OPERATION_KIND.get(op, op))
        if event.kind == "enactment-failed" and not detail.get("rollback") and (
                rid is None or detail.get("planned_start") is None):
            found = _from_plan(plans.get(event.lease_id, []), kind, detail.get("host"), event.time)
            if found is not None and (rid is None or rid == found["reservation"]):
                detail = {**found, **{k: v for k, v in detail.items() if v is not None}}
                rid = found["reservation"]
        # a VM reservation is enacted twice at most: its VMs started, and stopped early when the plan cut it
        phase = "end" if kind == K.VM.value and op in ("stop", "kill") else "start"
        key = (event.lease_id, rid, kind, phase) if rid is not None else ("failed", event.id)
        group = groups.get(key)
        if group is None:
            group = groups[key] = _Group(event.lease_id, rid, kind, phase, event.id)
        group.add(event, detail, op)
    rows = [g.row() for g in groups.values()]
    far = datetime.max.replace(tzinfo=UTC)
    rows.sort(key=lambda r: (r.sort_time or far, r.lease_id or 0, r.reservation_id or 0, r.first_event))
    return rows, unattributed, skipped


def summarize(rows: Sequence[ReportRow]) -> list[KindSummary]:
    """Per kind present (in `KIND_NAMES` order, then others by name) and overall ("all", when any row)."""
    present = {row.kind for row in rows}
    kinds = [k for k in KIND_NAMES if k in present] + sorted(present - set(KIND_NAMES))
    out = [_summary(kind, [r for r in rows if r.kind == kind]) for kind in kinds]
    if rows:
        out.append(_summary(ALL, list(rows)))
    return out


def _summary(kind: str, rows: list[ReportRow]) -> KindSummary:
    ok = [r for r in rows if not r.failed]
    return KindSummary(
        kind=kind,
        rows=len(rows),
        failed=len(rows) - len(ok),
        start=Stats.of(r.delta_start for r in ok),
        end=Stats.of(r.delta_end for r in ok),
        duration_error=Stats.of(r.duration_error for r in ok if r.is_live_migration),
        downtime_error=Stats.of(r.downtime_error for r in ok if r.is_live_migration),
    )


def build_report(events: Iterable[EventLike], lease_id: int | None = None) -> Report:
    """The plan-vs-enacted report of an event log (of one lease when `lease_id` is given)."""
    events = list(events)
    rows, unattributed, skipped = build_rows(events, lease_id)
    placements = {e.lease_id: str(e.detail["placement"]) for e in events
                  if e.kind == "submitted" and isinstance(e.detail, dict) and e.detail.get("placement")
                  and e.lease_id is not None and lease_id in (None, e.lease_id)}
    return Report(rows=rows, summary=summarize(rows), unattributed=unattributed, lease_id=lease_id,
                  skipped=skipped, host_losses=host_losses(events), placements=placements)


# -- text for people (the CLI's tables) ----------------------------------------------------------------------------------------------
def signed_seconds(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:+.2f}{unit}"


def plain_number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def clock_time(value: datetime | None, same_day: bool, unknown: str = "-") -> str:
    """A time for the table: to the second (the deltas and --json keep the fractions); month and day only
    when the report spans several days (the title says which); `unknown` for none."""
    if value is None:
        return unknown
    return value.astimezone(UTC).strftime("%H:%M:%S" if same_day else "%m-%d %H:%M:%S")


def shown_times(rows: Sequence[ReportRow]) -> list[datetime]:
    """Every time a table of `rows` shows (to say which days they span)."""
    out = []
    for r in rows:
        shown = ((r.planned_start, r.enacted_start) if r.compares_start else ()) + \
            ((r.planned_end, r.enacted_end) if r.compares_end else ()) + (r.failed_at,)
        out += [t for t in shown if t is not None]
    return out



def nothing_text(lease_id: int | None = None) -> str:
    where = f" for lease {lease_id}" if lease_id is not None else ""
    return f"Nothing enacted yet{where}: the event log has no enacted operations to compare with the plan."


# -- PNG -----------------------------------------------------------------------------------------------------
_MAX_PNG_ROWS = 300
_FAILED_COLOUR = "#c0392b"


def _colour(kind: str) -> str:
    try:
        return KIND_COLOURS[ReservationKind(kind)]
    except ValueError:
        return "#7f7f7f"


def _intervals(row: ReportRow) -> tuple[tuple[datetime, datetime] | None, tuple[datetime, datetime] | None]:
    """(planned, enacted) intervals to draw: a VM start row shows its whole planned reservation and the
    start operation; a VM stop row the instant the plan cut it and the stop operation."""
    if row.compares_start and row.compares_end:
        planned = (row.planned_start, row.planned_end) if row.planned_start and row.planned_end else None
    elif row.compares_start:
        planned = (row.planned_start, row.planned_end or row.planned_start) if row.planned_start else None
    else:
        planned = (row.planned_end, row.planned_end) if row.planned_end else None
    ends = [t for t in (row.enacted_start, row.enacted_end) if t is not None]
    enacted = (ends[0], max(ends)) if ends else None
    return planned, enacted


def render_png(report: Report, path: str | os.PathLike[str], title: str | None = None, *, dpi: int = 100) -> Path:
    """Draw planned (light) and enacted (solid) intervals, one line per row, into a PNG at `path` (written
    next to it and renamed). matplotlib's object API on the Agg canvas only: no pyplot, no backend switch."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.dates import date2num
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
    except ImportError:
        raise PlotUnavailable() from None

    path = Path(path)
    rows = report.rows[:_MAX_PNG_ROWS]
    drawn = [(row, *_intervals(row)) for row in rows]
    instants = [t for _, p, e in drawn for span in (p, e) if span for t in span]
    instants += [row.failed_at for row in rows if row.failed_at is not None]
    if not instants:
        instants = [datetime.now(UTC)]
    x0, x1 = date2num(min(instants)), date2num(max(instants))
    if x1 <= x0:
        x1 = x0 + 60 / 86400
    span = x1 - x0
    height = min(max(2.6, 1.6 + 0.3 * len(rows)), 60.0)
    fig = Figure(figsize=(12, height), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    axes_px = 12 * dpi * 0.75
    min_width = span * 3 / axes_px             # an operation of a few seconds stays visible (3 px)
    kinds: list[str] = []
    for y, (row, planned, enacted) in enumerate(drawn):
        colour = _colour(row.kind)
        if row.kind not in kinds:
            kinds.append(row.kind)
        for interval, top, style in ((planned, y + 0.08, "planned"), (enacted, y + 0.5, "enacted")):
            if interval is None:
                continue
            s, e = date2num(interval[0]), date2num(interval[1])
            if e <= s:
                ax.vlines([s], top, top + 0.42, colors=colour, linewidth=2.0,
                          linestyles="dotted" if style == "planned" else "solid")
                continue
            if style == "planned":
                ax.broken_barh([(s, max(e - s, min_width))], (top, 0.42), facecolors=colour, alpha=0.35,
                               edgecolor=colour, linewidth=0.8)
            else:
                ax.broken_barh([(s, max(e - s, min_width))], (top, 0.42), facecolors=colour, edgecolor=colour,
                               linewidth=0.4)
        if row.failed and row.failed_at is not None:
            ax.plot([date2num(row.failed_at)], [y + 0.5], marker="x", color=_FAILED_COLOUR, markersize=8,
                    markeredgewidth=2)
    ax.set_xlim(x0 - span * 0.01, x1 + span * 0.01)
    ax.set_ylim(max(len(rows), 1), 0)
    ax.set_yticks([y + 0.5 for y in range(len(rows))], [row.label for row in rows], fontsize=8)
    ax.tick_params(axis="y", length=0)
    style_time_axis(ax)

    handles: list[Patch | Line2D] = [Patch(facecolor="0.5", alpha=0.35, edgecolor="0.5", label="planned (upper)"),
                                     Patch(facecolor="0.5", edgecolor="0.5", label="enacted (lower)")]
    handles += [Patch(facecolor=_colour(k), label=k) for k in kinds]
    if report.failed:
        handles.append(Line2D([], [], color=_FAILED_COLOUR, marker="x", linestyle="", markeredgewidth=2,
                              label="failed"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 8), frameon=False)
    overall = report.overall
    default = "leasewise report · planned vs enacted"
    if report.lease_id is not None:
        default += f" · lease {report.lease_id}"
    if overall is not None and overall.start.count:
        default += f" · Δ start mean {overall.start.mean:+.2f} s, worst {overall.start.worst:+.2f} s"
    if overall is not None and overall.end.count:
        default += f" · Δ end mean {overall.end.mean:+.2f} s, worst {overall.end.worst:+.2f} s"
    if len(report.rows) > len(rows):
        default += f" · first {len(rows)} of {len(report.rows)} rows"
    ax.set_title(title or default, loc="left", fontsize=10)

    return save_png(fig, path, dpi)
