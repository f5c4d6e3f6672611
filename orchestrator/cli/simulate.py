"""`leasewise simulate`: run a workload (LWF, SWF, gzipped or not) on the simulated clock.

Shows a progress bar while it runs and a summary table at the end; `--json` and `--csv` write the leases,
their reservations and the metrics for later analysis.
"""

# No `from __future__ import annotations`: typer reads the option types at runtime.

import csv
import io
import itertools
import json
import mmap
import tempfile
from array import array
from collections.abc import Callable, Iterator
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
from orchestrator.cli.application import app, fail
from orchestrator.runtime.lease_records import JsonRecords
from orchestrator.cli.output import make_console, write_whole
from orchestrator.cli.tables import Column, print_table
from orchestrator.config import load_config
from orchestrator.model.lease import Lease
from orchestrator.model.timeutil import iso
from orchestrator.runtime.simulator import SimulationResult, Simulator
from orchestrator.workloads import load_workload
from orchestrator.workloads.injected import inject as inject_leases


@app.command()
def simulate(
    workload: Path = typer.Argument(..., metavar="WORKLOAD", help="Workload file: Haizea LWF (.lwf/.xml) or SWF (.swf), optionally .gz"),
    config: Path | None = typer.Option(None, "--config", "-c", metavar="FILE", help="TOML configuration ([scheduling], [simulation], [workload.swf])"),
    inject: Path | None = typer.Option(None, "--inject", metavar="FILE",
                                       help="Merge these injected leases (e.g. advance reservations) into WORKLOAD"),
    json_out: Path | None = typer.Option(None, "--json", metavar="FILE", help="Write leases, reservations and metrics as JSON"),
    csv_out: Path | None = typer.Option(None, "--csv", metavar="FILE", help="Write one row per lease as CSV"),
    png: Path | None = typer.Option(None, "--png", metavar="FILE", help="Draw the plan per host as a Gantt chart (needs matplotlib)"),
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
    # (the chart needs every lease at the end; else each lease is written down as it finishes, then dropped)
    spools = _Spools(json_out is not None, csv_out is not None) if png is None else None
    retire = spools.add if spools is not None else None
    try:
        if quiet or not console.is_terminal:
            result = Simulator(loaded, cfg, retire=retire).run()
        else:
            with Progress(TextColumn("[bold]simulating"), BarColumn(), MofNCompleteColumn(),
                          TextColumn("leases arrived"), TimeElapsedColumn(), console=console,
                          transient=True) as progress:
                task = progress.add_task("simulate", total=total)
                result = Simulator(loaded, cfg, retire=retire, progress=_every_thousandth(
                    total, lambda done: progress.update(task, completed=done))).run()
        if json_out is not None:
            _write_json(json_out, spools.json_records() if spools else _records(result), result.metrics,
                        loaded.skipped)
        if csv_out is not None:
            _write_rows(csv_out, "--csv", [_csv_line(_CSV_COLUMNS)],
                        spools.csv_records() if spools else (_csv_line(_csv_row(l, result.workload_ids.get(l.id, l.id)))
                                                             for l in result.leases))
    finally:
        if spools is not None:
            spools.close()
    if png is not None:
        render_png(timeline_from_result(result), png, title=loaded.source or str(workload))
    _print_summary(result, loaded.source or str(workload), console)


def _skips(skipped: dict[str, int]) -> str:
    """Every reason on one line, so the error a script sees says why nothing was left."""
    total = sum(skipped.values())
    reasons = "; ".join(f"{count:,} {reason}" for reason, count in sorted(skipped.items()))
    return f"all {total:,} {'job was' if total == 1 else 'jobs were'} skipped ({reasons})"


def _every_thousandth(total: int, show) -> Callable[[int, int], None]:
    """A progress callback that passes on a thousandth of the way at a time (and the end): rich's bar
    redraws a few times a second, and updating it at every step of the run costs more than the step."""
    step = max(1, total // 1000)
    shown = -step

    def update(done: int, _total: int) -> None:
        nonlocal shown
        if done - shown >= step or done == total:
            shown = done
            show(done)

    return update


_CSV_COLUMNS = ["id", "type", "state", "submit", "start", "end", "run_seconds", "wait_seconds",
                "suspensions", "migrations", "requeues", "hosts", "reason"]


def _csv_row(lease: Lease, workload_id: str | int) -> list:
    wait = (lease.start_time - lease.submit_time).total_seconds() if lease.start_time else ""
    hosts = sorted({h for vm in lease.reservations for h in vm.resources})
    return [workload_id, lease.type.value, lease.state.value, iso(lease.submit_time), iso(lease.start_time),
            iso(lease.end_time), lease.accumulated.total_seconds(), wait, lease.suspensions, lease.migrations,
            lease.requeues, " ".join(hosts), lease.reason]


def _csv_line(row: list) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer).writerow(row)
    return buffer.getvalue().encode()


def _records(result: SimulationResult) -> Iterator[bytes]:
    records = JsonRecords()
    for lease in result.leases:
        yield records.record(lease, result.workload_ids.get(lease.id, str(lease.id)))


class _Spool:
    """Records added as leases finish, read back in lease id order (the order of the files a run with
    every lease kept writes): the records wait in a temporary file, two numbers a lease in memory."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile()
        self._ids = array("q")
        self._offsets = array("q")
        self._end = 0

    def add(self, lease_id: int, record: bytes) -> None:
        self._ids.append(lease_id)
        self._offsets.append(self._end)
        self._file.write(record)
        self._end += len(record)

    def records(self) -> Iterator[bytes]:
        self._file.flush()
        if not self._end:
            return
        ids, offsets = self._ids, self._offsets
        ends = offsets[1:] + array("q", [self._end])
        with mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            for i in sorted(range(len(ids)), key=ids.__getitem__):
                yield data[offsets[i]:ends[i]]

    def close(self) -> None:
        self._file.close()


class _Spools:
    """The `--json` and `--csv` records of each lease, taken as it finishes (`Simulator`'s `retire`)."""

    def __init__(self, json_wanted: bool, csv_wanted: bool) -> None:
        self._json = _Spool() if json_wanted else None
        self._csv = _Spool() if csv_wanted else None
        self._records = JsonRecords()

    def add(self, lease: Lease, workload_id: str) -> None:
        if self._json is not None:
            self._json.add(lease.id, self._records.record(lease, workload_id))
        if self._csv is not None:
            self._csv.add(lease.id, _csv_line(_csv_row(lease, workload_id)))

    def json_records(self) -> Iterator[bytes]:
        return self._json.records() if self._json is not None else iter(())

    def csv_records(self) -> Iterator[bytes]:
        return self._csv.records() if self._csv is not None else iter(())

    def close(self) -> None:
        for spool in (self._json, self._csv):
            if spool is not None:
                spool.close()


def _write_json(path: Path, records: Iterator[bytes], metrics: dict, skipped: dict[str, int]) -> None:
    """The document `{"leases": [...], "metrics": {...}, "skipped": {...}}`, one lease a line."""
    def parts() -> Iterator[bytes]:
        yield b'{"leases": ['
        sep = b"\n"
        for record in records:
            yield sep
            yield record
            sep = b",\n"
        yield b'\n],\n"metrics": ' + json.dumps(metrics, indent=1).encode()
        yield b',\n"skipped": ' + json.dumps(skipped, indent=1).encode() + b"}\n"

    _write_rows(path, "--json", [], parts())


def _write_rows(path: Path, option: str, head: list[bytes], rows) -> None:
    """Written next to `path` and renamed: never half a file; one error line naming `option` if it cannot be."""
    write_whole(path, itertools.chain(head, rows), option)


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
