"""`leasewise calibrate migration --disk-mib` on the real lab brought up with `--storage local` (each host's
image directory its own): lab guests with and without a 64 MiB overlay are live-migrated, those with one by
a block migration (the overlay copied, the base already on the destination); the JSON shows the disk copied
and the fit's prediction for it; each guest goes there and back (its overlay copied both ways); nothing the
command made is left on either host."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.runtime.calibration.guests import VM_PREFIX
from tests.lab.labkit import GUEST_DIR, SHARED_DIR

pytestmark = [pytest.mark.lab, pytest.mark.usefixtures("over_local_storage")]

DISK_MIB = 64
#: a disk point's predicted total time (the mean of its two runs) may be this far (percent) from the measured
#: one. The fit has three free parameters (bandwidth, overhead, switch-over) for eight runs of 128-320 MiB
#: moved (memory plus disk) in 2-4 s on the lab's 1 Gbit/s links, where TCG guests on a machine other work
#: shares move a single run by up to half a second (a fit to one run each was once 16% off a 3 s run; to two
#: runs each, 1-2%); the benchmark's 15% target is for an 18 s migration, where that noise weighs a sixth as
#: much.
TOLERANCE_PCT = 25.0


@pytest.fixture
def guest_on_every_host(lab):
    """The lab guest's kernel and initrd in every host's own image directory (as an operator installs the
    guest on each host without shared storage), removed afterwards."""
    placed = []
    for name in lab.names:
        target = lab.host_dir(name) / "images" / GUEST_DIR.relative_to(SHARED_DIR)
        target.mkdir(parents=True, exist_ok=True)
        placed.append(target)
        for f in ("vmlinuz", "initrd.img"):
            shutil.copy2(GUEST_DIR / f, target / f)
    yield
    for target in placed:
        shutil.rmtree(target, ignore_errors=True)


def _left_on_hosts(lab, conns) -> list[str]:
    """Every calibration domain and file still on a lab host."""
    left = [f"domain {dom.name()} on {host}" for host, conn in conns.items() for dom in conn.listAllDomains(0)
            if dom.name().startswith(VM_PREFIX)]
    for name in lab.names:
        images = lab.host_dir(name) / "images"
        left += [f"file {p} of {name}" for p in images.rglob(f"{VM_PREFIX}*")]
    return left


def test_calibrate_block_migration_copies_the_overlay_and_leaves_nothing(lab, conns, host_a, host_b, tmp_path,
                                                                         guest_on_every_host):
    assert "# storage: local" in lab.inventory.read_text()
    result = CliRunner().invoke(app, [
        "calibrate", "migration", "--host", host_a, "--host", host_b, "--inventory", str(lab.inventory),
        "--guest-dir", str(GUEST_DIR), "--sizes", "128,256", "--dirty", "0", "--disk-mib", f"0,{DISK_MIB}",
        "--repeat", "2", "--max-downtime", "500", "--timeout", "120", "--json", "--no-store", "--state", str(tmp_path / "s.sqlite"),
    ], env={"COLUMNS": "250"})
    print("\n" + result.stderr + "\n" + result.stdout)
    assert result.exit_code == 0, result.output
    points = json.loads(result.stdout)["points"]
    assert [(p["memory_mib"], p["disk_mib"]) for p in points] == [(128, 0), (128, DISK_MIB), (256, 0),
                                                                  (256, DISK_MIB)]
    for point in points:
        measured, predicted = point["measured"], point["predicted"]
        assert measured is not None and point["runs"] == 2 and not point["failures"], point
        if not point["disk_mib"]:
            assert measured["disk_copied_mib"] is None and predicted["disk_s"] == 0
            continue
        # the overlay went with the migration (QEMU's disk_processed: its allocated clusters, at least the data)
        assert DISK_MIB <= measured["disk_copied_mib"] <= DISK_MIB * 1.1, point
        # the prediction counts the overlay's allocation (the planner's disk_allocation) before the memory
        assert DISK_MIB <= predicted["disk_mib"] <= DISK_MIB * 1.1 and predicted["disk_s"] > 0, point
        assert abs(predicted["error_pct"]) <= TOLERANCE_PCT, point
    left = _left_on_hosts(lab, conns)
    assert not left, f"calibrate left behind: {left}"


def test_calibrate_block_migration_that_fails_leaves_no_disk_behind(lab, conns, host_a, host_b, tmp_path):
    """A guest that cannot start (its kernel is not where `--guest-dir` says) ends the command in one line,
    after its overlay and the base were placed: both are removed from both hosts."""
    result = CliRunner().invoke(app, [
        "calibrate", "migration", "--host", host_a, "--host", host_b, "--inventory", str(lab.inventory),
        "--guest-dir", "/nonexistent/leasewise-guest", "--sizes", "128,256", "--dirty", "0", "--disk-mib", "16",
        "--no-store", "--state", str(tmp_path / "s.sqlite"),
    ], env={"COLUMNS": "250"})
    print("\n" + result.output)
    assert result.exit_code == 1, result.output
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith("error: calibrate migration:") and "removed" in line
    left = _left_on_hosts(lab, conns)
    assert not left, f"calibrate left behind: {left}"
