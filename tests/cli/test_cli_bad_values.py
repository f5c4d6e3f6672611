"""Numbers, durations and times a tester typed to break the commands: other scripts' digits (superscripts,
Arabic-Indic), dates at the calendar's edges, sizes absurd for the site, a key given twice. Each is one
error line naming the field or option, exit code 2, nothing written, nothing allocated, and at once."""

import time
import tracemalloc
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from tests.support.stores import snapshot
from tests.support.text import lines

#: (arguments, the option or key the error line must name); `lease 1` exists (2 hosts of 8 vCPUs / 16 GiB)
COMMANDS = [
    # the tester's cases
    (["lease", "submit", "--cpus", "³", "--memory", "1024", "--duration", "1h"], "--cpus"),
    (["lease", "submit", "--cpus", "1", "--memory", "1024", "--duration", "١٢m"], "--duration"),
    (["lease", "show", "²"], "lease"),
    (["lease", "submit", "--cpus", "1", "--memory", "1024", "--duration", "1h", "--start", "9999-12-31T23:00Z"],
     "--start"),
    (["lease", "submit", "--cpus", "1", "--memory", "1024", "--duration", "1h", "--start",
      "0001-01-01T00:00+01:00"], "--start"),
    (["lease", "extend", "1", "--by", "99999999d"], "--by"),
    (["lease", "submit", "--cpus", "1", "--memory", "1024", "--duration", "1h", "--start", "2026-13-45T99:00:00Z"],
     "--start"),
    (["lease", "submit", "--nodes", "100000000", "--cpus", "1", "--memory", "1024", "--duration", "1h"], "nodes"),
    (["lease", "submit", "--cpus", "1", "--memory", "1024", "--duration", "1h", "--dirty-rate", "1e308"],
     "--dirty-rate"),
    # the same kinds of value in the other options of every command
    (["lease", "submit", "--nodes", "²", "--cpus", "1", "--memory", "1024", "--duration", "1h"], "--nodes"),
    (["lease", "submit", "--nodes", "2147483648", "--cpus", "1", "--memory", "1024", "--duration", "1h"], "--nodes"),
    (["lease", "submit", "--cpus", "1", "--memory", "١٠٢٤", "--duration", "1h"], "--memory"),
    (["lease", "submit", "--cpus", "2147483647", "--memory", "1024", "--duration", "1h"], "cpus"),
    (["lease", "submit", "--cpus", "1", "--memory", "1024", "--duration", "1:²:00"], "--duration"),
    (["lease", "submit", "--cpus", "1", "--memory", "1024", "--duration", "3000000d"], "--duration"),
    (["lease", "submit", "--cpus", "1", "--memory", "1024", "--duration", "2000000d", "--start",
      "9000-01-01T00:00Z"], "--duration"),
    (["lease", "submit", "--cpus", "1", "--memory", "1024", "--duration", "1h", "--start", "٢٠٢٧-06-01T14:00Z"],
     "--start"),
    (["lease", "submit", "--cpus", "1", "--memory", "1024", "--duration", "1h", "--dirty-rate", "١"],
     "--dirty-rate"),
    (["lease", "submit", "--cpus", "1", "--memory", "1024", "--duration", "1h", "--dirty-rate", "nan"],
     "--dirty-rate"),
    (["lease", "submit", "--cpus", "1", "--memory", "1024", "--duration", "1h", "--image", "/i/d.qcow2",
      "--disk-size", "١٢G"], "--disk-size"),
    (["lease", "submit", "--cpus", "1", "--memory", "1024", "--duration", "9" * 400 + ":00"], "--duration"),
    (["lease", "submit", "--cpus", "1", "--memory", "1024", "--duration", "1h", "--dirty-rate", "9" * 400],
     "--dirty-rate"),
    (["lease", "submit", "--cpus", "1", "--memory", "1024", "--duration", "1h", "--image", "/i/d.qcow2",
      "--disk-size", "9" * 400 + "G"], "--disk-size"),
    (["lease", "show", "9" * 400], "lease"),
    (["report", "--lease", "9" * 400], "--lease"),
    (["lease", "ssh", "9" * 400, "--print"], "ID[/NODE]"),
    (["lease", "extend", "1", "--by", "٣h"], "--by"),
    (["lease", "extend", "1", "--by", "2932000d"], "--by"),
    (["lease", "extend", "³", "--by", "1h"], "lease"),
    (["lease", "cancel", "١"], "lease"),
    (["lease", "ssh", "²/1", "--print"], "ID[/NODE]"),
    (["lease", "ssh", "1/١", "--print"], "ID[/NODE]"),
    (["host", "add", "lab9", "--uri", "test:///default", "--cpus", "³", "--memory", "1024"], "--cpus"),
    (["host", "add", "lab9", "--uri", "test:///default", "--cpus", "2", "--memory", "١٠٢٤"], "--memory"),
    (["host", "add", "lab9", "--uri", "test:///default", "--cpus", "2", "--memory", "99999999999999"], "--memory"),
    (["host", "add", "lab9", "--uri", "test:///default", "--cpus", "2", "--memory", "1024", "--timeout", "٣"],
     "--timeout"),
    (["host", "list", "--timeout", "1e308"], "--timeout"),
    (["host", "drain", "lab1", "--by", "+99999999d"], "--by"),
    (["host", "drain", "lab1", "--by", "+2930000d"], "--by"),
    (["host", "drain", "lab1", "--by", "+١h"], "--by"),
    (["host", "drain", "lab1", "--by", "9999-12-31T23:00Z"], "--by"),
    (["host", "drain", "lab1", "--by", "0001-01-01T00:00+01:00"], "--by"),
    (["plan", "--from", "0001-01-01T00:00+01:00"], "--from"),
    (["plan", "--to", "9999-12-31T23:00Z"], "--to"),
    (["report", "--lease", "²"], "--lease"),
    (["run", "--max-steps", "١"], "--max-steps"),
    (["run", "--until", "9999-12-31T23:00Z"], "--until"),
    (["calibrate", "migration", "--host", "lab1", "--host", "lab2", "--sizes", "١٢٨,256"], "--sizes"),
    (["calibrate", "suspend", "--host", "lab1", "--repeat", "²"], "--repeat"),
    (["lease", "cancel", "1", "--wait", "³"], "--wait"),
    (["lease", "list", "--wait", "-1"], "--wait"),
    (["calibrate", "suspend", "--host", "lab1", "--wait", "1e308"], "--wait"),
]

#: (lease file, the key the error line must name)
LEASE_FILES = [
    ("cpus: ²\nmemory: 1024\nduration: 1h\n", "cpus"),
    ('cpus: 1\nmemory: 1024\nduration: "1:²:00"\n', "duration"),
    ("cpus: 1\nmemory: 1024\nduration: 1h\nstart: 2026-13-45T99:00:00Z\n", "start"),
    ("cpus: 1\nmemory: 1024\nduration: 1h\nstart: 9999-12-31T23:00:00Z\n", "start"),
    ("cpus: 1\nmemory: 1024\nduration: 1h\nstart: 0001-01-01T00:00:00+01:00\n", "start"),
    ("nodes: 2147483648\ncpus: 1\nmemory: 1024\nduration: 1h\n", "nodes"),
    ("nodes: 2147483647\ncpus: 1\nmemory: 1024\nduration: 1h\n", "nodes"),
    ("cpus: 1\nmemory: 1024\nduration: 1h\ndirty_rate: 1e308\n", "dirty_rate"),
    ("cpus: 1\nmemory: 1024\nduration: 1h\ndirty_rate: .inf\n", "dirty_rate"),
    ("cpus: 1\nmemory: 1024\nduration: 1h\ncpus: 2\n", "cpus"),
    ("cpus: 1\nmemory: 1024\nduration: .inf\n", "duration"),
    ("cpus: 1\nmemory: 1024\nduration: 1e30\n", "duration"),
    ("cpus: 1\nmemory: ١٠٢٤\nduration: 1h\n", "memory"),
    ("nodes: 1" + "0" * 400 + "\ncpus: 1\nmemory: 1024\nduration: 1h\n", "nodes"),
    ("cpus: 1\nmemory: 1024\nduration: 1" + "0" * 400 + "\n", "duration"),
    ("cpus: 1\nmemory: 1024\nduration: 1h\ndirty_rate: 1" + "0" * 400 + "\n", "dirty_rate"),
]


@pytest.fixture
def one_lease(site):
    assert site("lease", "submit", "--cpus", "1", "--memory", "1024", "--duration", "1h").exit_code == 0
    return site


def assert_refused(result, store_path: Path, before: str, name: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    error = lines(result.stderr)
    assert len(error) == 1, error
    assert error[0].startswith("error: ") and f"{name}:" in error[0], error[0]
    assert snapshot(store_path) == before


@pytest.mark.parametrize(("args", "name"), COMMANDS, ids=[" ".join(a)[:90] for a, _ in COMMANDS])
def test_a_bad_value_is_one_line_naming_the_option(one_lease, store_path, args, name):
    before = snapshot(store_path)
    assert_refused(one_lease(*args), store_path, before, name)


@pytest.mark.parametrize(("text", "name"), LEASE_FILES, ids=[t.replace("\n", "; ")[:90] for t, _ in LEASE_FILES])
def test_a_bad_value_in_a_lease_file_is_one_line_naming_the_key(one_lease, store_path, tmp_path, text, name):
    path = tmp_path / "lease.yaml"
    path.write_text(text)
    before = snapshot(store_path)
    result = one_lease("lease", "submit", str(path))
    assert_refused(result, store_path, before, name)
    assert lines(result.stderr)[0].startswith(f"error: {path}: ")


def test_a_key_given_twice_names_both_lines(one_lease, tmp_path):
    path = tmp_path / "lease.yaml"
    path.write_text("cpus: 1\nmemory: 1024\nduration: 1h\ncpus: 8\n")
    result = one_lease("lease", "submit", str(path))
    assert lines(result.stderr) == [f"error: {path}: cpus: is given twice (lines 1 and 4): give each key once"]


@pytest.mark.parametrize("nodes", ["100000000", "2147483647"])
def test_a_size_absurd_for_the_site_is_refused_before_anything_is_allocated(one_lease, store_path, nodes):
    """Checked against the hosts on the numbers alone: no list of a hundred million nodes is ever made."""
    before = snapshot(store_path)
    tracemalloc.start()
    began = time.monotonic()
    try:
        result = one_lease("lease", "submit", "--nodes", nodes, "--cpus", "1", "--memory", "1024", "--duration", "1h")
        took = time.monotonic() - began
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert_refused(result, store_path, before, "nodes")
    assert f"{nodes} nodes cannot fit on 2 hosts" in result.stderr
    assert took < 1.0
    assert peak < 20 * 2**20


#: (configuration, workload lines to change in examples/preemption.lwf, the key the error line must name)
SIMULATIONS = [
    ('[simulation]\nstart = 9999-12-31T23:00:00Z\n', None, "simulation.start"),
    ('[simulation]\nstart = 0001-01-01T00:00:00+01:00\n', None, "simulation.start"),
    ('[simulation]\nstart = "9998-12-31T23:00:00Z"\n', None, "duration"),
    ('[simulation]\nsite = "٤ CPU:100,Memory:1024"\n', None, "simulation.site"),
    ('[simulation]\nsite = "4 CPU:١٠٠,Memory:1024"\n', None, "simulation.site.cpu"),
    ('[simulation]\nsite = "99999999999 CPU:100,Memory:1024"\n', None, "simulation.site"),
    ('[scheduling]\nshutdown_time = "١٢m"\n', None, "scheduling.shutdown_time"),
    ('[scheduling]\nshutdown_time = 1e300\n', None, "scheduling.shutdown_time"),
    ('[scheduling]\nbackfilling = "²"\n', None, "scheduling.backfilling"),
    ('[scheduling]\nsuspend_rate = 1e-300\n', None, "scheduling.suspend_rate"),
    ('[scheduling]\nlive_migration_bandwidth = 1e308\n', None, "scheduling.live_migration_bandwidth"),
    ('[scheduling]\nscheduling_threshold_factor = 1e308\n', None, "scheduling.scheduling_threshold_factor"),
    ('[scheduling]\ndirty_rate = 1e308\n', None, "scheduling.dirty_rate"),
    ("", ('numnodes="1"', 'numnodes="100000000"'), "numnodes"),
    ("", ('numnodes="4"', 'numnodes="100000000"'), "numnodes"),
    ("", ('amount="1024"', 'amount="1e308"'), "memory"),
    ("", ('arrival="00:15:00.00"', 'arrival="00:١5:00.00"'), "arrival"),
    ("", ('time="01:00:00.00"', 'time="9999999999:00:00:00"'), "duration"),
]


@pytest.mark.parametrize(("config", "change", "name"), SIMULATIONS,
                         ids=[c.replace("\n", " ") or f"{w[1]}" for c, w, _ in SIMULATIONS])
def test_simulate_refuses_bad_values_in_one_line(tmp_path, config, change, name):
    workload = (Path(__file__).resolve().parents[2] / "examples" / "preemption.lwf").read_text()
    if change is not None:
        workload = workload.replace(*change)
    (tmp_path / "w.lwf").write_text(workload)
    (tmp_path / "c.toml").write_text(config)
    began = time.monotonic()
    result = CliRunner().invoke(app, ["simulate", str(tmp_path / "w.lwf"), "--config", str(tmp_path / "c.toml"),
                                      "--quiet", "--json", str(tmp_path / "out.json")])
    assert result.exit_code == 2, result.output
    error = lines(result.stderr)
    assert len(error) == 1 and error[0].startswith("error: ") and f"{name}:" in error[0], error
    assert not (tmp_path / "out.json").exists()
    assert time.monotonic() - began < 5


@pytest.mark.parametrize(("line", "name"), [
    ("1 1e300 0 100 1 -1 -1 1 100 -1 1 1 1 -1 1 -1 -1 -1", "submit_time (field 2)"),
    ("1 0 0 1e300 1 -1 -1 1 100 -1 1 1 1 -1 1 -1 -1 -1", "run_time (field 4)"),
    ("1 0 0 100 1 -1 -1 1 1e300 -1 1 1 1 -1 1 -1 -1 -1", "requested_time (field 9)"),
    ("1 0 0 ١٠٠ 1 -1 -1 1 100 -1 1 1 1 -1 1 -1 -1 -1", "run_time (field 4)"),
    ("; MaxProcs: 99999999999", "MaxProcs"),
    ("; MaxProcs: ١٠", "MaxProcs"),
])
def test_simulate_refuses_bad_numbers_in_a_trace(tmp_path, line, name):
    (tmp_path / "t.swf").write_text(line + "\n" + "2 0 0 100 1 -1 -1 1 100 -1 1 1 1 -1 1 -1 -1 -1\n")
    result = CliRunner().invoke(app, ["simulate", str(tmp_path / "t.swf"), "--quiet"])
    assert result.exit_code == 2, result.output
    error = lines(result.stderr)
    assert len(error) == 1 and f"{name}:" in error[0], error
