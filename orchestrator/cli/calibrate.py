"""`leasewise calibrate migration|suspend`: measure real operations, fit the scheduler's cost models.

`calibrate migration --host A --host B` boots one guest per grid point (memory size x dirty rate) on A,
live-migrates it between A and B (`--repeat` times, alternating direction), and fits the pre-copy model's
bandwidth, per-migration overhead, switch-over cost and dirty-rate factor to the measured total times and
downtimes (orchestrator/analysis/calibration.py). With `--validate SIZES x DIRTY` it then migrates a second
grid with the limit the planner would give the job (the maximum downtime less the fitted switch-over) and
reports how well the fit predicts runs it was not fitted to (orchestrator/analysis/fidelity.py). With
`--disk-mib` each guest also has a disk of that much data, copied by a block migration between hosts that
share no storage for VM disks (orchestrator/runtime/calibration/disks.py). `calibrate suspend --host A [...]`
saves and restores guests of each size on each host and fits the suspend and resume rates. Both print predicted vs measured, with the error of
each, then the fitted parameters, and store them in the store's meta table (key `calibration`), from
where `orchestrator.state.calibrated.apply_calibration` feeds them to the scheduler.

The driver is chosen as the other commands choose it: `--dry-run` is the simulated driver (nothing is
touched and nothing stored); `--inventory FILE` is the libvirt driver over that inventory; otherwise
`[daemon] driver`: the simulated driver over the store's hosts (the default), or libvirt over
`[daemon] inventory`, else over the store's hosts. The simulated driver is the model itself, with the
configured `[scheduling]` values as its parameters, so a calibration there must give them back.

Guests are the lab guest (deploy/guest/build): direct kernel boot of `--guest-dir`'s vmlinuz and
initrd.img, whose `dirtier` touches a working set of half the guest's memory (at most all but 80 MiB, the
guest kernel's share; guests have 128 MiB or more) and dirties `--dirty` pages/s (4 KiB pages; 256
pages/s = 1 MiB/s) in it. A guest is measured once its console says the working
set is touched (then `--settle` more seconds), and after each migration its console must go on printing:
under TCG, QEMU 7.2 loses pages dirtied from the fourth pre-copy pass on and the guest dies on the
destination, which the output says (its times are kept: the migration itself was measured). Every guest is
named `lwcal-...`, and is stopped (destroyed) whatever happens: a failure, Ctrl-C or SIGTERM mid-way leaves
none behind.

The campaign itself (the driver, the guests, the measuring) is orchestrator/runtime/calibration/; this
module parses the options, runs it, and prints and stores the fit.
"""

# No `from __future__ import annotations`: typer reads the option types at runtime.

import dataclasses
import os
import posixpath
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import overload

import typer
from rich.console import Console
from rich.markup import escape

from drivers.base import MigrationReport
from drivers.errors import DriverError, MigrationFailed
from orchestrator.analysis.calibration import (
    MigrationFit,
    RateFit,
    RateSample,
    fit_migration,
    fit_rates,
    migration_record,
    suspend_record,
)
from orchestrator.cli import common
from orchestrator.cli.application import EXIT_FAILED, command_group, fail
from orchestrator.cli.busy import call_waiting, parse_wait
from orchestrator.cli.calibrate_view import (
    FIT_COLUMNS,
    died_note,
    error_pct,
    fit_fidelity,
    json_or_none,
    mean,
    migration_fit_rows,
    migration_json,
    migration_table,
    pct,
    points_json,
)
from orchestrator.cli.output import emit_json, make_console
from orchestrator.cli.tables import Column, print_table
from orchestrator.config import Config
from orchestrator.model.errors import LeasewiseError
from orchestrator.model.numbers import parse_decimal, parse_whole
from orchestrator.planning.precopy import downtime_limit_ms
from orchestrator.runtime.calibration.campaign import (
    CalibrationStopped,
    MigrationPlan,
    MigrationRun,
    SuspendPlan,
    SuspendPoint,
    measure_migrations,
    measure_suspensions,
    migration_grid,
    store_fit,
    suspend_points,
)
from orchestrator.runtime.calibration.disks import check_block_migration
from orchestrator.runtime.calibration.guests import DEFAULT_GUEST_DIR, DEFAULT_SETTLE_S, MIN_GUEST_MIB, guest_prefix
from orchestrator.runtime.calibration.testbed import Setup, open_setup
from orchestrator.state.calibrated import (
    CALIBRATION_KEY,
    MIGRATION_SECTION,
    SUSPEND_SECTION,
    CalibrationError,
)

calibrate_app = command_group("calibrate", "Measure migrations and suspensions, fit the scheduler's cost models, store them.")

#: the longest --timeout / --settle (and --max-downtime, in ms) taken: a day
DAY_S = 86400.0
#: the largest --disk-mib: the overlay is written on this machine before it is copied to the host
MAX_DISK_MIB = 65536


# -- options -----------------------------------------------------------------------------------------------
def _int_list(option: str, text: str, *, minimum: int, what: str, maximum: int | None = None) -> list[int]:
    """Comma-separated whole numbers within [minimum, maximum], each once, in the order given."""
    items = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not t for t in items):
        raise fail(f"{option}: must be a comma-separated list of {what} (got {text!r})")
    values: list[int] = []
    for item in items:
        value = parse_whole(item, option, minimum=minimum, **({} if maximum is None else {"maximum": maximum}))
        if value in values:
            raise fail(f"{option}: {value} is given twice")
        values.append(value)
    return values


def _grid(option: str, text: str) -> tuple[list[int], list[int]]:
    """`SIZES x DIRTY` (e.g. `192,384x500,1500`): memory sizes in MiB by dirty rates in pages/s."""
    parts = text.lower().split("x")
    if len(parts) != 2:
        raise fail(f"{option}: must be SIZES x DIRTY, e.g. 192,384x500,1500 (got {text!r})")
    return (_int_list(option, parts[0], minimum=MIN_GUEST_MIB, what="memory sizes in MiB"),
            _int_list(option, parts[1], minimum=0, what="dirty rates in pages/s"))


@overload
def _number(option: str, text: str, *, zero_ok: bool, unit: str, maximum: float) -> float: ...
@overload
def _number(option: str, text: str | None, *, zero_ok: bool, unit: str, maximum: float) -> float | None: ...
def _number(option: str, text: str | None, *, zero_ok: bool, unit: str, maximum: float) -> float | None:
    if text is None:
        return None
    return parse_decimal(text, option, maximum=maximum, positive=not zero_ok, unit=unit)


def _disks(text: str | None) -> list[int] | None:
    """`--disk-mib`: MiB of data on each guest's disk, one grid axis (0: a guest without one); None: no disks."""
    if text is None:
        return None
    disks = _int_list("--disk-mib", text, minimum=0, maximum=MAX_DISK_MIB, what="disk sizes in MiB")
    if not any(disks):
        raise fail("--disk-mib: give a size above 0 (without --disk-mib no guest has a disk)")
    return disks


def _repeat(text: str) -> int:
    return parse_whole(text, "--repeat", maximum=1000)


def _hosts(option_hosts: list[str] | None, *, exactly: int | None = None) -> list[str]:
    hosts = [h.strip() for h in (option_hosts or [])]
    if any(not h for h in hosts):
        raise fail("--host: must not be empty")
    if len(set(hosts)) != len(hosts):
        raise fail(f"--host: {next(h for h in hosts if hosts.count(h) > 1)!r} is given twice")
    if exactly is not None and len(hosts) != exactly:
        raise fail(f"--host: give exactly {exactly} hosts, the source and the destination (got {len(hosts)})")
    if not hosts:
        raise fail("--host: give at least one host")
    return hosts


def _refuse_server(server: str | None, config: Path | None) -> None:
    """No server calibrates: it would boot guests of its own on the hosts its daemon enacts on, and write
    the fit into the store behind the scheduler the server keeps in memory."""
    common.refuse_server(server, common.load(config),
                         "calibrate: the server at {url} owns the hosts and the store (calibrate boots VMs of its "
                         "own and stores the fit); stop it to calibrate here, with --server '' for the local store")


# -- running the campaign ----------------------------------------------------------------------------------
def _setup(hosts: list[str], sizes: list[int], dry_run: bool, inventory: Path | None,
           state: Path | None, cfg: Config, *, local_disks: bool = False) -> Setup:
    """The driver the command runs on, after checking that it manages `hosts`."""
    return open_setup(hosts, sizes, dry_run, inventory, common.store_path(state, cfg), cfg, common.now(),
                      local_disks=local_disks)


def _measure(command: str, measure: Callable[[threading.Event], None]) -> None:
    """Run one measuring part of the campaign, which SIGTERM stops as Ctrl-C does; a failure or an
    interruption ends the command in one line (the campaign has removed its guests by then)."""
    stop = threading.Event()
    try:
        with _sigterm_stops(stop):
            measure(stop)
    except (KeyboardInterrupt, CalibrationStopped):
        raise fail("interrupted; the calibration guests were removed", code=130) from None
    except (DriverError, LeasewiseError) as exc:
        raise fail(f"{command}: {exc} (the calibration guests were removed)", code=EXIT_FAILED) from None


@contextmanager
def _sigterm_stops(stop: threading.Event) -> Iterator[None]:
    """Inside the block, SIGTERM sets `stop` and interrupts the main thread as Ctrl-C does, so that a
    migration or a console wait under way ends at once too (outside the main thread: no handler)."""
    def terminate(_signum, _frame):
        stop.set()
        raise KeyboardInterrupt("SIGTERM")

    try:
        previous = signal.signal(signal.SIGTERM, terminate)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


class _ConsoleProgress:
    """The campaign's `Progress`: a line for every run as it ends, and a warning for any guest or save
    image left behind."""

    def __init__(self, console: Console):
        self._console = console

    def migrated(self, run: MigrationRun, report: MigrationReport, survived: bool | None) -> None:
        self._console.print(f"  {_label(run)}: {report.total_seconds:.2f} s, downtime {report.downtime_ms:.1f} ms, "
                            f"{report.iterations} passes" + ("" if survived is not False else
                                                             ", [yellow]the guest died[/] (TCG, see the note)"),
                            soft_wrap=True)

    def migration_failed(self, run: MigrationRun, outcome: str, error: MigrationFailed) -> None:
        self._console.print(f"  {_label(run)}: [yellow]{escape(outcome)}[/] ({escape(str(error))})", soft_wrap=True)

    def cycled(self, point: SuspendPoint, run: int, repeat: int, suspend_s: float, resume_s: float) -> None:
        self._console.print(f"  {point.host}, {point.memory_mib} MiB, cycle {run}/{repeat}: suspend "
                            f"{suspend_s:.2f} s, resume {resume_s:.2f} s", soft_wrap=True)

    def warning(self, message: str) -> None:
        self._console.print(f"[yellow]warning:[/] {escape(message)}", soft_wrap=True)


def _label(run: MigrationRun) -> str:
    point = run.point
    disk = f", disk {point.disk_mib} MiB" if point.disk_mib else ""
    return (f"{point.memory_mib} MiB, {point.pages_per_second} pages/s{disk}, run {run.run}/{run.repeat}: "
            f"{run.source} -> {run.destination}")


def _store_result(state: Path | None, cfg: Config, section: str, record: dict, wait_s: float) -> Path:
    """Store the fit, trying again while the store is busy: only this write, never the measurements (the
    option is not named `wait`, so the app does not run the whole calibration again)."""
    path = common.store_path(state, cfg)
    call_waiting(lambda: store_fit(path, section, record), wait_s)
    return path


#: options both commands take
SizesOption = typer.Option("128,256,512", "--sizes", metavar="MIB,...", help="Guest memory sizes, MiB (128 or more).")
SettleOption = typer.Option(None, "--settle", metavar="S",
                            help=f"Wait after booting a guest before measuring, s (default {DEFAULT_SETTLE_S:g}; 0 on the simulated driver).")
GuestDirOption = typer.Option(os.environ.get("LEASEWISE_GUEST_DIR", DEFAULT_GUEST_DIR), "--guest-dir", metavar="DIR",
                              help="The lab guest's vmlinuz and initrd.img (as the hosts see them).")
InventoryOption = typer.Option(None, "--inventory", metavar="FILE", help="Host inventory TOML: use the libvirt driver on its hosts.")
DryRunOption = typer.Option(False, "--dry-run", help="Simulated driver (the model itself); stores nothing.")
NoStoreOption = typer.Option(False, "--no-store", help="Print the fit, do not store it.")
JsonOption = typer.Option(False, "--json", help="Print the measurements and the fit as JSON (progress goes to stderr).")


@calibrate_app.command("migration")
@common.store_options(rerun_when_busy=False)   # (a campaign is not run twice: it waits to store)
def migration_command(
    opts: common.StoreOptions,
    host: list[str] | None = typer.Option(None, "--host", metavar="HOST",
                                          help="Source, then destination (give it twice)."),
    sizes_text: str = SizesOption,
    dirty_text: str = typer.Option("0,1000,5000", "--dirty", metavar="PPS,...",
                                   help="Dirty rates in 4 KiB pages/s (256 pages/s = 1 MiB/s); must include 0."),
    repeat_text: str = typer.Option("1", "--repeat", metavar="N", help="Migrations per grid point (alternating A->B, B->A)."),
    max_downtime_text: str | None = typer.Option(None, "--max-downtime", metavar="MS",
                                                 help="Max downtime, ms (default: [scheduling] max_downtime_ms)."),
    timeout_text: str = typer.Option("300", "--timeout", metavar="S", help="Completion timeout of each migration, s (then aborted)."),
    disk_text: str | None = typer.Option(
        None, "--disk-mib", metavar="MIB,...",
        help="Also give each guest a disk holding this much data, MiB (a grid axis; 0: no disk), copied with it "
             "by a block migration: hosts that share no storage for VM disks."),
    validate_text: str | None = typer.Option(
        None, "--validate", metavar="SIZES x DIRTY",
        help="After the fit, migrate this grid too (e.g. 192,384x500,1500) with the limit the planner would use "
             "and report the fit's errors on it."),
    settle_text: str | None = SettleOption,
    guest_dir: str = GuestDirOption,
    inventory: Path | None = InventoryOption,
    dry_run: bool = DryRunOption,
    no_store: bool = NoStoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Migrate guests of known memory and dirty rate between two hosts and fit the pre-copy model."""
    state, config, store_wait, server = opts.state, opts.config_file, opts.wait, opts.server
    _refuse_server(server, config)
    hosts = _hosts(host, exactly=2)
    sizes = _int_list("--sizes", sizes_text, minimum=MIN_GUEST_MIB, what="memory sizes in MiB")
    if len(sizes) < 2:
        raise fail("--sizes: give at least two sizes (bandwidth and overhead are fitted to a line)")
    dirty = _int_list("--dirty", dirty_text, minimum=0, what="dirty rates in pages/s")
    if 0 not in dirty:
        raise fail("--dirty: must include 0 (idle guests give the bandwidth and the overhead)")
    disks = _disks(disk_text)
    repeat = _repeat(repeat_text)
    wait_s = parse_wait(store_wait)
    timeout = _number("--timeout", timeout_text, zero_ok=False, unit="seconds", maximum=DAY_S)
    settle = _number("--settle", settle_text, zero_ok=True, unit="seconds", maximum=DAY_S)
    validate = _grid("--validate", validate_text) if validate_text is not None else None
    cfg = common.load(config)
    max_downtime = _number("--max-downtime", max_downtime_text, zero_ok=False, unit="ms", maximum=DAY_S * 1000)
    if max_downtime is None:
        max_downtime = cfg.scheduling.max_downtime_ms
    setup = _setup(hosts, sorted({*sizes, *(validate[0] if validate else ())}), dry_run, inventory, state, cfg,
                   local_disks=disks is not None)
    a, b = hosts
    try:
        if disks is not None:
            check_block_migration(setup, a, b)
        if settle is None:
            settle = 0.0 if setup.kind == "simulated" else DEFAULT_SETTLE_S
        console = make_console(stderr=json_out)
        console.print(f"calibrating live migration {a} <-> {b} on the {setup.kind} driver: sizes "
                      f"{', '.join(map(str, sizes))} MiB x dirty {', '.join(map(str, dirty))} pages/s"
                      + (f" x disk {', '.join(map(str, disks))} MiB" if disks else "")
                      + f", {repeat} run(s) each, max downtime {max_downtime:g} ms", soft_wrap=True)
        plan = MigrationPlan(a, b, repeat, max_downtime, timeout, settle, guest_dir)
        _calibrate_migration(setup, plan, (sizes, dirty, disks), validate, cfg, state, wait_s, dry_run, no_store,
                             json_out, console)
    finally:
        setup.driver.close()


def _calibrate_migration(setup: Setup, plan: MigrationPlan, grid: tuple[list[int], list[int], list[int] | None],
                         validate: tuple[list[int], list[int]] | None, cfg: Config, state: Path | None,
                         wait_s: float, dry_run: bool, no_store: bool, json_out: bool, console: Console) -> None:
    """Measure the grid (sizes x dirty rates x disks), fit, validate, store and print: the command once its
    options are checked."""
    a, b = hosts = [plan.source, plan.destination]
    max_downtime = plan.max_downtime_ms
    prefix = guest_prefix()
    sizes, dirty, disks = grid
    points = migration_grid(sizes, dirty, disks)
    _measure("calibrate migration", lambda stop: measure_migrations(setup, plan, points, prefix,
                                                                     _ConsoleProgress(console), stop))
    samples = [s for p in points for s in p.samples]
    title = f"Live migration {a} <-> {b}: predicted vs measured ({setup.kind} driver)"
    try:
        fit = fit_migration(samples)
    except CalibrationError as exc:
        if json_out:
            emit_json(migration_json(points, None, cfg, hosts, setup.kind, max_downtime))
        else:
            migration_table(console, points, None, title)
        raise fail(f"calibrate migration: {exc}", code=EXIT_FAILED) from None
    answer = migration_json(points, fit, cfg, hosts, setup.kind, max_downtime)
    if not json_out:
        migration_table(console, points, fit, title)
        print_table(console, FIT_COLUMNS, migration_fit_rows(fit, cfg), title="Fitted pre-copy model")
        in_sample = fit_fidelity(points, fit, max_downtime)
        if in_sample is not None:
            console.print(f"in sample (the runs it was fitted to): {in_sample.sentence()}", soft_wrap=True)
        note = died_note(points)
        if note is not None:
            console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    if validate is not None:
        answer["validation"] = _validate(setup, (*validate, disks), fit, plan, f"{prefix}v", console, json_out)
    if dry_run or no_store:
        console.print("not stored (" + ("--dry-run" if dry_run else "--no-store") + ")")
    else:
        record = migration_record(fit, hosts, common.now(), setup.kind, max_downtime)
        path = _store_result(state, cfg, MIGRATION_SECTION, record, wait_s)
        answer["stored"] = {"path": str(path), "key": f"{CALIBRATION_KEY}.{MIGRATION_SECTION}"}
        console.print(f"stored in {escape(str(path))} (meta {CALIBRATION_KEY}.{MIGRATION_SECTION}): the scheduler "
                      "uses it in place of live_migration_bandwidth, live_migration_overhead, "
                      "live_migration_switchover_ms"
                      + (", live_migration_dirty_factor" if record["dirty_factor"] is not None else ""),
                      soft_wrap=True)
    if json_out:
        emit_json(answer)


def _validate(setup: Setup, grid: tuple[list[int], list[int], list[int] | None], fit: MigrationFit,
              plan: MigrationPlan, prefix: str, console: Console, json_out: bool) -> dict:
    """Migrate the validation grid with the limit the planner would give the job, print how the fit
    predicts it, and return that as JSON."""
    max_downtime = plan.max_downtime_ms
    limit = downtime_limit_ms(max_downtime, fit.switchover_ms)
    if limit is None:
        raise fail(f"--validate: the fitted switch-over ({fit.switchover_ms:.0f} ms) takes all of the "
                   f"{max_downtime:g} ms maximum downtime: no migration can keep it", code=EXIT_FAILED)
    a, b = plan.source, plan.destination
    sizes, dirty, disks = grid
    console.print(f"validating on a grid it was not fitted to: sizes {', '.join(map(str, sizes))} MiB x dirty "
                  f"{', '.join(map(str, dirty))} pages/s, job limit {limit:.0f} ms ({max_downtime:g} ms less the "
                  f"{fit.switchover_ms:.0f} ms switch-over)", soft_wrap=True)
    points = migration_grid(sizes, dirty, disks)
    at_limit = dataclasses.replace(plan, max_downtime_ms=limit)
    _measure("calibrate migration", lambda stop: measure_migrations(setup, at_limit, points, prefix,
                                                                     _ConsoleProgress(console), stop))
    summary = fit_fidelity(points, fit, max_downtime)
    if not json_out:
        migration_table(console, points, fit, f"Validation grid (not fitted to) {a} <-> {b}: predicted vs measured")
        console.print("validation: " + (summary.sentence() if summary is not None else "no run to compare"),
                      soft_wrap=True)
        note = died_note(points)
        if note is not None:
            console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    return {"downtime_limit_ms": limit, "points": points_json(points, fit), "summary": json_or_none(summary)}


# -- calibrate suspend -------------------------------------------------------------------------------------
SUSPEND_COLUMNS = (
    Column("host", "right", wraps=True), Column("size MiB", "right"), Column("runs", "right", drop=1),
    Column("suspend predicted s", "right"), Column("measured s", "right"), Column("error", "right"),
    Column("resume predicted s", "right"), Column("measured s", "right"), Column("error", "right"),
)


def _suspend_rows(points: list[SuspendPoint], suspend: RateFit | None, resume: RateFit | None) -> list[list[str]]:
    """The predicted vs measured table: one row per host and size, SUSPEND_COLUMNS."""
    rows = []
    for p in points:
        runs = str(min(len(p.suspend), len(p.resume)))
        cells = [p.host, str(p.memory_mib), runs]
        for fit, values in ((suspend, p.suspend), (resume, p.resume)):
            if not values:
                cells += ["-", "-", "-"]
                continue
            measured = mean(values)
            if fit is None:
                cells += ["-", f"{measured:.2f}", "-"]
            else:
                predicted = fit.predict(p.memory_mib)
                cells += [f"{predicted:.2f}", f"{measured:.2f}", pct(predicted, measured)]
        rows.append(cells)
    return rows


def _suspend_json(points: list[SuspendPoint], suspend: RateFit | None, resume: RateFit | None, cfg: Config,
                  hosts: list[str], driver: str) -> dict:
    """What `--json` prints: every host and size measured and predicted, the fits and the configured values."""
    out = []
    for p in points:
        point: dict = {"host": p.host, "memory_mib": p.memory_mib, "cycles": min(len(p.suspend), len(p.resume))}
        for what, fit, values in (("suspend", suspend, p.suspend), ("resume", resume, p.resume)):
            if not values:
                point[what] = None
                continue
            measured = mean(values)
            predicted = None if fit is None else fit.predict(p.memory_mib)
            point[what] = {"measured_s": measured, "predicted_s": predicted,
                           "error_pct": None if predicted is None else error_pct(predicted, measured)}
        out.append(point)
    s = cfg.scheduling
    fits = None if suspend is None or resume is None else {"suspend": dataclasses.asdict(suspend),
                                                          "resume": dataclasses.asdict(resume)}
    return {"hosts": hosts, "driver": driver, "points": out, "fit": fits,
            "configured": {"suspend_rate": s.suspend_rate, "resume_rate": s.resume_rate,
                           "enactment_overhead": s.enactment_overhead.total_seconds()},
            "stored": None}


def _rates_fit_rows(suspend: RateFit, resume: RateFit, cfg: Config) -> list[list[str]]:
    s = cfg.scheduling
    return [
        ["suspend rate MiB/s", f"{suspend.rate_mib_s:.3f}", f"{s.suspend_rate:g}", "suspend_rate"],
        ["suspend overhead s", f"{suspend.overhead_s:.3f}", f"{s.enactment_overhead.total_seconds():g}",
         "(enactment_overhead; not applied)"],
        ["resume rate MiB/s", f"{resume.rate_mib_s:.3f}", f"{s.resume_rate:g}", "resume_rate"],
        ["resume overhead s", f"{resume.overhead_s:.3f}", f"{s.enactment_overhead.total_seconds():g}",
         "(enactment_overhead; not applied)"],
        ["rms error, suspend", f"{suspend.rms_s:.3f} s", "", ""],
        ["rms error, resume", f"{resume.rms_s:.3f} s", "", ""],
        ["samples", f"{suspend.samples} + {resume.samples}", "", ""],
    ]


@calibrate_app.command("suspend")
@common.store_options(rerun_when_busy=False)   # (a campaign is not run twice: it waits to store)
def suspend_command(
    opts: common.StoreOptions,
    host: list[str] | None = typer.Option(None, "--host", metavar="HOST", help="Host to measure on (repeatable)."),
    sizes_text: str = SizesOption,
    repeat_text: str = typer.Option("1", "--repeat", metavar="N", help="Suspend/resume cycles per guest."),
    settle_text: str | None = SettleOption,
    state_dir: str | None = typer.Option(None, "--state-dir", metavar="DIR",
                                         help="Where the save images go on the hosts (default: each host's state_dir). Removed afterwards."),
    guest_dir: str = GuestDirOption,
    inventory: Path | None = InventoryOption,
    dry_run: bool = DryRunOption,
    no_store: bool = NoStoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Suspend and resume guests of each size on the hosts and fit the suspend and resume rates."""
    state, config, store_wait, server = opts.state, opts.config_file, opts.wait, opts.server
    _refuse_server(server, config)
    hosts = _hosts(host)
    sizes = _int_list("--sizes", sizes_text, minimum=MIN_GUEST_MIB, what="memory sizes in MiB")
    if len(sizes) < 2:
        raise fail("--sizes: give at least two sizes (rate and overhead are fitted to a line)")
    repeat = _repeat(repeat_text)
    wait_s = parse_wait(store_wait)
    settle = _number("--settle", settle_text, zero_ok=True, unit="seconds", maximum=DAY_S)
    if state_dir is not None and not posixpath.isabs(state_dir):
        raise fail(f"--state-dir: must be an absolute path (got {state_dir!r})")
    cfg = common.load(config)
    setup = _setup(hosts, sizes, dry_run, inventory, state, cfg)
    if settle is None:
        settle = 0.0 if setup.kind == "simulated" else DEFAULT_SETTLE_S
    console = make_console(stderr=json_out)
    console.print(f"calibrating suspend/resume on {', '.join(hosts)} on the {setup.kind} driver: sizes "
                  f"{', '.join(map(str, sizes))} MiB, {repeat} cycle(s) each", soft_wrap=True)
    plan = SuspendPlan(repeat, settle, guest_dir, state_dir, cfg.daemon.state_dir)
    points = suspend_points(hosts, sizes)
    prefix = guest_prefix()
    try:
        _measure("calibrate suspend", lambda stop: measure_suspensions(setup, plan, points, prefix,
                                                                        _ConsoleProgress(console), stop))
    finally:
        setup.driver.close()

    title = f"Suspend/resume on {', '.join(hosts)}: predicted vs measured ({setup.kind} driver)"
    try:
        suspend = fit_rates([RateSample(p.memory_mib, t) for p in points for t in p.suspend], "suspend")
        resume = fit_rates([RateSample(p.memory_mib, t) for p in points for t in p.resume], "resume")
    except CalibrationError as exc:
        if json_out:
            emit_json(_suspend_json(points, None, None, cfg, hosts, setup.kind))
        else:
            print_table(console, SUSPEND_COLUMNS, _suspend_rows(points, None, None), title=title)
        raise fail(f"calibrate suspend: {exc}", code=EXIT_FAILED) from None
    answer = _suspend_json(points, suspend, resume, cfg, hosts, setup.kind)
    if not json_out:
        print_table(console, SUSPEND_COLUMNS, _suspend_rows(points, suspend, resume), title=title)
        print_table(console, FIT_COLUMNS, _rates_fit_rows(suspend, resume, cfg),
                    title="Fitted suspend/resume model: seconds = overhead + memory / rate")
    if dry_run or no_store:
        console.print("not stored (" + ("--dry-run" if dry_run else "--no-store") + ")")
    else:
        record = suspend_record(suspend, resume, hosts, common.now(), setup.kind)
        path = _store_result(state, cfg, SUSPEND_SECTION, record, wait_s)
        answer["stored"] = {"path": str(path), "key": f"{CALIBRATION_KEY}.{SUSPEND_SECTION}"}
        console.print(f"stored in {escape(str(path))} (meta {CALIBRATION_KEY}.{SUSPEND_SECTION}): the scheduler "
                      "uses it in place of suspend_rate and resume_rate", soft_wrap=True)
    if json_out:
        emit_json(answer)
