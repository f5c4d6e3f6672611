"""Every table the CLI prints, at 80 columns and in a pipe: no value cut with "…", every number, id and
time whole (checked against the command's --json), and the columns left out named in a footnote."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app, common
from orchestrator.cli.leases import size_text
from tests.support.times import CLI_NOW

ROOT = Path(__file__).resolve().parents[2]
NOW = CLI_NOW


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "now", lambda: NOW)
    return tmp_path / "state.sqlite"


def run(store: Path, *args: str, width: int = 80):
    result = CliRunner().invoke(app, [*args, "--state", str(store)], env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    return result


def readable(text: str, *whole: str) -> None:
    assert "…" not in text, text
    missing = [value for value in whole if value not in text]
    assert not missing, (missing, text)


@pytest.fixture
def site(store):
    """Three hosts (one with a long name and URI) and five leases of every kind, some with names."""
    for name, uri in (("lab1", "qemu+tcp://10.77.0.11/system"), ("lab2", "qemu+tcp://10.77.0.12/system"),
                      ("a-much-longer-host-name", "qemu+ssh://root@a-much-longer-host-name.example.org/system")):
        run(store, "host", "add", name, "--uri", uri, "--cpus", "8", "--memory", "16384")
    for args in (["--nodes", "2", "--cpus", "4", "--memory", "2048", "--duration", "2h", "--start",
                  "2027-03-01T10:00:00Z", "--name", "exp-7-with-a-long-name", "--no-preemptible"],
                 ["--cpus", "4", "--memory", "1024", "--duration", "3h"],
                 ["--nodes", "3", "--cpus", "8", "--memory", "4096", "--duration", "5h"],
                 ["--cpus", "2", "--memory", "512", "--duration", "20m", "--start", "now"],
                 ["--nodes", "2", "--cpus", "8", "--memory", "16384", "--duration", "1h", "--start",
                  "2027-03-01T10:30:00Z"]):
        run(store, "lease", "submit", *args)
    return store


def test_host_list_at_80_columns(site):
    text = run(site, "host", "list").stdout
    hosts = json.loads(run(site, "host", "list", "--json").stdout)
    values = []
    for host in hosts:
        values += [str(host["vcpus"]), f"{host['memory_mib']} MiB"]
        values += [str(i) for i in host["leases_now"] + host["leases_planned"]]
    readable(text, *values)
    narrower = run(site, "host", "list", width=60).stdout
    readable(narrower, *values)
    assert narrower.splitlines()[-1] == "(uri: left out to fit 60 columns; --json has every column)"


def test_lease_list_at_80_columns(site):
    text = run(site, "lease", "list").stdout
    leases = json.loads(run(site, "lease", "list", "--json").stdout)
    readable(text, *[str(lease["id"]) for lease in leases], *[lease[k] for lease in leases for k in ("start", "end")])
    assert text.splitlines()[-1] == "(type, nodes: left out to fit 80 columns; --json has every column)"
    assert "exp-7-with-a" in text   # the name is kept (wrapped)


def test_lease_list_at_80_columns_shows_each_leases_size_in_a_few_characters(store):
    """The demo's site and leases (examples/demo.sh): at 80 columns the sizes read `4×2c/2G` (they took four
    lines a lease); a terminal wide enough for the whole table gets them in full; --json has the numbers."""
    for i in range(1, 5):
        run(store, "host", "add", f"sim{i}", "--uri", f"sim://sim{i}", "--cpus", "2", "--memory", "4096")
    run(store, "lease", "submit", "--nodes", "4", "--cpus", "2", "--memory", "2048", "--duration", "2h",
        "--name", "batch-job")
    run(store, "lease", "submit", "--nodes", "4", "--cpus", "2", "--memory", "4096", "--duration", "1h",
        "--start", "2027-03-01T10:00:00Z", "--no-preemptible", "--name", "class-lab")
    CliRunner().invoke(app, ["lease", "submit", "--cpus", "1", "--memory", "1024", "--duration", "20m", "--start",
                             "now", "--name", "quick-check", "--state", str(store)])   # (rejected: no room now)
    text = run(store, "lease", "list").stdout
    sizes = {row.split()[0]: row.split()[3] for row in text.splitlines()[3:] if row[:2].strip() in ("1", "2", "3")}
    assert sizes == {"1": "4×2c/2G", "2": "4×2c/4G", "3": "1×1c/1G"}, text
    assert "nodes" not in text.splitlines()[-1], text
    leases = json.loads(run(store, "lease", "list", "--json").stdout)
    assert [(lease["nodes"], lease["cpus"], lease["memory_mib"]) for lease in leases] == [(4, 2, 2048), (4, 2, 4096),
                                                                                        (1, 1, 1024)]
    wide = run(store, "lease", "list", width=250).stdout
    assert "4 × 2 vCPU / 2048 MiB" in wide and "1 × 1 vCPU / 1024 MiB" in wide and "×2c" not in wide


@pytest.mark.parametrize(("mib", "text"), [(512, "512M"), (1024, "1G"), (1536, "1.5G"), (1100, "1100M"),
                                           (4096, "4G"), (262144, "256G"), (0.5, "0.5M")])
def test_sizes_are_exact_in_few_characters(mib, text):
    assert size_text(mib) == text


def test_lease_show_at_80_columns(site):
    text = run(site, "lease", "show", "2").stdout
    shown = json.loads(run(site, "lease", "show", "2", "--json").stdout)
    readable(text, *[str(rr["id"]) for rr in shown["plan"]], *[rr[k] for rr in shown["plan"] for k in ("start", "end")],
             *[h["time"] for h in shown["history"]], *[str(e["id"]) for e in shown["events"]])


def test_calibrate_migration_at_80_columns(site):
    for name in ("sim1", "sim2"):
        run(site, "host", "add", name, "--uri", f"sim://{name}", "--cpus", "8", "--memory", "16384")
    args = ("calibrate", "migration", "--host", "sim1", "--host", "sim2", "--dry-run")
    text = run(site, *args).stdout
    data = json.loads(run(site, *args, "--json").stdout)
    values = []
    for point in data["points"]:
        values += [str(point["memory_mib"]), str(point["dirty_pages_s"])]
        if point["measured"] is not None:
            values += [f"{point['measured']['total_s']:.2f}", f"{point['measured']['downtime_ms']:.1f}",
                       f"{point['predicted']['total_s']:.2f}", f"{point['predicted']['downtime_ms']:.1f}"]
    values += [f"{data['fit']['bandwidth_mib_s']:.3f}", f"{data['fit']['overhead_s']:.3f}"]
    readable(text, *values)
    assert "(dirty MiB/s: left out to fit 80 columns; --json has every column)" in text


def test_calibrate_suspend_at_80_columns(site):
    run(site, "host", "add", "sim1", "--uri", "sim://sim1", "--cpus", "8", "--memory", "16384")
    args = ("calibrate", "suspend", "--host", "sim1", "--sizes", "128,1024,16384", "--dry-run")
    text = run(site, *args).stdout
    data = json.loads(run(site, *args, "--json").stdout)
    readable(text, *[f"{p[what]['measured_s']:.2f}" for p in data["points"] for what in ("suspend", "resume")],
             f"{data['fit']['suspend']['rate_mib_s']:.3f}", f"{data['fit']['resume']['rate_mib_s']:.3f}")
    assert "left out" not in text


def test_migrate_dry_run_at_80_columns(tmp_path):
    args = ["migrate", "vm-with-a-long-name", "--to", "a-much-longer-host-name", "--dry-run", "--memory", "16384",
            "--dirty-rate", "250", "--bandwidth", "117.5"]
    text = CliRunner().invoke(app, args, env={"COLUMNS": "80"}).stdout
    data = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    readable(text, f"{data['total_seconds']:.2f} s", f"{data['downtime_ms']:.1f} ms", f"{data['transferred_mib']:.1f} MiB")


def test_a_pipe_gets_80_columns_and_the_same_readable_tables(site):
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", "from orchestrator.cli import main; main()", "lease", "list",
                          "--state", str(site)], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == run(site, "lease", "list", width=80).stdout
    readable(out.stdout, "2027-03-01T10:00:00Z", "2027-03-01T17:00:00Z")
