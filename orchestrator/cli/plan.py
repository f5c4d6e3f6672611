"""`leasewise plan`: the plan in the store as a per-host timeline, in the terminal and optionally as a PNG.

Read-only: the cluster is rebuilt from the store and nothing is written back. Without `--from` the timeline
starts at the earliest reservation not finished yet (so a VM running since this morning shows whole) and
ends with the last reservation.
"""

# No `from __future__ import annotations`: typer reads the option types at runtime.

from datetime import datetime
from pathlib import Path

import typer

from orchestrator.analysis.timeline import (
    build_timeline,
    render_png,
    render_terminal,
    require_plot,
)
from orchestrator.cli.app import app, fail
from orchestrator.cli.common import (
    ConfigOption,
    StateOption,
    load,
    now,
    open_cluster,
    store_path,
    write_png,
)
from orchestrator.cli.output import make_console, when
from orchestrator.model.timeutil import parse_time


def parse_when(text: str | None, option: str, current: datetime) -> datetime | None:
    """`now` or an ISO 8601 time with a timezone; errors name the option."""
    if text is None:
        return None
    if text.strip().lower() == "now":
        return current
    return parse_time(text, option)


@app.command()
def plan(
    from_: str | None = typer.Option(None, "--from", metavar="TIME",
                                     help="Start of the window: ISO 8601 with a timezone, or `now` "
                                          "(default: the earliest reservation not finished yet)"),
    to: str | None = typer.Option(None, "--to", metavar="TIME",
                                  help="End of the window: ISO 8601 with a timezone, or `now` "
                                       "(default: the end of the last reservation)"),
    png: Path | None = typer.Option(None, "--png", metavar="OUT",
                                    help="Also draw the timeline into this PNG (needs matplotlib, the `plot` extra)"),
    state: Path | None = StateOption,
    config: Path | None = ConfigOption,
) -> None:
    """Show the plan as a timeline per host: VMs, suspensions, resumptions, migrations, shutdowns."""
    console = make_console()
    current = now()
    start = parse_when(from_, "--from", current)
    end = parse_when(to, "--to", current)
    if start is not None and end is not None and end <= start:
        raise fail(f"--to: {when(end)} is not after --from ({when(start)})")
    if png is not None:
        require_plot()
    cfg = load(config)
    path = store_path(state, cfg)
    if not path.exists():
        if state is not None:
            raise fail(f"--state: {path} does not exist")
        console.print(f"Nothing planned yet: there is no leasewise store at {path}.", soft_wrap=True, markup=False)
        return
    with open_cluster(state, cfg, write=False) as cluster:
        pairs = cluster.plan(start, end)
        hosts = list(cluster.hosts)
        labels = {lease.id: cluster.workload_id(lease) or str(lease.id) for lease, _ in pairs}
    timeline = build_timeline(pairs, hosts, start=start, end=end, now=current, labels=labels)
    if timeline.empty:
        console.print(_nothing(start, end), soft_wrap=True, markup=False)
        return
    render_terminal(timeline, console=console)
    if png is not None:
        write_png(render_png, timeline, png, console)


def _nothing(start: datetime | None, end: datetime | None) -> str:
    if start is None and end is None:
        return "Nothing planned from now on (see the past with --from TIME)."
    window = f"from {when(start)}" if start is not None else "from now"
    if end is not None:
        window += f" to {when(end)}"
    return f"Nothing planned {window}."
