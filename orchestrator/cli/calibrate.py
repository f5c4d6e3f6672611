"""`leasewise calibrate migration|suspend`: measure real operations, fit the scheduler's cost models.

`calibrate migration --host A --host B` boots one guest per grid point (memory size x dirty rate) on A,
live-migrates it between A and B (`--repeat` times, alternating direction), and fits the pre-copy model's
bandwidth, per-migration overhead, switch-over cost and dirty-rate factor to the measured total times and
downtimes (orchestrator/analysis/calibration.py). With `--validate SIZES x DIRTY` it then migrates a second
grid with the limit the planner would give the job (the maximum downtime less the fitted switch-over) and
reports how well the fit predicts runs it was not fitted to (orchestrator/analysis/fidelity.py). `calibrate suspend --host A [...]` saves and restores guests of each size
on each host and fits the suspend and resume rates. Both print predicted vs measured, with the error of
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
named `lwcal-...`, and is stopped (destroyed) whatever happens: a failure or Ctrl-C mid-way leaves none
behind.
"""

# No `from __future__ import annotations`: typer reads the option types at runtime.

import dataclasses
import os
import posixpath
import re
import signal
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from drivers.base import Driver, VMSpec
from drivers.clock import RealClock, SimulatedClock
from drivers.errors import DriverError, MigrationFailed
from orchestrator.analysis.calibration import (
    MAX_DIRTY_FACTOR,
    MigrationFit,
    MigrationSample,
    RateFit,
    RateSample,
    fit_migration,
    fit_rates,
    migration_record,
    pages_to_mib_s,
    suspend_record,
)
from orchestrator.analysis.fidelity import Comparison, Fidelity, fidelity
from orchestrator.cli import common
from orchestrator.cli.application import EXIT_FAILED, command_group, fail
from orchestrator.cli.busy import call_waiting, parse_wait
from orchestrator.cli.output import emit_json, make_console
from orchestrator.cli.tables import Column, print_table
from orchestrator.config import Config
from orchestrator.model.errors import LeasewiseError
from orchestrator.model.numbers import parse_decimal, parse_whole
from orchestrator.planning.precopy import downtime_limit_ms
from orchestrator.runtime.driver_factory import make_driver, simulated_config
from orchestrator.state.calibrated import (
    CALIBRATION_KEY,
    MIGRATION_SECTION,
    SUSPEND_SECTION,
    CalibrationError,
    store_calibration,
)
from orchestrator.state.store import Store

calibrate_app = command_group("calibrate", "Measure migrations and suspensions, fit the scheduler's cost models, store them.")

DEFAULT_GUEST_DIR = "/var/lib/libvirt/images/leasewise-guest"
VM_PREFIX = "lwcal-"
#: seconds a guest gets, once its console says its working set is touched, before it is measured
DEFAULT_SETTLE_S = 2.0
#: the lab guest's dirtier: "ready" once its working set is touched, then a status line every second
READY_LINE = r"dirtier: (ready|t=)"
ALIVE_LINE = r"dirtier: t="
#: the guest kernel's word that its OOM killer ended the dirtier: the guest is too small for its working set
DIRTIER_KILLED_LINE = r"Killed process [0-9]+ \(dirtier\)"
#: what the lab guest's own kernel and init keep out of its memory (Debian 12's cloud kernel leaves about
#: 66 MiB of a 128 MiB guest free): the dirtier's working set stays clear of it
GUEST_SYSTEM_MIB = 80
#: the smallest guest measured: the working set then still has 48 MiB
MIN_GUEST_MIB = 128
#: how long a guest may take to boot and touch its working set (TCG on a loaded host), and to show that it
#: still runs after a migration
READY_TIMEOUT_S = 300.0
ALIVE_TIMEOUT_S = 10.0
#: capacity of hosts that a dry run names but the store does not know
DRY_RUN_CAPACITY = (1024, 1 << 30)
#: the longest --timeout / --settle (and --max-downtime, in ms) taken: a day
DAY_S = 86400.0


# -- options -----------------------------------------------------------------------------------------------
def _int_list(option: str, text: str, *, minimum: int, what: str) -> list[int]:
    """Comma-separated whole numbers >= minimum, each once, in the order given."""
    items = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not t for t in items):
        raise fail(f"{option}: must be a comma-separated list of {what} (got {text!r})")
    values: list[int] = []
    for item in items:
        value = parse_whole(item, option, minimum=minimum)
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


def _number(option: str, text: str | None, *, zero_ok: bool, unit: str, maximum: float) -> float | None:
    if text is None:
        return None
    return parse_decimal(text, option, maximum=maximum, positive=not zero_ok, unit=unit)


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


# -- the driver --------------------------------------------------------------------------------------------
@dataclass
class Setup:
    driver: Driver
    kind: str                                   # "simulated" | "libvirt"
    sleep: Callable[[float], None]              # waits on the driver's clock
    host_configs: dict = field(default_factory=dict)   # name -> HostConfig (libvirt)


def _setup(hosts: list[str], sizes: list[int], dry_run: bool, inventory: Path | None,
           state: Path | None, cfg: Config) -> Setup:
    """The driver the command runs on, after checking that it manages `hosts`."""
    from drivers.inventory import load_inventory

    use_libvirt = not dry_run and (inventory is not None or cfg.daemon.driver == "libvirt")
    if not use_libvirt:
        if dry_run and inventory is not None:
            raise fail("--inventory: not with --dry-run (a dry run uses the simulated driver)")
        path = common.store_path(state, cfg)
        known = {}
        if path.exists():
            with Store.open(path) as store:
                known = {h.name: (h.vcpus, h.memory_mib) for h in store.hosts()}
        elif not dry_run:
            raise fail(f"--state: no store at {path} (add hosts with `leasewise host add`, or use --dry-run)")
        capacities = {}
        for host in hosts:
            if host in known:
                capacities[host] = known[host]
            elif dry_run:
                capacities[host] = DRY_RUN_CAPACITY
            else:
                listed = ", ".join(known) or "none"
                raise fail(f"--host: no host {host!r} in the store (hosts: {listed})")
            if max(sizes) > capacities[host][1]:
                raise fail(f"--sizes: {max(sizes)} MiB does not fit on host {host} ({capacities[host][1]} MiB)")
        clock = SimulatedClock(common.now())
        driver = make_driver("simulated", [], capacities=capacities, clock=clock,
                             simulated=simulated_config(cfg.scheduling, shared_storage=()))
        return Setup(driver, "simulated", lambda s: clock.sleep(timedelta(seconds=s)))

    if inventory is not None or cfg.daemon.inventory:
        configs = load_inventory(inventory if inventory is not None else Path(cfg.daemon.inventory))
    else:
        path = common.store_path(state, cfg)
        if not path.exists():
            raise fail(f"--state: no store at {path} (give --inventory FILE, or add hosts with `leasewise host add`)")
        with Store.open(path) as store:
            configs = [h.config for h in store.hosts()]
    by_name = {c.name: c for c in configs}
    for host in hosts:
        if host not in by_name:
            raise fail(f"--host: unknown host {host!r} (known: {', '.join(by_name) or 'none'})")
    try:
        # One downtime step: the max downtime stays what the model is given for the whole migration.
        driver = make_driver("libvirt", [by_name[h] for h in hosts], downtime_steps=1)
    except (LeasewiseError, DriverError, ValueError) as exc:
        raise fail(str(exc)) from None
    clock = RealClock()
    return Setup(driver, "libvirt", lambda s: clock.sleep(timedelta(seconds=s)), by_name)


def guest_spec(name: str, memory_mib: int, pages_per_second: int, guest_dir: str) -> VMSpec:
    """The lab guest: 1 vCPU, `memory_mib`, a dirtier working set of half of it (less in a small guest, so
    that the guest's kernel keeps `GUEST_SYSTEM_MIB`), dirtied at the given rate."""
    working_set = max(1, min(memory_mib // 2, memory_mib - GUEST_SYSTEM_MIB))
    return VMSpec(
        name=name,
        vcpus=1,
        memory_mib=memory_mib,
        kernel=posixpath.join(guest_dir, "vmlinuz"),
        initrd=posixpath.join(guest_dir, "initrd.img"),
        cmdline=f"console=ttyS0 quiet dirtier.mib={working_set} dirtier.pps={pages_per_second} dirtier.report=1",
        dirty_rate_mib_s=pages_to_mib_s(pages_per_second),
        working_set_mib=float(working_set),
    )


@contextmanager
def _guests(setup: Setup, console: Console) -> Iterator[list[str]]:
    """The names of the guests started inside; every one still there afterwards is destroyed (also on an
    error, Ctrl-C or SIGTERM)."""
    started: list[str] = []
    try:
        previous = signal.signal(signal.SIGTERM, _terminate)
        installed = True
    except ValueError:  # not the main thread: no handler
        previous, installed = None, False
    try:
        yield started
    finally:
        try:
            for name in list(started):
                try:
                    if setup.driver.locate(name) is not None:
                        setup.driver.stop(name, graceful_timeout=0)
                    started.remove(name)
                except (DriverError, LeasewiseError) as exc:
                    console.print(f"[yellow]warning:[/] could not remove guest {escape(name)}: {escape(str(exc))}",
                                  soft_wrap=True)
        finally:
            if installed:
                signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _terminate(_signum, _frame):
    raise KeyboardInterrupt("SIGTERM")


def _token() -> str:
    return uuid.uuid4().hex[:6]


def _store_result(state: Path | None, cfg: Config, section: str, record: dict, wait_s: float) -> Path:
    """Store the fit, trying again while the store is busy: only this write, never the measurements (the
    option is not named `wait`, so the app does not run the whole calibration again)."""
    path = common.store_path(state, cfg)

    def write() -> None:
        with Store.open(path) as store:
            store_calibration(store, section, record)

    call_waiting(write, wait_s)
    return path


def _error_pct(predicted: float, measured: float) -> float | None:
    """How far the prediction is off, in percent of the measurement (None: nothing measured to compare)."""
    return None if measured <= 0 else 100.0 * (predicted - measured) / measured


def _pct(predicted: float, measured: float) -> str:
    error = _error_pct(predicted, measured)
    if error is None:
        return "-"
    return "0.0%" if abs(error) < 0.05 else f"{error:+.1f}%"


# -- calibrate migration -----------------------------------------------------------------------------------
@dataclass
class _Point:
    memory_mib: int
    pages_per_second: int
    samples: list[MigrationSample] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


MIGRATION_COLUMNS = (
    Column("size MiB", "right"), Column("dirty pages/s", "right"), Column("dirty MiB/s", "right", drop=1),
    Column("runs", "right", drop=3), Column("predicted s", "right"), Column("measured s", "right"),
    Column("error", "right"), Column("predicted downtime ms", "right"), Column("measured ms", "right"),
    Column("error ms", "right", drop=2), Column("passes pred/meas", "right", wraps=True, drop=4),   # or why not measured
)


def _migration_rows(points: list[_Point], fit: MigrationFit | None) -> list[list[str]]:
    """The predicted vs measured table: one row per grid point, MIGRATION_COLUMNS."""
    rows = []
    for p in points:
        runs = f"{len(p.samples)}/{len(p.samples) + len(p.failures)}"
        row = [str(p.memory_mib), str(p.pages_per_second), f"{pages_to_mib_s(p.pages_per_second):.2f}", runs]
        if not p.samples:
            why = p.failures[-1] if p.failures else "no measurement"
            rows.append([*row, "-", "-", "-", "-", "-", "-", escape(why[:60])])
            continue
        measured_s = _mean([s.total_s for s in p.samples])
        measured_ms = _mean([s.downtime_ms for s in p.samples])
        passes = _mean([float(s.iterations) for s in p.samples])
        if any(s.guest_survived is False for s in p.samples):
            row[3] += " died"
        if fit is None:
            rows.append([*row, "-", f"{measured_s:.2f}", "-", "-", f"{measured_ms:.1f}", "-", f"-/{passes:g}"])
            continue
        predicted = fit.predict(p.samples[0])
        if predicted.outcome == "aborted":
            rows.append([*row, "aborts", f"{measured_s:.2f}", "-", "-", f"{measured_ms:.1f}", "-", f"-/{passes:g}"])
            continue
        rows.append([*row, f"{predicted.total_seconds:.2f}", f"{measured_s:.2f}",
                     _pct(predicted.total_seconds, measured_s), f"{predicted.downtime_ms:.1f}",
                     f"{measured_ms:.1f}", f"{predicted.downtime_ms - measured_ms:+.1f}",
                     f"{predicted.passes}/{passes:g}"])
    return rows


def _migration_json(points: list[_Point], fit: MigrationFit | None, cfg: Config, hosts: list[str], driver: str,
                    max_downtime: float) -> dict:
    """What `--json` prints: every grid point measured and predicted, the fit and the configured values."""
    s = cfg.scheduling
    return {"hosts": hosts, "driver": driver, "max_downtime_ms": max_downtime, "points": _points_json(points, fit),
            "fit": None if fit is None else fit.as_dict(),
            "in_sample": None if fit is None else _json_or_none(_fidelity(points, fit, max_downtime)),
            "validation": None,
            "configured": {"live_migration_bandwidth": s.live_bandwidth,
                           "live_migration_overhead": s.live_migration_overhead.total_seconds(),
                           "live_migration_switchover_ms": s.live_migration_switchover_ms,
                           "live_migration_dirty_factor": s.live_migration_dirty_factor},
            "stored": None}


def _points_json(points: list[_Point], fit: MigrationFit | None) -> list[dict]:
    """Every grid point measured, and predicted when there is a fit."""
    out = []
    for p in points:
        point: dict = {"memory_mib": p.memory_mib, "dirty_pages_s": p.pages_per_second,
                       "dirty_mib_s": pages_to_mib_s(p.pages_per_second), "runs": len(p.samples) + len(p.failures),
                       "failures": list(p.failures), "measured": None, "predicted": None}
        if p.samples:
            measured_s = _mean([s.total_s for s in p.samples])
            point["measured"] = {"total_s": measured_s, "downtime_ms": _mean([s.downtime_ms for s in p.samples]),
                                 "passes": _mean([float(s.iterations) for s in p.samples]),
                                 "guest_died": any(s.guest_survived is False for s in p.samples)}
            if fit is not None:
                predicted = fit.predict(p.samples[0])
                aborts = predicted.outcome == "aborted"
                point["predicted"] = {"outcome": predicted.outcome, "total_s": predicted.total_seconds,
                                      "downtime_ms": predicted.downtime_ms, "passes": predicted.passes,
                                      "error_pct": None if aborts else _error_pct(predicted.total_seconds, measured_s)}
        out.append(point)
    return out


def _fidelity(points: list[_Point], fit: MigrationFit, max_downtime: float) -> Fidelity | None:
    """How the fit predicts every measured run of `points` (runs the model says would abort are left out:
    there is no predicted time to compare)."""
    comparisons = []
    for s in (s for p in points for s in p.samples):
        predicted = fit.predict(s)
        if predicted.outcome != "aborted":
            comparisons.append(Comparison(predicted.total_seconds, s.total_s, predicted.downtime_ms, s.downtime_ms,
                                          max_downtime))
    return fidelity(comparisons)


def _json_or_none(summary: Fidelity | None) -> dict | None:
    return None if summary is None else summary.to_json()


def _died_note(points: list[_Point]) -> str | None:
    """One line on the guests that died after a migration, or None."""
    died = [(p, s) for p in points for s in p.samples if s.guest_survived is False]
    if not died:
        return None
    runs = ", ".join(f"{p.memory_mib} MiB at {p.pages_per_second} pages/s ({s.iterations} passes)" for p, s in died)
    return (f"guest died after migrating: {runs}. QEMU 7.2 under TCG loses pages dirtied from the fourth pre-copy "
            "pass on; these runs are kept (the migration itself was measured) but no later run of that guest is")


#: fitted values next to the configured ones, with the key each replaces
FIT_COLUMNS = (Column("parameter", wraps=True, style="bold"), Column("fitted", "right", wraps=True),
               Column("configured", "right"), Column("\\[scheduling] key", drop=1))


def _migration_fit_rows(fit: MigrationFit, cfg: Config) -> list[list[str]]:
    s = cfg.scheduling
    rows = [["bandwidth MiB/s", f"{fit.bandwidth_mib_s:.3f}", f"{s.live_bandwidth:g}", "live_migration_bandwidth"],
            ["overhead s", f"{fit.overhead_s:.3f}", f"{s.live_migration_overhead.total_seconds():g}",
             "live_migration_overhead"],
            ["switch-over ms", f"{fit.switchover_ms:.1f}", f"{s.live_migration_switchover_ms:g}",
             "live_migration_switchover_ms"]]
    if fit.dirty_factor is None:
        factor = "not fitted (no dirtying guest)"
    elif fit.dirty_factor_determined:
        factor = f"{fit.dirty_factor:.3f}"
        if fit.dirty_factor_interval is not None:
            lo, hi = fit.dirty_factor_interval
            factor += f" ({lo:.3g}-{hi:.3g})"
    else:
        lo, hi = fit.dirty_factor_interval or (0.0, MAX_DIRTY_FACTOR)
        factor = (f"not determined: {lo:.3g}-{hi:.3g} fit as well (best {fit.dirty_factor:.3g}); "
                  "not stored, raise --dirty")
    rows += [["dirty factor", factor, f"{s.live_migration_dirty_factor:g}", "live_migration_dirty_factor"],
             ["rms error, total", f"{fit.rms_total_s:.3f} s", "", ""],
             ["rms error, downtime", f"{fit.rms_downtime_ms:.1f} ms", "", ""],
             ["samples", str(fit.samples), "", ""]]
    return rows


#: options both commands take
SizesOption = typer.Option("128,256,512", "--sizes", metavar="MIB,...", help="Guest memory sizes, MiB (128 or more).")
SettleOption = typer.Option(None, "--settle", metavar="S",
                            help=f"Wait after booting a guest before measuring, s (default {DEFAULT_SETTLE_S:g}; 0 on the simulated driver).")
GuestDirOption = typer.Option(os.environ.get("LEASEWISE_GUEST_DIR", DEFAULT_GUEST_DIR), "--guest-dir", metavar="DIR",
                              help="The lab guest's vmlinuz and initrd.img (as the hosts see them).")
InventoryOption = typer.Option(None, "--inventory", help="Host inventory TOML: use the libvirt driver on its hosts.")
DryRunOption = typer.Option(False, "--dry-run", help="Simulated driver (the model itself); stores nothing.")
NoStoreOption = typer.Option(False, "--no-store", help="Print the fit, do not store it.")
JsonOption = typer.Option(False, "--json", help="Print the measurements and the fit as JSON (progress goes to stderr).")


@calibrate_app.command("migration")
def migration_command(
    host: list[str] | None = typer.Option(None, "--host", metavar="HOST",
                                          help="Source, then destination (give it twice)."),
    sizes_text: str = SizesOption,
    dirty_text: str = typer.Option("0,1000,5000", "--dirty", metavar="PPS,...",
                                   help="Dirty rates in 4 KiB pages/s (256 pages/s = 1 MiB/s); must include 0."),
    repeat_text: str = typer.Option("1", "--repeat", metavar="N", help="Migrations per grid point (alternating A->B, B->A)."),
    max_downtime_text: str | None = typer.Option(None, "--max-downtime", metavar="MS",
                                                 help="Max downtime, ms (default: \\[scheduling] max_downtime_ms)."),
    timeout_text: str = typer.Option("300", "--timeout", metavar="S", help="Completion timeout of each migration, s (then aborted)."),
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
    state: Path | None = common.StateOption,
    config: Path | None = common.ConfigOption,
    store_wait: str = common.WaitOption,
    server: str | None = common.ServerOption,
) -> None:
    """Migrate guests of known memory and dirty rate between two hosts and fit the pre-copy model."""
    _refuse_server(server, config)
    hosts = _hosts(host, exactly=2)
    sizes = _int_list("--sizes", sizes_text, minimum=MIN_GUEST_MIB, what="memory sizes in MiB")
    if len(sizes) < 2:
        raise fail("--sizes: give at least two sizes (bandwidth and overhead are fitted to a line)")
    dirty = _int_list("--dirty", dirty_text, minimum=0, what="dirty rates in pages/s")
    if 0 not in dirty:
        raise fail("--dirty: must include 0 (idle guests give the bandwidth and the overhead)")
    repeat = _repeat(repeat_text)
    wait_s = parse_wait(store_wait)
    timeout = _number("--timeout", timeout_text, zero_ok=False, unit="seconds", maximum=DAY_S)
    settle = _number("--settle", settle_text, zero_ok=True, unit="seconds", maximum=DAY_S)
    validate = _grid("--validate", validate_text) if validate_text is not None else None
    cfg = common.load(config)
    max_downtime = _number("--max-downtime", max_downtime_text, zero_ok=False, unit="ms", maximum=DAY_S * 1000)
    if max_downtime is None:
        max_downtime = cfg.scheduling.max_downtime_ms
    setup = _setup(hosts, sorted({*sizes, *(validate[0] if validate else ())}), dry_run, inventory, state, cfg)
    if settle is None:
        settle = 0.0 if setup.kind == "simulated" else DEFAULT_SETTLE_S
    console = make_console(stderr=json_out)
    a, b = hosts
    console.print(f"calibrating live migration {a} <-> {b} on the {setup.kind} driver: sizes "
                  f"{', '.join(map(str, sizes))} MiB x dirty {', '.join(map(str, dirty))} pages/s, "
                  f"{repeat} run(s) each, max downtime {max_downtime:g} ms", soft_wrap=True)
    try:
        _calibrate_migration(setup, hosts, sizes, dirty, validate, repeat, max_downtime, timeout, settle, guest_dir,
                             cfg, state, wait_s, dry_run, no_store, json_out, console)
    finally:
        setup.driver.close()


def _calibrate_migration(setup: Setup, hosts: list[str], sizes: list[int], dirty: list[int],
                         validate: tuple[list[int], list[int]] | None, repeat: int, max_downtime: float,
                         timeout: float, settle: float, guest_dir: str, cfg: Config, state: Path | None,
                         wait_s: float, dry_run: bool, no_store: bool, json_out: bool, console: Console) -> None:
    """Measure the grid, fit, validate, store and print: the command once its options are checked."""
    a, b = hosts
    token = _token()
    points = [_Point(m, p) for m in sizes for p in dirty]
    _measure_grid(setup, points, a, b, repeat, max_downtime, timeout, settle, guest_dir, f"{VM_PREFIX}{token}-",
                  console)
    samples = [s for p in points for s in p.samples]
    title = f"Live migration {a} <-> {b}: predicted vs measured ({setup.kind} driver)"
    try:
        fit = fit_migration(samples)
    except CalibrationError as exc:
        if json_out:
            emit_json(_migration_json(points, None, cfg, hosts, setup.kind, max_downtime))
        else:
            print_table(console, MIGRATION_COLUMNS, _migration_rows(points, None), title=title)
        raise fail(f"calibrate migration: {exc}", code=EXIT_FAILED) from None
    answer = _migration_json(points, fit, cfg, hosts, setup.kind, max_downtime)
    if not json_out:
        print_table(console, MIGRATION_COLUMNS, _migration_rows(points, fit), title=title)
        print_table(console, FIT_COLUMNS, _migration_fit_rows(fit, cfg), title="Fitted pre-copy model")
        in_sample = _fidelity(points, fit, max_downtime)
        if in_sample is not None:
            console.print(f"in sample (the runs it was fitted to): {in_sample.sentence()}", soft_wrap=True)
        note = _died_note(points)
        if note is not None:
            console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    if validate is not None:
        answer["validation"] = _validate(setup, validate, fit, hosts, repeat, max_downtime, timeout, settle,
                                         guest_dir, f"{VM_PREFIX}{token}-v", console, json_out)
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


def _measure_grid(setup: Setup, points: list["_Point"], a: str, b: str, repeat: int, max_downtime: float,
                  timeout: float, settle: float, guest_dir: str, prefix: str, console: Console) -> None:
    """Every point's migrations; a failure or Ctrl-C removes the guests and ends the command in one line."""
    try:
        with _guests(setup, console) as started:
            for point in points:
                _measure_migrations(setup, point, a, b, repeat, max_downtime, timeout, settle, guest_dir,
                                    f"{prefix}{point.memory_mib}m-{point.pages_per_second}p", started, console)
    except KeyboardInterrupt:
        raise fail("interrupted; the calibration guests were removed", code=130) from None
    except (DriverError, LeasewiseError) as exc:
        raise fail(f"calibrate migration: {exc} (the calibration guests were removed)", code=EXIT_FAILED) from None


def _measure_migrations(setup: Setup, point: _Point, a: str, b: str, repeat: int, max_downtime: float,
                        timeout: float, settle: float, guest_dir: str, name: str, started: list[str],
                        console: Console) -> None:
    """Boot one guest on `a`, migrate it `repeat` times (alternating), record each run, stop it."""
    spec = guest_spec(name, point.memory_mib, point.pages_per_second, guest_dir)
    setup.driver.start(spec, a)
    started.append(name)
    _wait_ready(setup, name, settle)
    here, there = a, b
    for run in range(1, repeat + 1):
        label = (f"{point.memory_mib} MiB, {point.pages_per_second} pages/s, run {run}/{repeat}: "
                 f"{here} -> {there}")
        try:
            report = setup.driver.migrate(name, there, max_downtime_ms=max_downtime, timeout_s=timeout,
                                          on_timeout="abort")
            survived = _still_alive(setup, name)
        except MigrationFailed as exc:
            outcome = exc.report.outcome if exc.report is not None else "failed"
            point.failures.append(outcome)
            console.print(f"  {label}: [yellow]{escape(outcome)}[/] ({escape(str(exc))})", soft_wrap=True)
            if setup.driver.locate(name) is None:
                break  # the guest is gone: nothing more to measure at this point
            continue
        point.samples.append(MigrationSample(
            memory_mib=float(point.memory_mib),
            dirty_rate_mib_s=spec.dirty_rate_mib_s,
            max_downtime_ms=max_downtime,
            total_s=report.total_seconds,
            downtime_ms=report.downtime_ms,
            iterations=report.iterations,
            working_set_mib=spec.working_set_mib,
            timeout_s=timeout,
            guest_survived=survived,
        ))
        console.print(f"  {label}: {report.total_seconds:.2f} s, downtime {report.downtime_ms:.1f} ms, "
                      f"{report.iterations} passes" + ("" if survived is not False else
                                                      ", [yellow]the guest died[/] (TCG, see the note)"),
                      soft_wrap=True)
        if survived is False:
            break   # a dead guest dirties nothing: later runs would not measure this grid point
        here, there = there, here
    setup.driver.stop(name, graceful_timeout=0)
    started.remove(name)


def _wait_ready(setup: Setup, name: str, settle: float) -> None:
    """Until the guest's console says its working set is touched (real drivers), then `settle` seconds."""
    if setup.kind == "libvirt":
        line = setup.driver.wait_for_console(name, f"{READY_LINE}|{DIRTIER_KILLED_LINE}", READY_TIMEOUT_S)
        if line is None:
            raise DriverError(f"guest {name} did not say its working set was touched within "
                              f"{READY_TIMEOUT_S:g} s (no '{READY_LINE}' on its console)")
        if re.search(DIRTIER_KILLED_LINE, line):
            raise DriverError(f"guest {name} ran out of memory: its kernel killed the dirtier ({line})")
    setup.sleep(settle)


def _still_alive(setup: Setup, name: str) -> bool | None:
    """Whether the guest still prints its status lines after a migration (None: a simulated guest)."""
    if setup.kind != "libvirt":
        return None
    return setup.driver.wait_for_console(name, ALIVE_LINE, ALIVE_TIMEOUT_S) is not None


def _validate(setup: Setup, grid: tuple[list[int], list[int]], fit: MigrationFit, hosts: list[str], repeat: int,
              max_downtime: float, timeout: float, settle: float, guest_dir: str, prefix: str, console: Console,
              json_out: bool) -> dict:
    """Migrate the validation grid with the limit the planner would give the job, print how the fit
    predicts it, and return that as JSON."""
    limit = downtime_limit_ms(max_downtime, fit.switchover_ms)
    if limit is None:
        raise fail(f"--validate: the fitted switch-over ({fit.switchover_ms:.0f} ms) takes all of the "
                   f"{max_downtime:g} ms maximum downtime: no migration can keep it", code=EXIT_FAILED)
    a, b = hosts
    sizes, dirty = grid
    console.print(f"validating on a grid it was not fitted to: sizes {', '.join(map(str, sizes))} MiB x dirty "
                  f"{', '.join(map(str, dirty))} pages/s, job limit {limit:.0f} ms ({max_downtime:g} ms less the "
                  f"{fit.switchover_ms:.0f} ms switch-over)", soft_wrap=True)
    points = [_Point(m, p) for m in sizes for p in dirty]
    _measure_grid(setup, points, a, b, repeat, limit, timeout, settle, guest_dir, prefix, console)
    summary = _fidelity(points, fit, max_downtime)
    if not json_out:
        print_table(console, MIGRATION_COLUMNS, _migration_rows(points, fit),
                    title=f"Validation grid (not fitted to) {a} <-> {b}: predicted vs measured")
        console.print("validation: " + (summary.sentence() if summary is not None else "no run to compare"),
                      soft_wrap=True)
        note = _died_note(points)
        if note is not None:
            console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    return {"downtime_limit_ms": limit, "points": _points_json(points, fit), "summary": _json_or_none(summary)}


# -- calibrate suspend -------------------------------------------------------------------------------------
@dataclass
class _SuspendPoint:
    host: str
    memory_mib: int
    suspend: list[float] = field(default_factory=list)
    resume: list[float] = field(default_factory=list)


def _state_dir(setup: Setup, host: str, option: str | None, cfg: Config) -> str:
    if option is not None:
        return option
    host_cfg = setup.host_configs.get(host)
    return host_cfg.state_dir if host_cfg is not None else cfg.daemon.state_dir


def _remove_image(setup: Setup, host: str, path: str, console: Console) -> None:
    """Delete a calibration save image (best effort: a warning names any that stays)."""
    try:
        setup.driver.remove_state(path, host)
    except DriverError as exc:
        console.print(f"[yellow]warning:[/] {escape(str(exc))}", soft_wrap=True)


SUSPEND_COLUMNS = (
    Column("host", "right", wraps=True), Column("size MiB", "right"), Column("runs", "right", drop=1),
    Column("suspend predicted s", "right"), Column("measured s", "right"), Column("error", "right"),
    Column("resume predicted s", "right"), Column("measured s", "right"), Column("error", "right"),
)


def _suspend_rows(points: list[_SuspendPoint], suspend: RateFit | None, resume: RateFit | None) -> list[list[str]]:
    """The predicted vs measured table: one row per host and size, SUSPEND_COLUMNS."""
    rows = []
    for p in points:
        runs = str(min(len(p.suspend), len(p.resume)))
        cells = [p.host, str(p.memory_mib), runs]
        for fit, values in ((suspend, p.suspend), (resume, p.resume)):
            if not values:
                cells += ["-", "-", "-"]
                continue
            measured = _mean(values)
            if fit is None:
                cells += ["-", f"{measured:.2f}", "-"]
            else:
                predicted = fit.predict(p.memory_mib)
                cells += [f"{predicted:.2f}", f"{measured:.2f}", _pct(predicted, measured)]
        rows.append(cells)
    return rows


def _suspend_json(points: list[_SuspendPoint], suspend: RateFit | None, resume: RateFit | None, cfg: Config,
                  hosts: list[str], driver: str) -> dict:
    """What `--json` prints: every host and size measured and predicted, the fits and the configured values."""
    out = []
    for p in points:
        point: dict = {"host": p.host, "memory_mib": p.memory_mib, "cycles": min(len(p.suspend), len(p.resume))}
        for what, fit, values in (("suspend", suspend, p.suspend), ("resume", resume, p.resume)):
            if not values:
                point[what] = None
                continue
            measured = _mean(values)
            predicted = None if fit is None else fit.predict(p.memory_mib)
            point[what] = {"measured_s": measured, "predicted_s": predicted,
                           "error_pct": None if predicted is None else _error_pct(predicted, measured)}
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
def suspend_command(
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
    state: Path | None = common.StateOption,
    config: Path | None = common.ConfigOption,
    store_wait: str = common.WaitOption,
    server: str | None = common.ServerOption,
) -> None:
    """Suspend and resume guests of each size on the hosts and fit the suspend and resume rates."""
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
    token = _token()
    points = [_SuspendPoint(h, m) for h in hosts for m in sizes]
    try:
        with _guests(setup, console) as started:
            for point in points:
                name = f"{VM_PREFIX}{token}-{point.memory_mib}m"
                path = posixpath.join(_state_dir(setup, point.host, state_dir, cfg), f"{name}.state")
                try:
                    _measure_suspend(setup, point, repeat, settle, guest_dir, name, path, started, console)
                finally:
                    _remove_image(setup, point.host, path, console)
    except KeyboardInterrupt:
        raise fail("interrupted; the calibration guests were removed", code=130) from None
    except (DriverError, LeasewiseError) as exc:
        raise fail(f"calibrate suspend: {exc} (the calibration guests were removed)", code=EXIT_FAILED) from None
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


def _measure_suspend(setup: Setup, point: _SuspendPoint, repeat: int, settle: float, guest_dir: str,
                     name: str, path: str, started: list[str], console: Console) -> None:
    spec = guest_spec(name, point.memory_mib, 0, guest_dir)
    setup.driver.start(spec, point.host)
    started.append(name)
    _wait_ready(setup, name, settle)
    for run in range(1, repeat + 1):
        saved = setup.driver.suspend(name, path)
        point.suspend.append(saved.wall_seconds)
        restored = setup.driver.resume(name, path, point.host)
        point.resume.append(restored.wall_seconds)
        console.print(f"  {point.host}, {point.memory_mib} MiB, cycle {run}/{repeat}: suspend "
                      f"{saved.wall_seconds:.2f} s, resume {restored.wall_seconds:.2f} s", soft_wrap=True)
    setup.driver.stop(name, graceful_timeout=0)
    started.remove(name)
