"""`leasewise simulate`: run a workload (LWF, SWF, gzipped or not) on the simulated clock.

Shows a progress bar while it runs and a summary table at the end; `--json` and `--csv` write the leases,
their reservations and the metrics for later analysis.
"""

# No `from __future__ import annotations`: typer reads the option types at runtime.

import csv
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from orchestrator.analysis.timeline import (
    render_png,
    require_plot,
    timeline_from_result,
)
from orchestrator.cli.app import app, fail
from orchestrator.cli.output import make_console, write_json_file
from orchestrator.cli.tables import Column, print_table
from orchestrator.model.config import load_config
from orchestrator.model.timeutil import iso
from orchestrator.runtime.simulator import SimulationResult, Simulator
from orchestrator.workloads import load_workload
from orchestrator.workloads.injected import inject as inject_leases


@app.command()
def simulate(
    workload: Path = typer.Argument(..., help="Workload file: Haizea LWF (.lwf/.xml) or SWF (.swf), optionally .gz"),
    config: Path | None = typer.Option(None, "--config", "-c", help="TOML configuration ([scheduling], [simulation], [workload.swf])"),
    inject: Path | None = typer.Option(None, "--inject", metavar="FILE",
                                       help="Merge these injected leases (e.g. advance reservations) into WORKLOAD"),
    json_out: Path | None = typer.Option(None, "--json", help="Write leases, reservations and metrics as JSON"),
    csv_out: Path | None = typer.Option(None, "--csv", help="Write one row per lease as CSV"),
    png: Path | None = typer.Option(None, "--png", help="Draw the plan per host as a Gantt chart (needs matplotlib)"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar"),
) -> None:
    """Run WORKLOAD on the simulated clock and print a summary of what happened."""
    console = make_console()
    if not workload.exists():
        raise fail(f"workload: {workload} does not exist")
    if inject is not None and not inject.exists():
        raise fail(f"--inject: {inject} does not exist")
    if config is not None and not config.exists():
        raise fail(f"--config: {config} does not exist")
    cfg = load_config(config)
    if png is not None:
        require_plot()
    loaded = load_workload(workload, cfg)
    if inject is not None:
        loaded = inject_leases(loaded, load_workload(inject, cfg))
    total = len(loaded.requests)
    if not total and loaded.skipped:
        raise fail(f"workload: nothing left to simulate: {_skips(loaded.skipped)}")
    for reason, count in sorted(loaded.skipped.items()):
        console.print(f"skipped {count:,} {'job' if count == 1 else 'jobs'}: {reason}", soft_wrap=True)
    if quiet or not console.is_terminal:
        result = Simulator(loaded, cfg).run()
    else:
        with Progress(TextColumn("[bold]simulating"), BarColumn(), MofNCompleteColumn(), TextColumn("leases arrived"),
                      TimeElapsedColumn(), console=console, transient=True) as progress:
            task = progress.add_task("simulate", total=total)
            result = Simulator(loaded, cfg, progress=lambda done, _: progress.update(task, completed=done)).run()
    if json_out is not None:
        write_json_file(json_out, result.to_json())
    if csv_out is not None:
        _write_csv(csv_out, result)
    if png is not None:
        render_png(timeline_from_result(result), png, title=loaded.source or str(workload))
    _print_summary(result, loaded.source or str(workload), console)


def _skips(skipped: dict[str, int]) -> str:
    """Every reason on one line, so the error a script sees says why nothing was left."""
    total = sum(skipped.values())
    reasons = "; ".join(f"{count:,} {reason}" for reason, count in sorted(skipped.items()))
    return f"all {total:,} {'job was' if total == 1 else 'jobs were'} skipped ({reasons})"


def _write_csv(path: Path, result: SimulationResult) -> None:
    columns = ["id", "type", "state", "submit", "start", "end", "run_seconds", "wait_seconds",
               "suspensions", "migrations", "requeues", "hosts", "reason"]
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        for lease in result.leases:
            wait = (lease.start_time - lease.submit_time).total_seconds() if lease.start_time else ""
            hosts = sorted({h for vm in lease.reservations for h in vm.resources})
            writer.writerow([result.workload_ids.get(lease.id, lease.id), lease.type.value, lease.state.value,
                             iso(lease.submit_time), iso(lease.start_time), iso(lease.end_time),
                             lease.accumulated.total_seconds(), wait, lease.suspensions, lease.migrations,
                             lease.requeues, " ".join(hosts), lease.reason])
    tmp.replace(path)


def _print_summary(result: SimulationResult, source: str, console: Console) -> None:
    m = result.metrics
    rows = [
        ("leases done", f"{m['leases_done']}"),
        ("advance reservations accepted / rejected", f"{m['ar_accepted']} / {m['ar_rejected']}"),
        ("immediate accepted / rejected", f"{m['im_accepted']} / {m['im_rejected']}"),
        ("best-effort: all done after", f"{m['all_best_effort_seconds']:,.0f} s"),
        ("best-effort: mean wait", f"{m['be_wait_mean_seconds']:,.1f} s"),
        ("best-effort: mean bounded slowdown (10 s)", f"{m['be_bounded_slowdown_mean']:.2f}"),
        ("CPU utilization", f"{m['utilization']:.1%}"),
        ("suspensions / migrations / requeues", f"{m['suspensions']} / {m['migrations']} / {m['requeues']}"),
        ("early ends", f"{m['premature_ends']}"),
        ("simulated time", f"{m['simulated_seconds']:,.0f} s"),
        ("wall time", f"{m['wall_seconds']:.2f} s"),
    ]
    print_table(console, [Column("metric", wraps=True), Column("value", "right", wraps=True)], rows,
                title=f"{source}: {m['leases_total']} leases on {len(result.hosts)} hosts", title_justify="left")
