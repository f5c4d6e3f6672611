"""`leasewise simulate` end to end: output files, summary, and one-line errors with exit code 2."""

from __future__ import annotations

import csv
import gzip
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app

DATA = Path(__file__).resolve().parents[1] / "data"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()


def expected_error(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    message = re.sub(r"^(<!--|#|;)\s*error:\s*", "", first)
    message = re.sub(r"\s*-->$", "", message)
    return message.replace("{file}", str(path))


def test_simulate_writes_json_in_the_documented_shape(tmp_path):
    out = tmp_path / "out.json"
    config = tmp_path / "c.toml"
    config.write_text('[simulation]\nstart = "2026-01-01T13:00:00Z"\n')
    result = runner.invoke(app, ["simulate", str(EXAMPLES / "preemption.lwf"), "--config", str(config),
                                 "--json", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    first = data["leases"][0]
    assert set(first) >= {"id", "type", "state", "submit", "start", "end", "reservations"}
    assert first["id"] == "1" and first["type"] == "best-effort" and first["state"] == "done"
    assert first["end"] == "2026-01-01T14:31:04Z"
    assert [r["kind"] for r in first["reservations"]] == ["vm", "suspend", "resume", "vm", "shutdown"]
    assert first["reservations"][1] == {"kind": "suspend", "start": "2026-01-01T13:29:28Z",
                                        "end": "2026-01-01T13:30:00Z", "hosts": ["host1"]}
    metrics = data["metrics"]
    for key in ("all_best_effort_seconds", "be_wait_mean_seconds", "be_bounded_slowdown_mean", "utilization",
                "ar_accepted", "ar_rejected", "im_accepted", "im_rejected", "leases_done", "wall_seconds"):
        assert key in metrics
    assert metrics["ar_accepted"] == 1 and metrics["leases_done"] == 2
    assert "leases done" in result.output


def test_simulate_writes_csv_one_row_per_lease(tmp_path):
    out = tmp_path / "out.csv"
    result = runner.invoke(app, ["simulate", str(EXAMPLES / "mixed.lwf"), "--csv", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 12
    assert {r["type"] for r in rows} == {"best-effort", "advance-reservation", "immediate"}
    assert all(r["state"] in ("done", "rejected") for r in rows)


def test_simulate_reads_gzipped_swf(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("[workload.swf]\nfirst = 50\n")
    trace = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "NASA-iPSC-1993-3.1-cln.swf.gz"
    result = runner.invoke(app, ["simulate", str(trace), "--config",
                                 str(config), "--quiet", "--json", str(tmp_path / "o.json")])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "o.json").read_text())
    assert len(data["leases"]) == 50 and data["metrics"]["leases_done"] == 50


@pytest.mark.parametrize("path", sorted((DATA / "bad_workloads").iterdir()), ids=lambda p: p.name)
def test_malformed_workload_gives_one_line_and_exit_2(path):
    result = runner.invoke(app, ["simulate", str(path), "--quiet"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    lines = [l for l in result.output.splitlines() if l.strip()]
    assert len(lines) == 1, result.output
    assert expected_error(path) in lines[0].replace("error: ", "", 1)


@pytest.mark.parametrize("path", sorted((DATA / "bad_configs").iterdir()), ids=lambda p: p.name)
def test_malformed_config_gives_one_line_and_exit_2(path):
    result = runner.invoke(app, ["simulate", str(EXAMPLES / "preemption.lwf"), "--config", str(path), "--quiet"])
    assert result.exit_code == 2
    lines = [l for l in result.output.splitlines() if l.strip()]
    assert len(lines) == 1, result.output
    assert expected_error(path) in lines[0]


def test_missing_workload_file():
    result = runner.invoke(app, ["simulate", "does-not-exist.lwf"])
    assert result.exit_code == 2
    assert "does-not-exist.lwf does not exist" in result.output


def test_a_run_puts_the_garbage_collector_back_as_it_was():
    """The simulator tunes Python's collector for one run only (threshold and freeze undone after)."""
    import gc

    from orchestrator.runtime.simulator import collector_for_a_run

    before = gc.get_threshold()
    with collector_for_a_run():
        assert gc.get_threshold() != before
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_simulate_injects_leases_into_a_trace(tmp_path):
    """`--inject`: the injected file's advance reservations run among the trace's jobs, with ids of their own."""
    blue = EXAMPLES / "sweeps" / "data" / "blue"
    config = tmp_path / "c.toml"
    config.write_text('[simulation]\nsite = "144 CPU:100,Memory:1024"\n'
                      "[workload.swf]\nprocessors_per_node = 1\nfirst = 100\n")
    injected = blue / "injected" / "work_10-dur_4h-size_3large.lwf.gz"
    out = tmp_path / "o.json"
    result = runner.invoke(app, ["simulate", str(blue / "30days.swf.gz"), "--inject", str(injected),
                                 "--config", str(config), "--quiet", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    ids = [lease["id"] for lease in data["leases"]]
    ars = [lease for lease in data["leases"] if lease["type"] == "advance-reservation"]
    assert len(ars) == sum(1 for line in gzip.decompress(injected.read_bytes()).splitlines() if line.strip())
    assert all(lease["id"].startswith("injected-") for lease in ars)
    assert len(ids) == len(set(ids)) == len(ars) + 100
    assert data["metrics"]["ar_accepted"] + data["metrics"]["ar_rejected"] == len(ars)


def test_simulate_missing_injected_file():
    result = runner.invoke(app, ["simulate", str(EXAMPLES / "mixed.lwf"), "--inject", "nowhere.lwf"])
    assert result.exit_code == 2
    assert "--inject: nowhere.lwf does not exist" in result.output


def _swf_line(job: int, procs: int, run: int = 60, status: int = 1) -> str:
    return f"{job} 0 0 {run} {procs} -1 -1 {procs} {run} -1 {status} 1 1 1 1 1 -1 -1"


def test_simulate_says_how_many_jobs_it_skipped_and_why(tmp_path):
    trace = tmp_path / "t.swf"
    trace.write_text("; MaxProcs: 4\n" + "\n".join([
        _swf_line(1, 1), _swf_line(2, 9), _swf_line(3, 9), _swf_line(4, 1, status=5), _swf_line(5, 2)]) + "\n")
    result = runner.invoke(app, ["simulate", str(trace), "--quiet"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "skipped 2 jobs: more processors than the site" in lines
    assert "skipped 1 job: cancelled before start (status 5)" in lines
    assert "2 leases on 4 hosts" in result.output


def test_simulate_with_every_job_skipped_exits_2_saying_why(tmp_path):
    trace = tmp_path / "t.swf"
    trace.write_text("".join(_swf_line(i, 1) + "\n" for i in range(1, 4)) + _swf_line(4, 1, run=0) + "\n")
    config = tmp_path / "c.toml"
    config.write_text('[simulation]\nsite = "4 CPU:100,Memory:512"\n')   # a VM of the trace needs 1024 MiB
    out = tmp_path / "o.json"
    result = runner.invoke(app, ["simulate", str(trace), "--config", str(config), "--json", str(out), "--quiet"])
    assert result.exit_code == 2, result.output
    lines = [l for l in result.output.splitlines() if l.strip()]
    assert lines == ["error: workload: nothing left to simulate: all 4 jobs were skipped "
                     "(3 more processors than the site; 1 run time <= 0)"]
    assert not out.exists()
