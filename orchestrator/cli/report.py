"""`leasewise report`: planned and enacted times of every reservation side by side, from the event log.

Read-only: the event log is read in one snapshot (by the server, or from the local store), nothing written
back. The computation is `orchestrator.analysis.report.build_report` (events in, rows and summary out); this
module only checks the options, asks the backend for the events and prints or writes the result.
"""

# No `from __future__ import annotations`: typer reads the option types at runtime.

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from orchestrator.analysis.host_losses import HostLossRow
from orchestrator.analysis.report import (
    ALL,
    Report,
    build_report,
    clock_time,
    nothing_text,
    plain_number,
    render_png,
    shown_times,
    signed_seconds,
)
from orchestrator.analysis.timeline import require_plot
from orchestrator.cli.application import app, fail
from orchestrator.cli.common import StoreOptions, parse_lease_id, store_options, write_png
from orchestrator.cli.output import make_console, write_json_file
from orchestrator.cli.tables import Column, print_table
from orchestrator.model.errors import LeasewiseError
from orchestrator.model.reservations import ReservationKind
from orchestrator.model.timeutil import UTC, iso
from orchestrator.service.backend import NoStore


@app.command()
@store_options()
def report(
    opts: StoreOptions,
    lease: str | None = typer.Option(None, "--lease", metavar="ID", help="Only this lease"),
    png: Path | None = typer.Option(None, "--png", metavar="OUT",
                                    help="Also draw planned vs enacted intervals into this PNG "
                                         "(needs matplotlib, the `plot` extra)"),
    json_out: Path | None = typer.Option(None, "--json", metavar="OUT",
                                         help="Also write the rows and summary as JSON"),
) -> None:
    """Plan vs reality: planned and enacted start and end of every enacted reservation, with the delta per
    reservation and its mean and worst per kind, from the event log."""
    lease_id = parse_lease_id(lease, "--lease") if lease is not None else None
    if png is not None:
        require_plot()
    console = make_console()
    try:
        with opts.backend() as backend:
            events = backend.events(lease_id)
    except NoStore as missing:
        if lease_id is not None:
            raise fail(f"--lease: no lease with id {lease_id} (there is no leasewise store at {missing.path})") from None
        console.print(f"Nothing enacted yet: there is no leasewise store at {missing.path}.", soft_wrap=True,
                      markup=False)
        return
    except LeasewiseError as exc:
        if lease_id is not None and str(exc) == f"lease: no lease with id {lease_id}":
            raise fail(f"--lease: no lease with id {lease_id}") from None
        raise
    _show(build_report(events, lease_id), lease_id, json_out, png, console)


def _show(result: Report, lease_id: int | None, json_out: Path | None, png: Path | None, console: Console) -> None:
    if json_out is not None:
        write_json_file(json_out, result.to_json())
    if result.empty:
        console.print(nothing_text(lease_id), soft_wrap=True, markup=False)
        if png is not None:
            console.print(f"no PNG written to {png}: nothing to draw", soft_wrap=True, markup=False)
        return
    if result.rows:
        print_report(result, console)
    for lease, placement in sorted(result.placements.items()):
        console.print(f"lease {lease} placed by: {escape(placement)}", soft_wrap=True)
    print_host_losses(result.host_losses, console)
    if png is not None:
        write_png(render_png, result, png, console)
    if json_out is not None:
        console.print(f"wrote {json_out}", markup=False)


def print_host_losses(losses: list[HostLossRow], console: Console) -> None:
    """What each host the daemon gave up cost: the leases requeued, failed or re-planned, the work lost."""
    if not losses:
        return
    columns = [Column("host"), Column("silent since"), Column("lost at"), Column("back at"),
               Column("requeued", "right"), Column("failed", "right"), Column("re-planned", "right", drop=1),
               Column("work lost", "right")]
    cells = [[escape(r.host), iso(r.silent_since) or "-", iso(r.lost_at), iso(r.back_at) or "not yet",
              str(r.count("requeued")), str(r.count("failed")), str(r.count("re-planned")),
              f"{r.lost_work_s / 60:.1f} min"] for r in losses]
    print_table(console, columns, cells, title_justify="left",
                title="hosts lost (given up after [daemon] host_timeout): what it cost")


def print_report(report: Report, console: Console) -> None:
    """The rows side by side, the live migrations (predicted vs measured), the summary, the failures: tables
    that fit the terminal (orchestrator.cli.tables), times and deltas never cut."""
    days = {t.astimezone(UTC).date() for t in shown_times(report.rows)}
    same_day = len(days) <= 1
    if not days:
        day = ""
    elif same_day:
        day = f" on {min(days).isoformat()}"
    else:
        day = f", {min(days).isoformat()} to {max(days).isoformat()}"
    leases = {r.lease_id for r in report.rows}
    scope = f"lease {report.lease_id}" if report.lease_id is not None else \
        f"{len(leases)} lease{'s' * (len(leases) != 1)}"
    n = len(report.rows)
    failures = bool(report.failed)
    columns = [Column("lease", "right"), Column("rr", "right"), Column("kind", wraps=True),
               Column("hosts", wraps=True, drop=3), Column("planned\nstart", drop=2), Column("enacted\nstart"),
               Column("Δ\nstart", "right"), Column("planned\nend", drop=2), Column("enacted\nend", drop=1),
               Column("Δ\nend", "right")] + ([Column("status")] if failures else [])
    cells = []
    for r in report.rows:
        s, e = r.compares_start, r.compares_end
        unknown = "not measured" if r.found_done else "-"
        cells.append([
            str(r.lease_id) if r.lease_id is not None else "-", str(r.reservation_id or "-"), escape(r.what),
            escape(", ".join(r.hosts)),
            clock_time(r.planned_start, same_day) if s else "-",
            clock_time(r.enacted_start, same_day, unknown) if s else "-", signed_seconds(r.delta_start),
            clock_time(r.planned_end, same_day) if e else "-", clock_time(r.enacted_end, same_day, unknown) if e else "-",
            signed_seconds(r.delta_end),
            *(["[bold red]failed[/]" if r.failed else "[green]ok[/]"] if failures else []),
        ])
    print_table(console, columns, cells, title_justify="left",
                title=f"plan vs enacted: {n} reservation{'s' * (n != 1)} of {scope} (times UTC{day}, Δ in s)")

    live = report.live_migrations
    if live:
        columns = [Column("lease", "right"), Column("rr", "right"), Column("vms", "right", drop=2),
                   Column("hosts", wraps=True, drop=3), Column("predicted\ns", "right"),
                   Column("measured\ns", "right"), Column("error\ns", "right", drop=1),
                   Column("predicted\ndowntime ms", "right"), Column("downtime\nms", "right"),
                   Column("error\nms", "right", drop=1), Column("network\noutage ms", "right", drop=2),
                   Column("disk\nMiB", "right", drop=2), Column("outcome", wraps=True)]
        cells = [[str(r.lease_id), str(r.reservation_id or "-"), str(len(r.vms)), escape(", ".join(r.hosts)),
                  plain_number(r.predicted_seconds),
                  "not measured" if r.found_done and r.measured_seconds is None else plain_number(r.measured_seconds),
                  signed_seconds(r.duration_error),
                  plain_number(r.predicted_downtime_ms, 1), plain_number(r.downtime_ms, 1),
                  signed_seconds(r.downtime_error), plain_number(r.network_outage_ms, 1),
                  plain_number(r.disk_mib, 1) if r.disk_mib else "-", escape(r.outcome or ("failed" if r.failed else "-"))]
                 for r in live]
        print_table(console, columns, cells, title_justify="left",
                    title="live migrations: predicted vs measured (slowest VM of each)")

    columns = [Column("kind", wraps=True), Column("count", "right"), Column("failed", "right"),
               Column("Δ start mean", "right", drop=2), Column("Δ start worst", "right"),
               Column("Δ end mean", "right", drop=1), Column("Δ end worst", "right")]
    cells = [[f"[bold]{s.kind}[/]" if s.kind == ALL else s.kind, str(s.rows), str(s.failed) if s.failed else "-",
              signed_seconds(s.start.mean), signed_seconds(s.start.worst),
              signed_seconds(s.end.mean), signed_seconds(s.end.worst)]
             for s in report.summary]
    print_table(console, columns, cells, title_justify="left",
                title="summary (Δ in s; worst = largest absolute; failed rows not in the deltas)")
    live_summary = report.kind(ReservationKind.LIVE_MIGRATE.value)
    if live_summary is not None and (live_summary.duration_error.count or live_summary.downtime_error.count):
        d, m = live_summary.duration_error, live_summary.downtime_error
        console.print(f"live migrations (predicted vs measured): duration error mean {signed_seconds(d.mean, ' s')}, "
                      f"worst {signed_seconds(d.worst, ' s')}; downtime error mean {signed_seconds(m.mean, ' ms')}, "
                      f"worst {signed_seconds(m.worst, ' ms')}", soft_wrap=True)
    live_fidelity = report.live_fidelity
    if live_fidelity is not None:
        console.print(f"live migrations, model fidelity: {live_fidelity.sentence()}", soft_wrap=True)

    trend = report.error_trend
    if trend:
        columns = [Column("kind"), Column("operations", "right"), Column("earlier half", "right"),
                   Column("later half", "right")]
        cells = [[t.kind, str(t.operations), f"{t.earlier_pct:.1f}%", f"{t.later_pct:.1f}%"] for t in trend]
        print_table(console, columns, cells, title_justify="left",
                    title="prediction error as operations accumulate (median |measured - predicted| / measured; "
                          "the daemon learns its rates from each)")

    for r in report.failed:
        where = f"lease {r.lease_id}" + (f" rr {r.reservation_id}" if r.reservation_id else "")
        console.print(f"[bold red]failed[/] {where} ({escape(r.what)}) at "
                      f"{clock_time(r.failed_at, same_day)}: {escape('; '.join(r.errors))}", soft_wrap=True)
    if report.unattributed:
        n = report.unattributed
        console.print(f"{n} enacted operation{'s' * (n != 1)} name{'s' * (n == 1)} no reservation (the stops of a "
                      "failed start, or logged by an older leasewise): not compared", soft_wrap=True)
