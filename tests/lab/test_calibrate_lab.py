"""`leasewise calibrate migration|suspend` against the real lab: a small grid of lab guests is migrated
(suspended/resumed) for real, the table of predicted vs measured is printed, the fit is stored, and no
calibration guest or save image is left behind."""

from __future__ import annotations

import json
import math
import re

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.cli.calibrate import VM_PREFIX
from orchestrator.state.calibrated import CALIBRATION_KEY
from orchestrator.state.store import Store
from tests.lab.labkit import GUEST_DIR

pytestmark = pytest.mark.lab

SETTLE_S = "10"            # boot under TCG and touch the working set before measuring


def _rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("│").split("│")] for line in text.splitlines()
            if line.startswith("│") and line.count("│") > 5]


def _percent(cell: str) -> float:
    m = re.fullmatch(r"([+-]?\d+(?:\.\d+)?)%", cell)
    assert m, f"not an error percentage: {cell!r}"
    return float(m.group(1))


@pytest.fixture
def no_calibration_guests_left(libvirt_mod, conns):
    """Checks (and then enforces) that the command removed its `lwcal-` guests on every host."""
    yield
    left = []
    for host, conn in conns.items():
        for dom in conn.listAllDomains(0):
            if dom.name().startswith(VM_PREFIX):
                left.append(f"{dom.name()} on {host}")
                try:
                    if dom.isActive():
                        dom.destroy()
                    dom.undefine()
                except libvirt_mod.libvirtError:
                    pass
    assert not left, f"calibration guests left behind: {left}"


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})


def test_calibrate_migration_on_two_lab_hosts(lab, host_a, host_b, tmp_path, no_calibration_guests_left,
                                              record_property):
    store = tmp_path / "state.sqlite"
    result = _invoke("calibrate", "migration", "--host", host_a, "--host", host_b,
                     "--inventory", str(lab.inventory), "--guest-dir", str(GUEST_DIR),
                     "--sizes", "128,512", "--dirty", "0,2000", "--repeat", "2", "--max-downtime", "300",
                     "--timeout", "120", "--settle", SETTLE_S, "--state", str(store))
    print("\n" + result.stdout)
    assert result.exit_code == 0, result.output
    assert "predicted vs measured (libvirt driver)" in result.stdout
    assert "Fitted pre-copy model" in result.stdout

    rows = _rows(result.stdout)
    assert [(r[0], r[1]) for r in rows] == [("128", "0"), ("128", "2000"), ("512", "0"), ("512", "2000")]
    for row in rows:
        assert row[3].split("/")[0] != "0", f"no migration of this grid point succeeded: {row}"
        predicted, measured = float(row[4]), float(row[5])
        assert predicted > 0 and measured > 0
        assert math.isfinite(_percent(row[6]))
        assert math.isfinite(float(row[7])) and math.isfinite(float(row[8])) and math.isfinite(float(row[9]))

    with Store.open(store) as s:
        record = s.get_meta(CALIBRATION_KEY)["migration"]
    assert record["hosts"] == [host_a, host_b] and record["driver"] == "libvirt"
    assert record["samples"] >= 6
    assert math.isfinite(record["bandwidth_mib_s"]) and record["bandwidth_mib_s"] > 0
    assert math.isfinite(record["overhead_s"]) and record["overhead_s"] >= 0
    assert math.isfinite(record["rms_total_s"]) and math.isfinite(record["rms_downtime_ms"])
    if record["dirty_factor"] is not None:
        assert math.isfinite(record["dirty_factor"]) and record["dirty_factor"] >= 0
    record_property("calibration_migration", json.dumps(record))


def test_calibrate_suspend_on_a_lab_host(lab, host_a, tmp_path, no_calibration_guests_left, record_property):
    store = tmp_path / "state.sqlite"
    result = _invoke("calibrate", "suspend", "--host", host_a, "--inventory", str(lab.inventory),
                     "--guest-dir", str(GUEST_DIR), "--sizes", "128,512", "--settle", SETTLE_S,
                     "--state", str(store))
    print("\n" + result.stdout)
    assert result.exit_code == 0, result.output
    assert "warning" not in result.stdout   # the save images were removed
    rows = _rows(result.stdout)
    assert [(r[0], r[1], r[2]) for r in rows] == [(host_a, "128", "1"), (host_a, "512", "1")]
    with Store.open(store) as s:
        record = s.get_meta(CALIBRATION_KEY)["suspend"]
    assert record["suspend_rate_mib_s"] > 0 and record["resume_rate_mib_s"] > 0
    assert record["hosts"] == [host_a]
    save_dir = lab.private_path(host_a, next(h for h in lab.hosts if h.name == host_a).state_dir)
    assert not list(save_dir.glob(f"{VM_PREFIX}*")), "calibration save images left on the host"
    record_property("calibration_suspend", json.dumps(record))
