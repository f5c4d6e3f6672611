"""`leasewise calibrate show`: the rates the planner uses, configured, calibrated or learned, and from what."""

from __future__ import annotations

import json
from datetime import datetime

from orchestrator.model.timeutil import UTC
from orchestrator.planning.learning import LIVE_MIGRATE, SUSPEND
from orchestrator.state.calibrated import MIGRATION_SECTION, store_calibration
from orchestrator.state.learned import record_observation, seed
from orchestrator.state.store import Store

AT = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)


def test_with_nothing_measured_every_rate_is_the_configured_one(site, tmp_path):
    config = tmp_path / "rates.toml"
    config.write_text("[scheduling]\nsuspend_rate = 64.0\nmigration_bandwidth = 50.0\n")
    result = site("calibrate", "show", "--json", config=config)
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert [(r["kind"], r["rate"], r["source"]) for r in shown["planner"]] == [
        ("live-migrate", 50.0, "[scheduling] migration_bandwidth"), ("move", 50.0, "[scheduling] migration_bandwidth"),
        ("suspend", 64.0, "[scheduling] suspend_rate"), ("resume", 32.0, "[scheduling] resume_rate")]
    assert shown["learned"] == []
    text = site("calibrate", "show", config=config).stdout
    assert "nothing learned yet" in text and "[scheduling] suspend_rate" in text


def test_a_calibration_replaces_the_configured_rate_and_learned_rates_are_listed_with_their_source(site, store_path):
    with Store.open(store_path) as store:
        store_calibration(store, MIGRATION_SECTION, {"bandwidth_mib_s": 118.5, "overhead_s": 0.4,
                                                     "at": "2026-11-30T08:00:00Z", "hosts": ["lab1", "lab2"],
                                                     "samples": 12})
        record_observation(store, LIVE_MIGRATE, "lab1>lab2", 118.5, 90.0, AT)   # (after the campaign: kept)
        seed(store, LIVE_MIGRATE, "lab2>lab1", 300.0, AT)
        record_observation(store, SUSPEND, "lab2", 32.0, 48.0, AT)
    shown = json.loads(site("calibrate", "show", "--json").stdout)
    live = shown["planner"][0]
    assert (live["kind"], live["rate"], live["source"], live["at"], live["hosts"]) == (
        "live-migrate", 118.5, "calibrate migration", "2026-11-30T08:00:00Z", ["lab1", "lab2"])
    assert shown["planner"][2]["source"] == "[scheduling] suspend_rate"   # (no suspend campaign)
    learned = [(r["kind"], r["key"], r["samples"], r["source"]) for r in shown["learned"]]
    assert learned == [("live-migrate", "lab1>lab2", 1, "operations"), ("live-migrate", "lab2>lab1", 0, "host check"),
                       ("suspend", "lab2", 1, "operations")]
    assert shown["learned"][1]["rate_mib_s"] == 300.0
    assert shown["learned"][0]["rate_mib_s"] == 90.0
    text = site("calibrate", "show").stdout
    assert "calibrate migration, 2026-11-30T08:00:00Z on lab1, lab2" in text
    assert "lab2>lab1" in text and "host check" in text


def test_no_store_and_a_server_are_refused_in_one_line(cli, store_path):
    missing = cli("calibrate", "show")
    assert missing.exit_code == 2
    assert missing.output.strip() == f"error: nothing calibrated or learned yet (there is no store at {store_path})"
    served = cli("calibrate", "show", "--server", "https://lab.example:8443")
    assert served.exit_code == 2 and len(served.output.strip().splitlines()) == 1
    assert "the server at https://lab.example:8443 owns the hosts and the store" in served.output
