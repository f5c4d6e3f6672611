"""`leasewise plan`: the plan in the store as a per-host timeline, in the terminal and optionally as a PNG.

Read-only: the plan is read (by the server, or from the local store) and nothing is written back. Without `--from` the timeline
starts at the earliest reservation not finished yet (so a VM running since this morning shows whole) and
ends with the last reservation.
"""

# No `from __future__ import annotations`: typer reads the option types at runtime.

from datetime import datetime, timedelta
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
from orchestrator.cli.leasefile import flag_label
from orchestrator.cli.output import emit_json, make_console, when
from orchestrator.cli.tables import Column, print_table
from orchestrator.model.errors import InvalidRequest
from orchestrator.model.quota import duration_text
from orchestrator.model.timeutil import iso, parse_time
from orchestrator.service.backend import NoStore
from orchestrator.service.models import FreeQuery, model_of


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
    free: bool = typer.Option(False, "--free", help="List the next windows in which a lease of this size would fit "
                                                    "(--nodes, --cpus, --memory, --duration) instead"),
    nodes: str | None = typer.Option(None, "--nodes", metavar="N", help="With --free: VMs (default 1)"),
    cpus: str | None = typer.Option(None, "--cpus", metavar="C", help="With --free: vCPUs per VM"),
    memory: str | None = typer.Option(None, "--memory", metavar="MIB", help="With --free: memory per VM, MiB"),
    duration: str | None = typer.Option(None, "--duration", metavar="D", help="With --free: run time (2h, 90m, ...)"),
    count: str | None = typer.Option(None, "--count", metavar="K", help="With --free: how many windows (default 5)"),
    not_before: str | None = typer.Option(None, "--not-before", metavar="ISO",
                                          help="With --free: windows starting no earlier (default now)"),
    not_after: str | None = typer.Option(None, "--not-after", metavar="ISO",
                                         help="With --free: leases ending by then"),
    where: list[str] | None = typer.Option(None, "--where", metavar="EXPR",
                                           help="With --free: only hosts whose properties meet EXPR (repeatable)"),
    spread: bool | None = typer.Option(None, "--spread", help="With --free: each VM on a different host"),
    pack: bool | None = typer.Option(None, "--pack", help="With --free: the VMs on as few hosts as possible"),
    exclusive: bool | None = typer.Option(None, "--exclusive",
                                          help="With --free: each VM a host to itself (without --cpus/--memory: "
                                               "the host's size)"),
) -> None:
    """Show the plan as a timeline per host: VMs, suspensions, resumptions, migrations, shutdowns; with --free,
    when a lease of a given size would fit (each window: its start, its latest end, its hosts)."""
    asked = {"nodes": nodes, "cpus": cpus, "memory": memory, "duration": duration, "count": count,
             "not_before": not_before, "not_after": not_after, "where": where or None, "spread": spread,
             "pack": pack, "exclusive": exclusive}
    if free:
        if from_ is not None or to is not None or png is not None:
            raise fail(f"{'--from' if from_ else '--to' if to else '--png'}: is for the timeline, not with --free "
                       "(give --not-before/--not-after)")
        _free_windows(opts, asked, json_out)
        return
    given = next((k for k, v in asked.items() if v is not None), None)
    if given is not None:
        raise fail(f"{flag_label(given)}: is for --free (when a lease of this size would fit)")
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


def _free_windows(opts: StoreOptions, asked: dict, json_out: bool) -> None:
    """`plan --free`: the windows, as a table or JSON."""
    for key in ("duration",) if asked["exclusive"] else ("cpus", "memory", "duration"):
        if asked[key] is None:
            raise fail(f"{flag_label(key)}: is required with --free")
    query = model_of(FreeQuery, asked, flag_label)
    try:
        with opts.backend() as backend:
            answer = backend.free_windows(query)
    except NoStore as missing:
        raise fail(f"--free: there are no hosts yet (no leasewise store at {missing.path})") from None
    except InvalidRequest as exc:   # (the service's check names the key: named as the option)
        if exc.field in asked or exc.field.split(".")[0].split("[")[0] == "nodes":
            raise InvalidRequest(flag_label(exc.field) if exc.field in asked else exc.field, exc.problem) from None
        raise
    if json_out:
        emit_json(answer)
        return
    console = make_console()
    size = (f"{answer['nodes']} × {answer['cpus']:g} vCPU / {answer['memory_mib']:g} MiB for "
            f"{_duration_text(answer['duration_s'])}" + (f" ({answer['placement']})" if answer.get("placement") else ""))
    if not answer["windows"]:
        until = f" ending by {when(_time(answer['not_after']))}" if answer["not_after"] else ""
        console.print(f"no window for {size}{until}", soft_wrap=True)
        return
    rows = [[str(i), when(_time(w["start"])), when(_time(w["latest_start"])) if w["latest_start"] else "any later",
             when(_time(w["latest_end"])) if w["latest_end"] else "open", ", ".join(w["hosts"])]
            for i, w in enumerate(answer["windows"], 1)]
    print_table(console, [Column("#", "right"), Column("start"), Column("latest start"), Column("latest end"),
                          Column("hosts", wraps=True)], rows, title=f"free for {size}")


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _duration_text(seconds: float) -> str:
    return duration_text(timedelta(seconds=seconds))


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
