"""`leasewise run`: the daemon that enacts the plan (see orchestrator/runtime/daemon.py)."""

# No `from __future__ import annotations`: typer reads the option types at runtime.

import dataclasses
import shutil
import sqlite3
import tempfile
from datetime import datetime
from pathlib import Path

import typer

from drivers.clock import Clock, RealClock, SimulatedClock
from orchestrator.cli import common
from orchestrator.cli.application import app, fail
from orchestrator.cli.common import StoreOptions, store_options
from orchestrator.cli.logs import configure_logging
from orchestrator.cli.output import make_console
from orchestrator.model.numbers import parse_whole
from orchestrator.model.timeutil import UTC, parse_time
from orchestrator.state.store import Store


class _DaemonTime:
    """The time log lines carry: the daemon's clock once it is made (simulated under --fast and --dry-run,
    so a line reads beside the events it explains), the wall clock's until then."""

    def __init__(self) -> None:
        self.clock: Clock | None = None

    def now(self) -> datetime:
        return self.clock.now() if self.clock is not None else datetime.now(UTC)


@app.command()
@store_options()
def run(
    opts: StoreOptions,
    dry_run: bool = typer.Option(False, "--dry-run", help="Simulated driver, fast-forwarded clock, on a copy of the store: print what would be done"),
    fast: bool = typer.Option(False, "--fast", help="Fast-forward: jump the clock from event to event instead of waiting (simulated driver only)"),
    until_idle: bool = typer.Option(False, "--until-idle", help="Stop when nothing is planned, queued or pending"),
    until: str | None = typer.Option(None, "--until", metavar="TIME", help="Stop at this time (ISO 8601)"),
    sim_state: Path | None = typer.Option(None, "--sim-state", metavar="FILE", help="Keep the simulated driver's hosts in this JSON file (default: next to the store)"),
    max_steps_text: str | None = typer.Option(None, "--max-steps", metavar="N", help="Stop after this many steps"),
    log_level: str = typer.Option("info", "--log-level", metavar="LEVEL",
                                  help="debug, info, warning or error: logfmt lines on stderr from this level on"),
) -> None:
    """Enact the plan: start, suspend, resume, migrate and stop VMs at the planned times."""
    # (no server runs this: the server is the daemon, and two would start every VM twice)
    common.refuse_server(opts.server, opts.config, "run: the server at {url} runs the daemon; stop it to run "
                                                   "one here, with --server '' for the local store")
    times = _DaemonTime()
    restore_logging = configure_logging(log_level, now=times.now)
    try:
        _run(opts, dry_run, fast, until_idle, until, sim_state, max_steps_text, times)
    finally:
        restore_logging()


def _run(opts: StoreOptions, dry_run: bool, fast: bool, until_idle: bool, until: str | None, sim_state: Path | None,
         max_steps_text: str | None, times: _DaemonTime) -> None:
    console = make_console()
    from orchestrator.runtime.daemon import (  # (drivers load only when run)
        Daemon,
        fast_clock_start,
        simulated_driver_for,
    )

    cfg = opts.config
    if dry_run:   # a rehearsal on a copy of the store: nobody is told their lease ends
        cfg = dataclasses.replace(cfg, notify=dataclasses.replace(cfg.notify, notifiers=()))
    stop_at = parse_time(until, "--until") if until else None
    max_steps = None if max_steps_text is None else parse_whole(max_steps_text, "--max-steps")
    path = opts.store_path
    if not path.exists():
        raise fail(f"--state: no store at {path} (add hosts with `leasewise host add` first)")
    driver_name = "simulated" if dry_run else cfg.daemon.driver
    if fast and driver_name != "simulated":
        raise fail("--fast needs the simulated driver ([daemon] driver = \"simulated\" or --dry-run)")
    workdir = None
    if dry_run:
        Store.open(path).close()   # a damaged store is refused by its own name, not the copy's
        workdir = tempfile.mkdtemp(prefix="leasewise-dry-run-")
        copy = Path(workdir) / "state.sqlite"
        _copy_store(path, copy)
        path = copy
        console.print(f"dry run on a copy of the store ({copy}); nothing real is touched")
    try:
        with Store.open(path) as store:
            if not store.hosts():
                raise fail("no hosts in the store: add some with `leasewise host add` or `leasewise host import`")
            if not dry_run:
                _refuse_if_served(store)
            if driver_name == "simulated":
                driver = simulated_driver_for(
                    store, sim_state if sim_state is not None or dry_run else path.with_suffix(".hosts.json"),
                    cfg.scheduling)
            else:
                from orchestrator.runtime.driver_factory import make_driver

                schedule = cfg.scheduling.downtime_schedule   # the steps the planner's model assumed
                driver = make_driver(driver_name, [h.config for h in store.hosts()],
                                     downtime_steps=schedule.steps, downtime_delay_s_per_gib=schedule.delay_s_per_gib,
                                     connect_timeout_s=cfg.daemon.answer_timeout.total_seconds())
            clock = SimulatedClock(fast_clock_start(store, common.now())) if (fast or dry_run) else RealClock()
            times.clock = clock
            daemon = Daemon(store, cfg, driver, clock, say=lambda line: console.print(line, soft_wrap=True))
            try:
                ran = daemon.run(until_idle=until_idle or dry_run, until=stop_at, max_steps=max_steps)
            finally:
                driver.close()
            if ran.stopped_by == "interrupt":
                console.print("stopped")
                return
            console.print(f"{ran.steps} steps; clock at {clock.now().isoformat()}")
    finally:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)


def _refuse_if_served(store) -> None:
    """Two enactors of one plan would start every VM twice: a store a live `leasewise serve` enacts is
    refused (a server that died leaves its note behind; its pid no longer runs)."""
    import os
    import socket

    serving = store.get_meta("serving")
    if not isinstance(serving, dict) or serving.get("host") != socket.gethostname():
        return
    try:
        os.kill(int(serving.get("pid", 0)), 0)
    except (ProcessLookupError, ValueError, TypeError):
        return
    except PermissionError:
        pass
    raise fail(f"--state: leasewise serve (pid {serving.get('pid')}, {serving.get('socket')}) enacts this store: "
               "stop it first, or use the server (--server)")


def _copy_store(source: Path, target: Path) -> None:
    """A consistent copy of a live SQLite store (the backup API, not a file copy)."""
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    target.chmod(0o600)
