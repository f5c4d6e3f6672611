"""`leasewise report`: planned and enacted times of every reservation side by side, from the event log.

Read-only: one read transaction on the store, nothing written back. The computation is
`orchestrator.analysis.report.build_report` (events in, rows and summary out); this module only reads the store,
checks the options and prints or writes the result.
"""

# No `from __future__ import annotations`: typer reads the option types at runtime.

from pathlib import Path

import typer

from orchestrator.analysis.report import (
    build_report,
    nothing_text,
    render_png,
    render_terminal,
)
from orchestrator.analysis.timeline import require_plot
from orchestrator.cli.app import app, fail
from orchestrator.cli.common import (
    ConfigOption,
    StateOption,
    load,
    open_store,
    store_path,
    write_png,
)
from orchestrator.cli.output import make_console, write_json_file
from orchestrator.state.store import StoreError


def _lease_number(text: str) -> int:
    value = text.strip()
    if not value.isdigit() or int(value) <= 0:
        raise fail(f"--lease: {text!r} is not a lease id (a positive whole number)")
    return int(value)


@app.command()
def report(
    lease: str | None = typer.Option(None, "--lease", metavar="ID", help="Only this lease"),
    png: Path | None = typer.Option(None, "--png", metavar="OUT",
                                    help="Also draw planned vs enacted intervals into this PNG "
                                         "(needs matplotlib, the `plot` extra)"),
    json_out: Path | None = typer.Option(None, "--json", metavar="OUT",
                                         help="Also write the rows and summary as JSON"),
    state: Path | None = StateOption,
    config: Path | None = ConfigOption,
) -> None:
    """Plan vs reality: planned and enacted start and end of every enacted reservation, with the delta per
    reservation and its mean and worst per kind, from the event log."""
    lease_id = _lease_number(lease) if lease is not None else None
    if png is not None:
        require_plot()
    cfg = load(config)
    path = store_path(state, cfg)
    console = make_console()
    if not path.exists():
        if state is not None:
            raise fail(f"--state: {path} does not exist")
        if lease_id is not None:
            raise fail(f"--lease: no lease with id {lease_id} (there is no leasewise store at {path})")
        console.print(f"Nothing enacted yet: there is no leasewise store at {path}.", soft_wrap=True, markup=False)
        return
    with open_store(state, cfg) as store, store.snapshot():
        if lease_id is not None:
            try:
                store.lease(lease_id)
            except StoreError as exc:
                if str(exc) != f"no lease with id {lease_id}":
                    raise
                raise fail(f"--lease: no lease with id {lease_id}") from None
        events = store.events(lease_id=lease_id)
    result = build_report(events, lease_id)
    if json_out is not None:
        write_json_file(json_out, result.to_json())
    if result.empty:
        console.print(nothing_text(lease_id), soft_wrap=True, markup=False)
        if png is not None:
            console.print(f"no PNG written to {png}: nothing to draw", soft_wrap=True, markup=False)
        return
    render_terminal(result, console=console)
    if png is not None:
        write_png(render_png, result, png, console)
    if json_out is not None:
        console.print(f"wrote {json_out}", markup=False)
