"""`leasewise migrate`: live-migrate one VM by hand, or (--dry-run) ask the pre-copy model what it would cost.

The dry run exists so an operator can check the scheduler's prediction against a real migration of the
same VM: same model (orchestrator.planning.precopy), same parameters.

With a server configured the server migrates the VM through its own driver, over its own hosts (so no
`--inventory`), and sends the measured report; only an admin may (see `LeaseService.migrate`: a VM moved
by hand moves behind the plan). A dry run with `--memory` and `--dirty-rate` needs nothing but the model
and answers here, server or not.
"""

# No `from __future__ import annotations`: typer reads the option types at runtime.

from pathlib import Path

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)

from drivers.base import MigrationProgress, MigrationReport
from drivers.errors import DriverError, MigrationFailed
from drivers.inventory import resolve_inventory_path
from orchestrator.cli.application import app, fail
from orchestrator.cli.common import StoreOptions, client, store_options
from orchestrator.cli.output import emit_json, make_console
from orchestrator.cli.tables import Column, print_table
from orchestrator.model.errors import LeasewiseError
from orchestrator.model.lease import MAX_DIRTY_RATE_MIB_S
from orchestrator.model.numbers import MAX_WHOLE, parse_decimal

MIB = 1024 * 1024
#: the prediction and the report: one row per quantity
VALUE_COLUMNS = (Column("", wraps=True, style="bold"), Column("value", "right", wraps=True))


#: option -> (unit, zero allowed, the largest value taken): what each number option may be
_NUMBERS = {
    "--max-downtime": ("ms", False, 3_600_000.0),
    "--timeout": ("s", False, 7 * 86400.0),
    "--bandwidth": ("MiB/s", False, 1024.0 * 1024.0),
    "--memory": ("MiB", False, float(MAX_WHOLE)),
    "--dirty-rate": ("MiB/s", True, MAX_DIRTY_RATE_MIB_S),
    "--overhead": ("s", True, 86400.0),
    "--dirty-factor": ("", True, 1000.0),
}


def _read_options(texts: dict[str, str | None], on_timeout: str) -> dict[str, float | None]:
    """Each number option's value (None when not given), or one line naming the first bad one, before
    anything is contacted."""
    values: dict[str, float | None] = {}
    for option, text in texts.items():
        unit, zero_ok, maximum = _NUMBERS[option]
        values[option] = None if text is None else parse_decimal(text, option, maximum=maximum,
                                                                   positive=not zero_ok, unit=unit)
    if on_timeout not in ("abort", "force"):
        raise fail(f"--on-timeout must be 'abort' or 'force': got {on_timeout!r}")
    return values


def _given(values: dict[str, float | None], option: str) -> float:
    """The value of an option that has a default (so always one)."""
    value = values[option]
    if value is None:
        raise fail(f"{option}: give a value")
    return value


def _libvirt_driver(inventory: Path | None):
    """The libvirt driver over the resolved inventory, or one error line saying what is missing."""
    from orchestrator.service.local import inventory_driver

    path = resolve_inventory_path(inventory)
    if path is None:
        raise fail(
            "no inventory: give --inventory FILE or set LEASEWISE_INVENTORY "
            "(the lab writes deploy/lab/run/inventory.toml)"
        )
    return inventory_driver(path)


def _dry_run(
    vm: str, to: str, inventory: Path | None, max_downtime: float, bandwidth: float | None,
    timeout: float, on_timeout: str, memory: float | None, dirty_rate: float | None,
    overhead: float, dirty_factor: float, console: Console, json_out: bool,
) -> None:
    from orchestrator.planning.precopy import predict_precopy

    if bandwidth is None:
        raise fail("--bandwidth is needed for --dry-run (the effective migration bandwidth, MiB/s)")
    if memory is None or dirty_rate is None:
        memory, dirty_rate = _read_from_vm(vm, inventory, memory, dirty_rate)
    result = predict_precopy(
        memory, bandwidth, dirty_rate, max_downtime, timeout_s=timeout, on_timeout=on_timeout,  # type: ignore[arg-type]
        overhead_s=overhead, dirty_factor=dirty_factor,
    )
    if json_out:
        emit_json({"vm": vm, "to": to, "dry_run": True, "memory_mib": memory, "dirty_rate_mib_s": dirty_rate,
                   "dirty_factor": dirty_factor, "bandwidth_mib_s": bandwidth, "max_downtime_ms": max_downtime,
                   "outcome": result.outcome, "converged": result.converged, "total_seconds": result.total_seconds,
                   "downtime_ms": result.downtime_ms, "passes": result.passes,
                   "dirty_page_rounds": result.iterations, "transferred_mib": result.transferred_mib})
        return
    rows = [
        ["memory", f"{memory:g} MiB"],
        ["dirty rate", f"{dirty_rate:g} MiB/s (x{dirty_factor:g})"],
        ["bandwidth", f"{bandwidth:g} MiB/s"],
        ["outcome", result.outcome],
        ["converged", "yes" if result.converged else "no"],
        ["total time", f"{result.total_seconds:.2f} s"],
        ["downtime", f"{result.downtime_ms:.1f} ms (max {max_downtime:g})"],
        ["passes over memory", str(result.passes)],
        ["dirty-page rounds", str(result.iterations)],
        ["transferred", f"{result.transferred_mib:.1f} MiB"],
    ]
    print_table(console, VALUE_COLUMNS, rows,
                title=f"Predicted migration of {vm} to {to} (pre-copy model, nothing touched)")


def _read_from_vm(
    vm: str, inventory: Path | None, memory: float | None, dirty_rate: float | None
) -> tuple[float, float]:
    """Fill --memory / --dirty-rate from the VM itself (read only); one line when that is not possible."""
    missing = " and ".join(o for o, v in (("--memory", memory), ("--dirty-rate", dirty_rate)) if v is None)
    if resolve_inventory_path(inventory) is None:
        raise fail(f"{missing} needed for --dry-run (no inventory to read them from the VM)")
    driver = _libvirt_driver(inventory)
    try:
        if memory is None:
            host = driver.locate(vm)
            info = next((i for i in driver.list_vms(host) if i.name == vm), None) if host else None
            if info is None:
                raise fail(f"--memory needed for --dry-run: VM {vm!r} not found on any reachable host")
            memory = float(info.memory_mib)
        if dirty_rate is None:
            dirty_rate = driver.measured_dirty_rate(vm)
            if dirty_rate is None:
                raise fail(
                    "--dirty-rate needed for --dry-run: libvirt has no measured dirty rate for "
                    f"{vm} (run `virsh domdirtyrate-calc {vm}` first, or give --dirty-rate MiB/s)"
                )
    except DriverError as exc:
        raise fail(f"{missing} needed for --dry-run (cannot read the VM: {exc})") from None
    finally:
        driver.close()
    return memory, dirty_rate


def _show_report(console: Console, report: MigrationReport, json_out: bool) -> None:
    """The measured report: a table, or (`--json`) a JSON document on stdout."""
    if json_out:
        emit_json({"vm": report.vm, "source": report.source, "destination": report.destination,
                   "success": report.success, "outcome": report.outcome, "total_seconds": report.total_seconds,
                   "downtime_ms": report.downtime_ms, "passes": report.iterations,
                   "transferred_mib": report.bytes_transferred / MIB, "memory_mib": report.memory_total / MIB,
                   "error": report.error or None})
        return
    rows = [
        ["outcome", report.outcome + ("" if report.success else " (VM stays on the source)")],
        ["total time", f"{report.total_seconds:.2f} s"],
        ["downtime", f"{report.downtime_ms:.1f} ms"],
        ["passes over memory", str(report.iterations)],
        ["transferred", f"{report.bytes_transferred / MIB:.1f} MiB of {report.memory_total / MIB:.1f} MiB"],
    ]
    if report.error:
        rows.append(["error", report.error])
    print_table(console, VALUE_COLUMNS, rows,
                title=f"Migration of {report.vm}: {report.source} -> {report.destination}")


@app.command("migrate")
@store_options("config", "server")
def migrate_command(
    opts: StoreOptions,
    vm: str = typer.Argument(..., metavar="VM", help="The VM (libvirt domain name) to move."),
    to: str = typer.Option(..., "--to", metavar="HOST", help="Destination host, as named in the inventory."),
    inventory: Path | None = typer.Option(
        None, "--inventory", metavar="FILE", help="Host inventory TOML (default: $LEASEWISE_INVENTORY, else deploy/lab/run/inventory.toml)."
    ),
    max_downtime_text: str = typer.Option("300", "--max-downtime", metavar="MS", help="Longest pause the guest may see, ms."),
    bandwidth_text: str | None = typer.Option(None, "--bandwidth", metavar="MIB_S", help="Bandwidth cap for the migration, MiB/s."),
    timeout_text: str = typer.Option("600", "--timeout", metavar="S", help="Completion timeout, s."),
    on_timeout: str = typer.Option(
        "abort", "--on-timeout", metavar="abort|force", help="abort: cancel, the VM stays on the source; force: pause the VM to finish."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only predict with the pre-copy model; changes nothing."),
    memory_text: str | None = typer.Option(None, "--memory", metavar="MIB", help="Dry run: guest memory, MiB (default: the VM's)."),
    dirty_rate_text: str | None = typer.Option(
        None, "--dirty-rate", metavar="MIB_S",
        help="Dry run: how fast the guest dirties memory, MiB/s (default: libvirt's last measurement)."
    ),
    overhead_text: str = typer.Option("0", "--overhead", metavar="S", help="Dry run: fixed setup cost per migration, s (calibrated)."),
    dirty_factor_text: str = typer.Option("1", "--dirty-factor", metavar="F", help="Dry run: calibrated dirty-rate factor."),
    json_out: bool = typer.Option(False, "--json", help="Print the report (or the prediction) as JSON; progress goes to stderr."),
) -> None:
    """Live-migrate VM to another host (pre-copy), showing progress, then the measured report."""
    values = _read_options({"--max-downtime": max_downtime_text, "--timeout": timeout_text, "--bandwidth": bandwidth_text,
                            "--memory": memory_text, "--dirty-rate": dirty_rate_text, "--overhead": overhead_text,
                            "--dirty-factor": dirty_factor_text}, on_timeout)
    max_downtime, timeout = _given(values, "--max-downtime"), _given(values, "--timeout")
    bandwidth, memory, dirty_rate = values["--bandwidth"], values["--memory"], values["--dirty-rate"]
    overhead, dirty_factor = _given(values, "--overhead"), _given(values, "--dirty-factor")
    console = make_console(stderr=json_out)
    if dry_run:
        if opts.server_url is not None and (memory is None or dirty_rate is None):
            raise fail("--memory and --dirty-rate: needed for --dry-run with a server (it reads no VM for a "
                       "prediction)")
        _dry_run(vm, to, inventory, max_downtime, bandwidth, timeout, on_timeout, memory, dirty_rate,
                 overhead, dirty_factor, console, json_out)
        return

    remote = client(opts.server, opts.config)   # (the server migrates through its own driver)
    if remote is not None:
        if inventory is not None:
            raise fail("--inventory: not with a server (the server migrates on its own hosts)")
        # (a server sends no progress: a spinner on a terminal while it works, nothing in a pipe)
        with remote, console.status(f"{vm} -> {to}: the server migrates it"):
            report, error = remote.migrate(vm, to, max_downtime, bandwidth, timeout, on_timeout)
        _show_report(console, report, json_out)
        if error is not None:
            raise fail(error)
        return
    driver = _libvirt_driver(inventory)
    try:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TextColumn("dirty {task.fields[dirty]:>7.1f} MiB/s  pass {task.fields[iteration]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        ) as bar:
            task = bar.add_task(f"{vm} -> {to}", total=100.0, dirty=0.0, iteration=0)

            def on_progress(sample: MigrationProgress) -> None:
                # Sent = total minus what is still to send; memory_processed alone passes 100% after pass 1.
                sent = 100.0 * (1 - sample.memory_remaining / sample.memory_total) if sample.memory_total else 0.0
                bar.update(task, completed=max(0.0, min(sent, 100.0)),
                           dirty=sample.dirty_rate_bytes_s / MIB, iteration=sample.iteration)

            report = driver.migrate(
                vm, to, max_downtime_ms=max_downtime, bandwidth_mib_s=bandwidth, timeout_s=timeout,
                on_timeout=on_timeout, progress=on_progress,  # type: ignore[arg-type]
            )
            bar.update(task, completed=100.0)
        _show_report(console, report, json_out)
    except MigrationFailed as exc:
        if isinstance(exc.report, MigrationReport):
            _show_report(console, exc.report, json_out)
        raise fail(str(exc)) from None
    except (DriverError, LeasewiseError, ValueError) as exc:
        raise fail(str(exc)) from None
    finally:
        driver.close()
