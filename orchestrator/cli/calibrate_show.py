"""`leasewise calibrate show`: the rates the planner times its overheads with, and where each comes from
(`service.rates`), read from the store on this machine, as the `calibrate` commands write it."""

from __future__ import annotations

import typer
from rich.markup import escape

from orchestrator.cli import common
from orchestrator.cli.calibrate import _refuse_server, calibrate_app
from orchestrator.cli.output import emit_json, make_console
from orchestrator.cli.tables import Column, print_table
from orchestrator.service.rates import rates_in_use


@calibrate_app.command("show")
@common.store_options()
def show_command(
    opts: common.StoreOptions,
    json_out: bool = typer.Option(False, "--json", help="Print JSON: `planner` and `learned`"),
) -> None:
    """The rates the planner times migrations, image moves, suspensions and resumptions with: configured,
    calibrated, or learned per pair of hosts or host (and from what)."""
    _refuse_server(opts.server, opts.config_file)
    shown = rates_in_use(opts.store_path, opts.config)
    planner, rows = shown["planner"], shown["learned"]
    if json_out:
        emit_json(shown)
        return
    console = make_console()
    print_table(console, [Column("kind"), Column("rate", "right"), Column("from", wraps=True)],
                [[r["kind"], f"{r['rate']:g} {r['unit']}",
                  escape(r["source"] + (f", {r['at']}" if r["at"] else "")
                         + (f" on {', '.join(r['hosts'])}" if r["hosts"] else ""))] for r in planner],
                title="the planner's rates (where nothing is learned)")
    if not rows:
        console.print("nothing learned yet: the daemon learns each pair's and host's rates from the operations "
                      "it enacts (`host check` seeds the pairs')", soft_wrap=True)
        return
    print_table(console, [Column("kind"), Column("pair or host", wraps=True), Column("MiB/s", "right"),
                          Column("samples", "right"), Column("rejected", "right"), Column("from"), Column("at")],
                [[r["kind"], escape(r["key"]), f"{r['rate_mib_s']:g}", str(r["samples"]), str(r["rejected"]),
                  escape(str(r["source"])), escape(str(r["at"] or "-"))] for r in rows],
                title="learned (used in their place for that pair or host)")
