"""`leasewise sweep` end to end on Ray's local mode: the example sweep gives what `leasewise simulate` gives
for each of its runs, a sweep killed with SIGKILL resumes without running a finished run again, a bad sweep
file is one line and exit code 2 before Ray starts, and `sweep plot` draws the table.

Ray starts three times in this module (it takes seconds): the example sweep (shared by several tests), and
the killed sweep and its resumption. Each runs as a child in a session of its own, so the test can see
every process it left behind.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.experiments import engine
from orchestrator.experiments.plot import summarise
from orchestrator.experiments.results import read_table
from tests.support.processes import end_session, wait_until_gone

ROOT = Path(__file__).resolve().parents[2]
SWEEPS = ROOT / "examples" / "sweeps"
SMALL = SWEEPS / "small.toml"
BAD = sorted((ROOT / "tests" / "data" / "bad_sweeps").glob("*.toml"))
runner = CliRunner()


def leasewise(*args: str) -> list[str]:
    return [sys.executable, "-c", "from orchestrator.cli import main; main()", *args]


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}


def run_in_own_session(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """The command to its end in a session of its own; fails the test if it leaves a process running."""
    child = subprocess.Popen(leasewise(*args), cwd=ROOT, env=child_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    finally:
        left = wait_until_gone(child.pid, timeout=20)
        end_session(child.pid)
    assert not left, f"left running after the sweep: {left}"
    return subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)


def metrics_of(record: dict) -> dict:
    return {k: v for k, v in record.items() if k != "wall_seconds"}


def config_for(row: dict, spec: dict) -> str:
    """The configuration of one run written as a plain configuration file: the sweep file's own tables, plus
    this row's value of each axis (read from the table, not from leasewise's expansion of the sweep)."""
    tables = {name: dict(spec.get(name, {})) for name in ("scheduling", "simulation")}
    tables["workload.swf"] = dict(spec.get("workload", {}).get("swf", {}))
    for table, keys in spec["axes"].items():
        for key in keys:
            tables[table].update({key: row[key]})
    return "".join(f"[{name}]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in body.items())
                   for name, body in tables.items())


@pytest.fixture(scope="module")
def small_sweep(tmp_path_factory):
    """The example sweep, run once on a local Ray of 2 workers with every run's leases: (its folder, its --json)."""
    out = tmp_path_factory.mktemp("sweep") / "small"
    done = run_in_own_session("sweep", str(SMALL), "--out", str(out), "--workers", "2", "--leases", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    return out, json.loads(done.stdout)


def test_each_run_of_a_sweep_gives_what_simulate_gives(small_sweep, tmp_path):
    out, answer = small_sweep
    spec = tomllib.loads(SMALL.read_text())
    rows = answer["rows"]
    assert (answer["runs"], answer["ran"], answer["finished_before"], answer["failed"]) == (6, 6, 0, [])
    assert sorted((row["work"], row["suspension"]) for row in rows) == sorted(
        (work, suspension) for work in (10, 20, 30) for suspension in ("none", "all"))
    for row in rows:
        config = tmp_path / f"{row['run']}.toml"
        config.write_text(config_for(row, spec))
        expected_path = tmp_path / f"{row['run']}.json"
        result = runner.invoke(app, ["simulate", str(SWEEPS / row["workload"]), "--inject", str(SWEEPS / row["inject"]),
                                     "--config", str(config), "--quiet", "--json", str(expected_path)])
        assert result.exit_code == 0, result.output
        expected = json.loads(expected_path.read_text())
        assert metrics_of(row) == {**{k: row[k] for k in row if k not in expected["metrics"]},
                                   **metrics_of(expected["metrics"])}
        leases = json.loads((out / "leases" / f"{row['run']}.json").read_text())
        assert leases["leases"] == expected["leases"]


def test_the_table_has_a_row_per_run_with_every_axis_and_every_metric(small_sweep, tmp_path):
    out, answer = small_sweep
    columns, rows = read_table(out / "results.csv")
    metric_names = list(json.loads(next((out / "runs").glob("*.json")).read_text())["metrics"])
    assert columns == ["run", "workload", "inject", "work", "duration", "size", "suspension", *metric_names]
    assert [row["run"] for row in rows] == [row["run"] for row in answer["rows"]]
    assert rows == answer["rows"]


def test_a_killed_sweep_resumes_without_running_a_finished_run_again(tmp_path):
    out = tmp_path / "killed"
    runs = out / "runs"
    killed = subprocess.Popen(leasewise("sweep", str(SMALL), "--out", str(out), "--workers", "1", "--quiet"),
                              cwd=ROOT, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while len(list(runs.glob("*.json"))) < 2:
            assert killed.poll() is None, killed.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "no two runs finished in 240 s"
            time.sleep(0.02)
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        before = {p.stem: (p.stat().st_ino, p.stat().st_mtime_ns) for p in runs.glob("*.json")}
        assert 2 <= len(before) < 6, "the sweep finished before it could be killed"

        resumed = run_in_own_session("sweep", str(SMALL), "--out", str(out), "--resume", "--json")
        assert resumed.returncode == 0, resumed.stderr[-3000:]
    finally:
        killed.stderr.close()
        end_session(killed.pid)   # Ray's agents of the killed instance end by themselves, but later

    answer = json.loads(resumed.stdout)
    assert (answer["runs"], answer["finished_before"], answer["ran"]) == (6, len(before), 6 - len(before))
    after = {p.stem: (p.stat().st_ino, p.stat().st_mtime_ns) for p in runs.glob("*.json")}
    assert len(after) == 6
    assert {run: after[run] for run in before} == before          # finished runs' files untouched
    records = {p.stem: json.loads(p.read_text()) for p in runs.glob("*.json")}
    killed_sessions = {records[run]["session"] for run in before}
    resumed_sessions = {records[run]["session"] for run in after if run not in before}
    assert len(killed_sessions) == len(resumed_sessions) == 1 and killed_sessions != resumed_sessions
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    started_again = [e["run"] for e in log if e["event"] == "start" and e["session"] in resumed_sessions]
    assert sorted(started_again) == sorted(set(after) - set(before))     # each unfinished run once, no other
    done = [e["run"] for e in log if e["event"] == "done"]
    assert sorted(done) == sorted(after)                                 # every run finished exactly once
    _, rows = read_table(out / "results.csv")
    assert sorted(row["run"] for row in rows) == sorted(after)


def test_resuming_a_finished_sweep_starts_nothing(small_sweep, tmp_path, monkeypatch):
    out = tmp_path / "small"
    shutil.copytree(small_sweep[0], out)
    monkeypatch.setattr(engine.RayEngine, "__enter__", lambda self: pytest.fail("Ray was started"))
    result = runner.invoke(app, ["sweep", str(SMALL), "--out", str(out), "--resume", "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert (answer["finished_before"], answer["ran"]) == (6, 0)
    assert answer["rows"] == small_sweep[1]["rows"]


def expected_error(path: Path) -> str:
    return re.sub(r"^#\s*error:\s*", "", path.read_text().splitlines()[0]).replace("{file}", str(path))


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_a_bad_sweep_file_is_one_line_and_exit_2_before_ray_starts(path, tmp_path, monkeypatch):
    monkeypatch.setattr(engine.RayEngine, "__enter__", lambda self: pytest.fail("Ray was started"))
    out = tmp_path / "out"
    result = runner.invoke(app, ["sweep", str(path), "--out", str(out)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == [f"error: {expected_error(path)}"]
    assert not out.exists()


def test_a_folder_holding_results_is_refused_without_resume(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.csv").write_text("run\n")
    result = runner.invoke(app, ["sweep", str(SMALL), "--out", str(out)])
    assert result.exit_code == 2
    assert result.output.strip() == (f"error: --out: {out} is not empty: pass --resume to finish the sweep that is "
                                     "there, or name another folder")


def test_the_reference_experiment_is_144_runs_of_every_injected_file_without_and_with_suspension():
    result = runner.invoke(app, ["sweep", str(SWEEPS / "blue-30days.toml"), "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)["runs"]
    assert len(runs) == 144 and len({run["run"] for run in runs}) == 144
    injected = sorted(p.relative_to(SWEEPS).as_posix() for p in (SWEEPS / "data" / "blue" / "injected").glob("*.lwf.gz"))
    assert sorted({run["inject"] for run in runs}) == injected and len(injected) == 72
    assert {(run["inject"], run["suspension"]) for run in runs} == {(i, s) for i in injected for s in ("none", "all")}
    assert {run["work"] for run in runs} == {5, 10, 15, 20, 25, 30}
    assert {run["duration"] for run in runs} == {1, 2, 3, 4}
    assert {run["size"] for run in runs} == {"1small", "2medium", "3large"}


def test_sweep_plot_draws_a_line_per_hue_value_through_the_table(small_sweep, tmp_path):
    from matplotlib.image import imread

    out, _ = small_sweep
    png = tmp_path / "plot.png"
    result = runner.invoke(app, ["sweep", "plot", str(out), "--x", "work", "--y", "be_wait_mean_seconds",
                                 "--hue", "suspension", "--png", str(png)])
    assert result.exit_code == 0, result.output
    assert imread(png).shape[:2] == (480, 800)
    columns, rows = read_table(out / "results.csv")
    lines = summarise(columns, rows, "work", "be_wait_mean_seconds", "suspension")
    assert [line.label for line in lines] == ["all", "none"]
    for line in lines:
        assert line.xs == [10, 20, 30] and line.counts == [1, 1, 1]
        assert line.means == [next(r["be_wait_mean_seconds"] for r in rows
                                   if r["suspension"] == line.label and r["work"] == x) for x in line.xs]


@pytest.mark.parametrize("args, message", [
    (["--x", "work", "--y", "wait"], "--y: no column 'wait' in the table (columns: run, workload, inject, "),
    (["--x", "work", "--y", "inject"], "--y: column 'inject' is not a number ("),
    (["--x", "work", "--y", "utilization", "--hue", "suspensions"], None),
    (["--x", "speed", "--y", "utilization"], "--x: no column 'speed' in the table"),
])
def test_sweep_plot_names_a_bad_column(small_sweep, tmp_path, args, message):
    png = tmp_path / "p.png"
    result = runner.invoke(app, ["sweep", "plot", str(small_sweep[0] / "results.csv"), *args, "--png", str(png)])
    if message is None:   # any column can be the hue
        assert result.exit_code == 0, result.output
        return
    assert result.exit_code == 2
    assert result.output.startswith(f"error: {message}") and len(result.output.strip().splitlines()) == 1
    assert not png.exists()
