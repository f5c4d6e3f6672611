"""`leasewise migrate`: the dry-run prediction, one-line errors with exit code 2, and a real (failing)
migration against libvirt's test hypervisor, whose report is still printed."""

import json
import re

import pytest
from typer.testing import CliRunner

from drivers.base import VMSpec
from drivers.inventory import HostConfig, dump_inventory
from drivers.libvirt import LibvirtDriver
from orchestrator.cli import app
from orchestrator.planning.precopy import predict_precopy

PREFIX = ["migrate"]


@pytest.fixture
def run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no deploy/lab/run/inventory.toml to fall back on

    def invoke(*args: str, env: dict | None = None):
        return CliRunner().invoke(app, [*PREFIX, *args], env={"LEASEWISE_INVENTORY": None, **(env or {})})

    return invoke


def error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


def test_dry_run_prints_the_precopy_prediction(run):
    result = run("vm1", "--to", "lab2", "--dry-run", "--memory", "1024", "--dirty-rate", "20",
                 "--bandwidth", "100", "--max-downtime", "300", "--overhead", "1.5")
    assert result.exit_code == 0, result.output
    expected = predict_precopy(1024, 100, 20, 300, timeout_s=600, overhead_s=1.5)
    assert f"{expected.total_seconds:.2f} s" in result.stdout          # 14.28 s
    assert f"{expected.downtime_ms:.1f} ms" in result.stdout           # 81.9 ms
    assert "completed" in result.stdout and "nothing touched" in result.stdout
    assert f"{expected.transferred_mib:.1f} MiB" in result.stdout


def test_dry_run_forced_outcome(run):
    result = run("vm1", "--to", "lab2", "--dry-run", "--memory", "1024", "--dirty-rate", "500",
                 "--bandwidth", "100", "--timeout", "30", "--on-timeout", "force")
    assert result.exit_code == 0, result.output
    assert re.search(r"outcome\s*│\s*forced\s*│", result.stdout)
    assert re.search(r"converged\s*│\s*no\s*│", result.stdout)


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--max-downtime", "-5"], "--max-downtime"),
        (["--max-downtime=0"], "--max-downtime"),
        (["--timeout", "-1"], "--timeout"),
        (["--bandwidth", "0"], "--bandwidth"),
        (["--on-timeout", "later"], "--on-timeout"),
        (["--dry-run", "--memory", "-1", "--dirty-rate", "1", "--bandwidth", "1"], "--memory"),
    ],
)
def test_bad_values_give_one_line_naming_the_option_and_exit_2(run, args, option):
    result = run("vm1", "--to", "lab2", *args)
    assert result.exit_code == 2
    lines = error_lines(result)
    assert len(lines) == 1, lines
    assert option in lines[0] and lines[0].startswith("error:")


def test_dry_run_without_its_inputs_says_which_is_missing(run):
    result = run("vm1", "--to", "lab2", "--dry-run", "--memory", "512", "--bandwidth", "100")
    assert result.exit_code == 2
    [line] = error_lines(result)
    assert "--dirty-rate" in line and "no inventory" in line
    result = run("vm1", "--to", "lab2", "--dry-run", "--memory", "512", "--dirty-rate", "5")
    assert result.exit_code == 2 and "--bandwidth" in error_lines(result)[0]


def test_migrate_without_an_inventory_is_one_line(run, tmp_path):
    result = run("vm1", "--to", "lab2")
    assert result.exit_code == 2 and "no inventory" in error_lines(result)[0]
    result = run("vm1", "--to", "lab2", "--inventory", str(tmp_path / "missing.toml"))
    assert result.exit_code == 2 and "file not found" in error_lines(result)[0]


@pytest.fixture
def test_inventory(tmp_path):
    """An inventory of libvirt test hosts, with a running VM on the shared test:///default host."""
    node = tmp_path / "node.xml"
    node.write_text("<node><cpu><nodes>1</nodes><sockets>1</sockets><cores>4</cores><threads>1</threads>"
                    "<mhz>1000</mhz></cpu><memory>8388608</memory></node>")
    hosts = [HostConfig("ta", "test:///default", domain_type="qemu"), HostConfig("tb", f"test://{node}", domain_type="qemu")]
    path = tmp_path / "inventory.toml"
    path.write_text(dump_inventory(hosts))
    # test:///default keeps its domains while any connection to it is open: this one keeps the VM
    # visible to the command's own connection.
    keeper = LibvirtDriver(hosts, retry_wait_s=0.0)
    keeper.start(VMSpec("cli-vm", 1, 192), "ta")
    yield path, keeper
    if keeper.locate("cli-vm"):
        keeper.stop("cli-vm", graceful_timeout=0)
    keeper.close()


def test_dry_run_reads_memory_from_the_vm_through_the_inventory(run, test_inventory):
    path, _ = test_inventory
    result = run("cli-vm", "--to", "tb", "--dry-run", "--dirty-rate", "0", "--bandwidth", "64",
                 env={"LEASEWISE_INVENTORY": str(path)})
    assert result.exit_code == 0, result.output
    assert "192 MiB" in result.stdout and "3.00 s" in result.stdout  # 192 MiB / 64 MiB/s
    # libvirt's test hypervisor has no dirty-rate measurement to default --dirty-rate from.
    result = run("cli-vm", "--to", "tb", "--dry-run", "--bandwidth", "64", "--inventory", str(path))
    assert result.exit_code == 2 and "domdirtyrate-calc" in error_lines(result)[0]


def test_failed_migration_prints_the_report_and_one_error_line(run, test_inventory):
    path, keeper = test_inventory
    result = run("cli-vm", "--to", "tb", "--inventory", str(path), "--max-downtime", "100")
    assert result.exit_code == 2
    [line] = error_lines(result)
    assert "not supported" in line and "cli-vm" in line
    assert "VM stays on the source" in result.stdout  # the report table
    assert keeper.locate("cli-vm") == "ta"


def test_dry_run_json_is_the_prediction(run):
    result = run("vm1", "--to", "lab2", "--dry-run", "--memory", "1024", "--dirty-rate", "20",
                 "--bandwidth", "100", "--max-downtime", "300", "--overhead", "1.5", "--json")
    assert result.exit_code == 0, result.output
    expected = predict_precopy(1024, 100, 20, 300, timeout_s=600, overhead_s=1.5)
    assert json.loads(result.stdout) == {
        "vm": "vm1", "to": "lab2", "dry_run": True, "memory_mib": 1024.0, "dirty_rate_mib_s": 20.0,
        "dirty_factor": 1.0, "bandwidth_mib_s": 100.0, "max_downtime_ms": 300.0, "outcome": expected.outcome,
        "converged": expected.converged, "total_seconds": expected.total_seconds,
        "downtime_ms": expected.downtime_ms, "passes": expected.passes, "dirty_page_rounds": expected.iterations,
        "transferred_mib": expected.transferred_mib}


def test_failed_migration_json_is_the_report_and_the_error_line_stays_on_stderr(run, test_inventory):
    path, keeper = test_inventory
    result = run("cli-vm", "--to", "tb", "--inventory", str(path), "--max-downtime", "100", "--json")
    assert result.exit_code == 2
    *progress, line = error_lines(result)           # the progress bar goes to stderr too
    assert line.startswith("error: ") and "not supported" in line
    assert "cli-vm -> tb" in progress[0]
    report = json.loads(result.stdout)
    assert (report["vm"], report["source"], report["destination"]) == ("cli-vm", "ta", "tb")
    assert report["success"] is False and report["outcome"] == "failed" and report["error"]
    assert keeper.locate("cli-vm") == "ta"
