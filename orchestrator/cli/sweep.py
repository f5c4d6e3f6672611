"""`leasewise sweep`: run a sweep file's simulations on Ray, resume a killed one, and plot its table.

`leasewise sweep SWEEP.toml ...` is `leasewise sweep run SWEEP.toml ...`; `leasewise sweep plot RESULTS ...`
draws a results table. The work is in `orchestrator.experiments`; this module checks the options, shows
progress and prints the outcome.
"""

# No `from __future__ import annotations`: typer reads the option types at runtime.

from contextlib import nullcontext
from pathlib import Path

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from orchestrator.analysis.timeline import require_plot
from orchestrator.cli.application import Group, command_group, fail
from orchestrator.cli.common import write_png
from orchestrator.cli.output import emit_json, make_console
from orchestrator.cli.tables import Column, print_table
from orchestrator.experiments.engine import RayEngine, require_ray
from orchestrator.experiments.plot import render_sweep_png, summarise
from orchestrator.experiments.results import ResultsDir, read_table
from orchestrator.experiments.spec import Run, Sweep, load_sweep
from orchestrator.experiments.sweep import SweepOutcome, run_sweep


class _RunByDefault(Group):
    """`sweep FILE ...` means `sweep run FILE ...`: anything that is not a subcommand's name is a sweep file."""

    def resolve_command(self, ctx, args):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return super().resolve_command(ctx, args)


sweep_app = command_group("sweep", "Run a sweep file's simulations on Ray (`sweep SWEEP.toml`); plot its results.",
                          cls=_RunByDefault)

#: the metrics the summary table shows (the table file and --json have them all)
_SHOWN = (("all_best_effort_seconds", "all BE\ndone s", 0), ("be_wait_mean_seconds", "BE wait\nmean s", 6),
          ("be_bounded_slowdown_mean", "BE\nslowdown", 3), ("utilization", "util.", 3),
          ("ar_rejected", "ARs\nrejected", 4), ("suspensions", "suspen-\nsions", 3), ("requeues", "re-\nqueues", 3))


@sweep_app.command("run")
def run(
    sweep_file: Path = typer.Argument(..., metavar="SWEEP.toml", help="The sweep file: workloads, settings, axes"),
    out: Path | None = typer.Option(None, "--out", "-o", metavar="DIR",
                                    help="Results folder (default: SWEEP-results in the current directory)"),
    address: str | None = typer.Option(None, "--address", metavar="ADDR",
                                       help="A running Ray cluster (e.g. ray://head:10001); default: a local Ray of its own"),
    workers: int | None = typer.Option(None, "--workers", "-w", metavar="N",
                                       help="Runs at once (default: every CPU of the local machine or the cluster)"),
    resume: bool = typer.Option(False, "--resume", help="Finish the sweep in --out: skip the runs it finished"),
    leases: bool = typer.Option(False, "--leases", help="Also write each run's leases (simulate --json) to DIR/leases/"),
    dashboard: bool = typer.Option(False, "--dashboard", help="Start Ray's dashboard with the local Ray (prints its address)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check the sweep file and list its runs; run nothing"),
    json_out: bool = typer.Option(False, "--json", help="Print the outcome (or --dry-run's runs) as JSON"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress"),
) -> None:
    """Run every combination of a sweep file's workloads and axes, as Ray tasks, into one results table."""
    if not sweep_file.is_file():
        raise fail(f"SWEEP.toml: {sweep_file} does not exist" if not sweep_file.exists()
                   else f"SWEEP.toml: {sweep_file} is not a file")
    if workers is not None and workers < 1:
        raise fail(f"--workers: must be at least 1 (got {workers})")
    sweep = load_sweep(sweep_file)
    results = ResultsDir(out if out is not None else Path(f"{sweep_file.stem}-results"))
    results.check(resume)
    if dry_run:
        _print_runs(sweep, json_out)
        return
    require_ray()
    info = make_console(stderr=True)
    progress = None
    if not quiet and info.is_terminal:
        progress = Progress(TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(), TextColumn("runs"),
                            TimeElapsedColumn(), TimeRemainingColumn(), console=info, transient=True)

    def on_start(engine) -> None:
        if engine.dashboard_url and not quiet:
            (progress.console if progress else info).print(f"Ray dashboard: http://{engine.dashboard_url}",
                                                           markup=False, soft_wrap=True)

    with progress or nullcontext():
        bar = progress.add_task("sweep", total=len(sweep.runs), completed=len(results.finished())) if progress else None

        def on_run(run: Run, done: int, total: int, seconds: float, error: str | None) -> None:
            what = f"failed: {error}" if error else f"done in {seconds:.1f} s"
            if progress is not None and bar is not None:
                progress.update(bar, completed=done)
                if error:
                    progress.console.print(f"run {run.id} {_describe(run)} {what}", markup=False, soft_wrap=True)
            elif not quiet:
                info.print(f"[{done}/{total}] run {run.id} {_describe(run)} {what}", markup=False, soft_wrap=True)

        outcome = run_sweep(sweep, results, lambda: RayEngine(workers=workers, address=address, dashboard=dashboard),
                            with_leases=leases, on_start=on_start, on_run=on_run)
    _report(sweep, outcome, results, json_out)
    if outcome.failed:
        run_, error = outcome.failed[0]
        raise fail(f"{len(outcome.failed)} of {outcome.total} runs failed (the first: run {run_.id}, "
                   f"{_describe(run_)}: {error}); --resume runs them again", code=1)


def _describe(run: Run) -> str:
    parts = [Path(run.workload.name).name] + ([f"+ {Path(run.inject.name).name}"] if run.inject else [])
    parts += [f"{key}={value}" for key, value in run.settings]
    return " ".join(parts)


def _print_runs(sweep: Sweep, json_out: bool) -> None:
    if json_out:
        emit_json({"sweep": str(sweep.path), "columns": sweep.columns, "runs": [run.row() for run in sweep.runs]})
        return
    rows = [_run_cells(sweep, run.row()) for run in sweep.runs]
    print_table(make_console(), _run_columns(sweep), rows, title=f"{sweep.path}: {len(sweep.runs)} runs",
                title_justify="left")


def _run_columns(sweep: Sweep) -> list[Column]:
    """What tells the runs apart; the file names give way first (the fields and axes say the same, shorter)."""
    columns = [Column("run"), Column("workload", drop=1)]
    if any(run.inject for run in sweep.runs):
        columns.append(Column("inject", drop=2 if sweep.field_names else 5))
    return columns + [Column(name) for name in sweep.columns[3:]]


def _run_cells(sweep: Sweep, row: dict) -> list[str]:
    cells = [row["run"], Path(row["workload"]).name]
    if any(run.inject for run in sweep.runs):
        cells.append(Path(row["inject"]).name)
    return [escape(cell) for cell in cells + [_text(row.get(name)) for name in sweep.columns[3:]]]


def _text(value) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return "" if value is None else str(value)


def _report(sweep: Sweep, outcome: SweepOutcome, results: ResultsDir, json_out: bool) -> None:
    if json_out:
        emit_json({"out": str(results.path), "table": str(outcome.table), "runs": outcome.total,
                   "finished_before": outcome.before, "ran": outcome.ran,
                   "failed": [{"run": run.id, "error": error} for run, error in outcome.failed],
                   "rows": outcome.rows})
        return
    columns = _run_columns(sweep) + [Column(header, "right", drop=drop) for _, header, drop in _SHOWN]
    rows = [_run_cells(sweep, row) + [_metric(key, row.get(key)) for key, _, _ in _SHOWN] for row in outcome.rows]
    title = (f"{outcome.table}: {outcome.total} runs ({outcome.ran} run now, {outcome.before} before"
             + (f", {len(outcome.failed)} failed" if outcome.failed else "") + ")")
    print_table(make_console(), columns, rows, title=title, title_justify="left")


def _metric(key: str, value) -> str:
    if value is None:
        return ""
    if key == "utilization":
        return f"{value:.1%}"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"
    return str(value)


@sweep_app.command("plot")
def plot(
    results: Path = typer.Argument(..., metavar="RESULTS", help="A sweep's results.csv (or its folder)"),
    x: str = typer.Option(..., "--x", metavar="KEY", help="The column along the x axis (an axis or a field)"),
    y: str = typer.Option(..., "--y", metavar="METRIC", help="The metric along the y axis"),
    hue: str | None = typer.Option(None, "--hue", metavar="KEY", help="One line per value of this column"),
    png: Path = typer.Option(..., "--png", metavar="OUT", help="The PNG to write"),
    title: str | None = typer.Option(None, "--title", metavar="TEXT", help="The plot's title"),
    x_label: str | None = typer.Option(None, "--x-label", metavar="TEXT",
                                       help="What the x axis shows, in words (default: KEY's label, or KEY)"),
    y_label: str | None = typer.Option(None, "--y-label", metavar="TEXT",
                                       help="What the y axis shows, in words (default: METRIC's label, with its unit)"),
) -> None:
    """Draw METRIC against KEY from a sweep's table (one line per --hue value; runs that share a point are
    averaged, with their range as a band)."""
    require_plot()
    table = results / "results.csv" if results.is_dir() else results
    if not table.exists():
        raise fail(f"RESULTS: {table} does not exist")
    columns, rows = read_table(table)
    lines = summarise(columns, rows, x, y, hue)
    console = make_console(stderr=False)
    write_png(lambda what, path: render_sweep_png(what, x, y, hue, path, title, x_label=x_label, y_label=y_label),
              lines, png, console)

