"""`leasewise plan`: the plan in the store as a per-host timeline, in the terminal and optionally as a PNG.

Read-only: the plan is read (by the server, or from the local store) and nothing is written back. Without `--from` the timeline
starts at the earliest reservation not finished yet (so a VM running since this morning shows whole) and
ends with the last reservation.
"""

# No `from __future__ import annotations`: typer reads the option types at runtime.

from datetime import datetime
from pathlib import Path

import typer

from orchestrator.analysis.timeline import (
    Timeline,
    build_timeline,
    render_png,
    render_terminal,
    require_plot,
)
from orchestrator.cli.application import app, fail
from orchestrator.cli.common import StoreOptions, now, store_options, write_png
from orchestrator.cli.output import emit_json, make_console, when
from orchestrator.model.timeutil import iso, parse_time
from orchestrator.service.backend import NoStore


def parse_when(text: str | None, option: str, current: datetime) -> datetime | None:
    """`now` or an ISO 8601 time with a timezone; errors name the option."""
    if text is None:
        return None
    if text.strip().lower() == "now":
        return current
    return parse_time(text, option)


@app.command()
@store_options()
def plan(
    opts: StoreOptions,
    from_: str | None = typer.Option(None, "--from", metavar="TIME",
                                     help="Start of the window: ISO 8601 with a timezone, or `now` "
                                          "(default: the earliest reservation not finished yet)"),
    to: str | None = typer.Option(None, "--to", metavar="TIME",
                                  help="End of the window: ISO 8601 with a timezone, or `now` "
                                       "(default: the end of the last reservation)"),
    png: Path | None = typer.Option(None, "--png", metavar="OUT",
                                    help="Also draw the timeline into this PNG (needs matplotlib, the `plot` extra)"),
    json_out: bool = typer.Option(False, "--json", help="Print the timeline as JSON"),
) -> None:
    """Show the plan as a timeline per host: VMs, suspensions, resumptions, migrations, shutdowns."""
    console = make_console(stderr=json_out)
    current = now()
    start = parse_when(from_, "--from", current)
    end = parse_when(to, "--to", current)
    if start is not None and end is not None and end <= start:
        raise fail(f"--to: {when(end)} is not after --from ({when(start)})")
    if png is not None:
        require_plot()
    try:
        with opts.backend() as backend:
            pairs, hosts, labels = backend.plan(iso(start), iso(end))
    except NoStore as missing:
        if json_out:
            emit_json({"start": iso(start), "end": iso(end), "now": iso(current), "hosts": [], "leases": []})
            return
        console.print(f"Nothing planned yet: there is no leasewise store at {missing.path}.", soft_wrap=True,
                      markup=False)
        return
    _show(build_timeline(pairs, hosts, start=start, end=end, now=current, labels=labels), start, end,
          json_out, png, console)


def _show(timeline: Timeline, start: datetime | None, end: datetime | None, json_out: bool, png: Path | None,
          console) -> None:
    if json_out:
        emit_json(_timeline_json(timeline))
    if timeline.empty:
        if not json_out:
            console.print(_nothing(start, end), soft_wrap=True, markup=False)
        return
    if not json_out:
        render_terminal(timeline, console=console)
    if png is not None:
        write_png(render_png, timeline, png, console)


def _timeline_json(timeline: Timeline) -> dict:
    """The timeline as drawn: its window, each host's reservations (a reservation on two hosts, such as a
    migration, is on both), and the leases shown."""
    return {
        "start": iso(timeline.start), "end": iso(timeline.end), "now": iso(timeline.now),
        "hosts": [{"name": row.name,
                   "reservations": [{"lease": bar.lease_id, "label": bar.label, "reservation": bar.reservation_id,
                                     "kind": bar.kind.value, "state": bar.state.value, "role": bar.role or None,
                                     "start": iso(bar.start), "end": iso(bar.end)} for bar in row.bars]}
                  for row in timeline.rows],
        "leases": [{"id": info.id, "label": info.label, "type": info.type, "state": info.state,
                    "placement": info.placement or None}
                   for info in timeline.leases.values()],
    }


def _nothing(start: datetime | None, end: datetime | None) -> str:
    if start is None and end is None:
        return "Nothing planned from now on (see the past with --from TIME)."
    window = f"from {when(start)}" if start is not None else "from now"
    if end is not None:
        window += f" to {when(end)}"
    return f"Nothing planned {window}."
