"""On the simulated driver the plan comes true to the second: `leasewise run` enacts every kind of operation
(start, suspend, memory-image move, resume, shutdown, live migration) in the time the planner reserved for
it, with the configured parameters or the store's calibrated ones, and `leasewise report` shows it. The
simulated hosts outlive `run`: a second `run` (no --sim-state) finds the VMs the first one started."""

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from orchestrator.model.timeutil import iso
from orchestrator.state.calibrated import CALIBRATION_KEY
from orchestrator.state.store import Store
from tests.support.times import CLI_NOW
from drivers.simulated.state_file import read_state

ROOT = Path(__file__).resolve().parents[2]


def at(minutes: float) -> str:
    return (CLI_NOW + timedelta(minutes=minutes)).isoformat()


def hosts(cli, n: int, cpus: int, memory: int, config: Path | None) -> None:
    for i in range(1, n + 1):
        result = cli("host", "add", f"sim{i}", "--uri", f"sim://sim{i}", "--cpus", str(cpus), "--memory", str(memory),
                     config=config)
        assert result.exit_code == 0, result.output


def ok(result) -> str:
    assert result.exit_code == 0, result.output
    return result.stdout


def report_rows(cli, tmp_path: Path, config: Path | None) -> list[dict]:
    out = tmp_path / "report.json"
    ok(cli("report", "--json", str(out), config=config))
    return json.loads(out.read_text())["rows"]


CONFIGS = {
    "defaults": None,
    # every parameter the operations' times depend on, away from its default
    "configured": ('[scheduling]\nsuspend_rate = 50\nresume_rate = 20\nmigration_bandwidth = 40\n'
                   'shutdown_time = "30s"\nlive_migration_bandwidth = 64\nlive_migration_overhead = "3s"\n'
                   'live_migration_dirty_factor = 1.5\ndirty_rate = 4\nmax_downtime_ms = 500\n'),
    # the store's calibration takes the place of the configured bandwidth, overhead, factor and rates
    "calibrated": {"migration": {"bandwidth_mib_s": 90.0, "overhead_s": 2.5, "dirty_factor": 0.8},
                   "suspend": {"suspend_rate_mib_s": 120.0, "resume_rate_mib_s": 70.0}},
}


@pytest.fixture(params=list(CONFIGS))
def setting(request, tmp_path, store_path):
    """(configuration file or None, what to do to the store once it exists)."""
    value = CONFIGS[request.param]
    if isinstance(value, str):
        path = tmp_path / "config.toml"
        path.write_text(value)
        return path, lambda: None

    def calibrate():
        if value is not None:
            with Store.open(store_path) as store:
                store.set_meta(CALIBRATION_KEY, value)

    return None, calibrate


def test_suspension_image_move_resumption_and_shutdowns_take_their_planned_time(cli, tmp_path, setting):
    """A best-effort lease runs on sim1; an AR takes sim2 from +5 min, another needs sim1 from +10 min, so
    the first is suspended, its memory image moved to sim2 once that is free, and resumed there."""
    config, prepare = setting
    hosts(cli, 2, 2, 4096, config)
    prepare()
    ok(cli("lease", "submit", "--cpus", "2", "--memory", "2048", "--duration", "2h", config=config))
    ok(cli("lease", "submit", "--cpus", "2", "--memory", "2048", "--duration", "20m", "--start", at(5),
           "--no-preemptible", config=config))
    ok(cli("lease", "submit", "--cpus", "2", "--memory", "2048", "--duration", "50m", "--start", at(10),
           "--no-preemptible", config=config))
    ok(cli("run", "--fast", "--until-idle", config=config))
    rows = report_rows(cli, tmp_path, config)
    assert {r["kind"] for r in rows} == {"vm", "suspend", "migrate", "resume", "shutdown"}
    for row in rows:
        assert row["status"] == "ok", row
        for delta in ("delta_start_s", "delta_end_s"):
            assert row[delta] in (None, 0.0), row
    assert all(r["delta_end_s"] == 0.0 for r in rows if r["kind"] != "vm")


def test_live_migrations_take_the_predicted_time(cli, tmp_path, setting):
    """Two VMs on sim1, which is drained: both move live to sim2, one after the other, as predicted."""
    config, prepare = setting
    hosts(cli, 2, 4, 8192, config)
    prepare()
    ok(cli("lease", "submit", "--nodes", "2", "--cpus", "2", "--memory", "2048", "--duration", "2h",
           "--dirty-rate", "6", config=config))
    ok(cli("run", "--fast", "--max-steps", "1", config=config))
    assert "live-migrat" in ok(cli("host", "drain", "sim1", "--by", "+20m", config=config))
    ok(cli("run", "--fast", "--until-idle", config=config))
    rows = report_rows(cli, tmp_path, config)
    assert {r["kind"] for r in rows} == {"vm", "live-migrate", "shutdown"}
    [migration] = [r for r in rows if r["kind"] == "live-migrate"]
    assert len(migration["vms"]) == 2
    assert migration["duration_error_s"] == pytest.approx(0.0, abs=1e-6)
    assert migration["downtime_error_ms"] == pytest.approx(0.0, abs=1e-3)
    assert migration["delta_start_s"] == 0.0
    # each VM's reservation is rounded up to whole seconds: together less than a second each
    assert -2.0 < migration["delta_end_s"] <= 0.0
    assert all(r["delta_start_s"] in (None, 0.0) and r["delta_end_s"] in (None, 0.0)
               for r in rows if r["kind"] != "live-migrate")


def lw(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from orchestrator.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})


def test_a_second_run_finds_the_vms_the_first_one_started(cli, store_path):
    """Without --sim-state the simulated hosts are kept next to the store: `run` stopped after starting
    the VMs and started again (each in its own process) adopts them and ends the lease as planned."""
    hosts(cli, 2, 4, 8192, None)
    ok(cli("lease", "submit", "--nodes", "2", "--cpus", "2", "--memory", "2048", "--duration", "1h"))
    with Store.open(store_path) as store:   # the processes' fast clock starts where the test's clock is
        store.set_meta("daemon_clock", iso(CLI_NOW))
    first = lw("run", "--fast", "--max-steps", "1", "--state", str(store_path))
    assert first.returncode == 0, first.stderr
    kept = read_state(store_path.with_suffix(".hosts.json"))
    assert {name: vm["state"] for name, vm in kept["vms"].items()} == {"lw-1-0": "running", "lw-1-1": "running"}
    shown = lw("lease", "show", "1", "--json", "--state", str(store_path))
    assert [vm["state"] for vm in json.loads(shown.stdout)["vms"]] == ["running", "running"]
    second = lw("run", "--fast", "--until-idle", "--state", str(store_path))
    assert second.returncode == 0, second.stderr
    assert "lease 1: adopted its 2 running VM(s)" in second.stdout
    assert "gone" not in second.stdout
    with Store.open(store_path) as store:
        lease = store.lease(1)
    assert lease.state.value == "done"
    assert lease.end_time == CLI_NOW + timedelta(hours=1)
    assert read_state(store_path.with_suffix(".hosts.json"))["vms"] == {}
