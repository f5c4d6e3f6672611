"""`--json` on the commands that print a table or a chart and had no JSON form (plan, host drain, calibrate
migration|suspend; migrate is in test_cli_migrate.py): one JSON document alone on stdout, with what the
text shows; what a command says besides (progress, "stored in ...") goes to stderr."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app, common
from orchestrator.cli import plan as plan_cli
from orchestrator.state.calibrated import CALIBRATION_KEY
from orchestrator.state.store import Store
from tests.support.times import CLI_NOW

NOW = CLI_NOW


@pytest.fixture
def clock(monkeypatch):
    monkeypatch.setattr(common, "now", lambda: NOW)
    monkeypatch.setattr(plan_cli, "now", lambda: NOW)   # plan imports the function itself


def make_cli(store: Path):
    def invoke(*args: str):
        return CliRunner().invoke(app, [*args, "--state", str(store)], env={"COLUMNS": "250"})

    return invoke


def make_site(store: Path):
    """lab1 and lab2 (8 vCPUs each); lease 1 best-effort on lab1 now, lease 2 best-effort on lab2 now,
    lease 3 an advance reservation of both hosts at 12:00."""
    cli = make_cli(store)
    for name in ("lab1", "lab2"):
        assert cli("host", "add", name, "--uri", "test:///default", "--cpus", "8", "--memory", "16384").exit_code == 0
    for args in (["--cpus", "4", "--duration", "1h"], ["--cpus", "4", "--duration", "2h"],
                 ["--nodes", "2", "--cpus", "8", "--duration", "1h", "--start", "2027-03-01T12:00:00Z"]):
        assert cli("lease", "submit", "--memory", "1024", *args).exit_code == 0
    return cli


@pytest.fixture
def site(tmp_path, clock):
    return make_site(tmp_path / "state.sqlite")


def document(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# -- plan -----------------------------------------------------------------------------------------------------
def test_plan_json_is_the_timeline_each_hosts_reservations_and_the_leases(site):
    data = document(site("plan", "--json"))
    assert (data["start"], data["end"], data["now"]) == ("2027-03-01T09:00:00Z", "2027-03-01T13:00:00Z",
                                                         "2027-03-01T09:00:00Z")
    hosts = {h["name"]: h["reservations"] for h in data["hosts"]}
    assert list(hosts) == ["lab1", "lab2"]
    lab1 = [(r["lease"], r["kind"], r["start"], r["end"]) for r in hosts["lab1"]]
    assert (1, "vm", "2027-03-01T09:00:00Z", "2027-03-01T10:00:00Z") in lab1
    assert (3, "vm", "2027-03-01T12:00:00Z", "2027-03-01T13:00:00Z") in lab1
    assert {r["lease"] for r in hosts["lab2"]} == {2, 3}
    assert all(r["state"] == "scheduled" and r["label"] == str(r["lease"]) for rs in hosts.values() for r in rs)
    assert data["leases"] == [{"id": 1, "label": "1", "type": "BE", "state": "scheduled", "placement": None},
                              {"id": 2, "label": "2", "type": "BE", "state": "scheduled", "placement": None},
                              {"id": 3, "label": "3", "type": "AR", "state": "scheduled", "placement": None}]


def test_plan_json_of_a_window_with_nothing_in_it_and_of_no_store(site, tmp_path, clock):
    data = document(site("plan", "--json", "--from", "2027-03-02T00:00:00Z"))
    assert data["start"] == "2027-03-02T00:00:00Z"
    assert [h["reservations"] for h in data["hosts"]] == [[], []] and data["leases"] == []
    result = CliRunner().invoke(app, ["plan", "--json"], env={"XDG_DATA_HOME": str(tmp_path / "none")})
    assert document(result) == {"start": None, "end": None, "now": "2027-03-01T09:00:00Z", "hosts": [], "leases": []}


# -- host drain -------------------------------------------------------------------------------------------------
def test_host_drain_json_says_what_the_text_says(tmp_path, clock):
    text = make_site(tmp_path / "text.sqlite")("host", "drain", "lab2", "--by", "+30m")
    assert text.exit_code == 0, text.output
    data = document(make_site(tmp_path / "json.sqlite")("host", "drain", "lab2", "--by", "+30m", "--json"))
    assert data["host"] == "lab2" and data["unavailable_from"] == "2027-03-01T13:00:00Z"   # the AR keeps it
    assert [lease["id"] for lease in data["leases"]] == [2, 3]
    said = [f"lease {lease['id']}: {lease['change']}" for lease in data["leases"]]
    said.append(f"host lab2 drained: unavailable from {data['unavailable_from']}")
    assert [line for line in text.stdout.splitlines() if line.strip()] == said
    hosts = {h["name"]: h for h in json.loads(make_cli(tmp_path / "json.sqlite")("host", "list", "--json").stdout)}
    assert hosts["lab2"]["available"] is False


# -- calibrate --------------------------------------------------------------------------------------------------
@pytest.fixture
def sim_site(tmp_path, clock):
    cli = make_cli(tmp_path / "state.sqlite")
    for name in ("sim1", "sim2"):
        assert cli("host", "add", name, "--uri", f"sim://{name}", "--cpus", "8", "--memory", "16384").exit_code == 0
    return cli


def test_calibrate_migration_json_has_every_point_the_fit_and_where_it_is_stored(sim_site, tmp_path):
    result = sim_site("calibrate", "migration", "--host", "sim1", "--host", "sim2", "--sizes", "128,256",
                      "--dirty", "0,1000,50000", "--json")
    data = document(result)
    assert "calibrating live migration sim1 <-> sim2" in result.stderr and "stored in" in result.stderr
    assert (data["hosts"], data["driver"], data["max_downtime_ms"]) == (["sim1", "sim2"], "simulated", 300.0)
    assert [(p["memory_mib"], p["dirty_pages_s"]) for p in data["points"]] == [
        (m, d) for m in (128, 256) for d in (0, 1000, 50000)]
    for point in data["points"]:
        if point["dirty_pages_s"] == 50000:           # never converges: aborted, nothing measured
            assert point["measured"] is None and point["predicted"] is None and point["failures"] == ["aborted"]
            continue
        assert point["runs"] == 1 and point["failures"] == []
        assert point["predicted"]["total_s"] == pytest.approx(point["measured"]["total_s"])   # the model itself
        assert point["predicted"]["error_pct"] == pytest.approx(0.0, abs=1e-6)
    configured = data["configured"]["live_migration_bandwidth"]
    assert data["fit"]["bandwidth_mib_s"] == pytest.approx(configured, rel=1e-6)
    assert data["stored"] == {"path": str(tmp_path / "state.sqlite"), "key": f"{CALIBRATION_KEY}.migration"}
    with Store.open(tmp_path / "state.sqlite") as store:
        assert store.get_meta(CALIBRATION_KEY)["migration"]["bandwidth_mib_s"] == data["fit"]["bandwidth_mib_s"]


def test_calibrate_suspend_json_dry_run_stores_nothing(sim_site, tmp_path):
    result = sim_site("calibrate", "suspend", "--host", "sim1", "--host", "sim2", "--sizes", "128,512", "--dry-run",
                      "--json")
    data = document(result)
    assert "not stored (--dry-run)" in result.stderr and data["stored"] is None
    assert [(p["host"], p["memory_mib"], p["cycles"]) for p in data["points"]] == [
        ("sim1", 128, 1), ("sim1", 512, 1), ("sim2", 128, 1), ("sim2", 512, 1)]
    rate = data["configured"]["suspend_rate"]
    for point in data["points"]:
        for what in ("suspend", "resume"):
            assert point[what]["predicted_s"] == pytest.approx(point[what]["measured_s"])
    assert data["fit"]["suspend"]["rate_mib_s"] == pytest.approx(rate)
    assert data["fit"]["suspend"]["samples"] == 4 and data["fit"]["resume"]["samples"] == 4
    with Store.open(tmp_path / "state.sqlite") as store:
        assert not store.get_meta(CALIBRATION_KEY)
