"""Placing a base image on hosts without shared storage (orchestrator/runtime/image_copies.py), on the
simulated driver: a host holding the same file is left alone, one without it is given a copy, one holding
another file at that path is refused by `image add` and overwritten by `image sync`; a host on shared storage
is given nothing. The simulated hosts' copies outlive the process (their state file)."""

from __future__ import annotations

import hashlib

import pytest

from drivers.clock import SimulatedClock
from drivers.inventory import HostConfig
from drivers.simulated import SimulatedDriver, SimulatedDriverConfig
from orchestrator.model.errors import InvalidRequest
from orchestrator.planning.precopy import predict_precopy
from orchestrator.runtime.image_copies import local_checksums, place_on_host
from tests.support.times import CLI_NOW


@pytest.fixture
def files(tmp_path):
    base, other = tmp_path / "base.img", tmp_path / "other.img"
    base.write_bytes(b"base" * 4096)
    other.write_bytes(b"other" * 4096)
    return base, other


def _driver(tmp_path, shared=()):
    return SimulatedDriver({"h1": (4, 4096), "h2": (4, 4096)}, SimulatedClock(CLI_NOW),
                           SimulatedDriverConfig(shared_storage=tuple(shared)),
                           state_file=tmp_path / "hosts.json", migration_model=predict_precopy)


def test_local_storage_a_host_is_given_a_copy_once_and_a_different_file_is_refused_or_overwritten(tmp_path, files):
    base, other = files
    driver = _driver(tmp_path)
    sums = local_checksums((str(base),))
    assert sums == {str(base): hashlib.sha256(base.read_bytes()).hexdigest()}
    h1, h2 = HostConfig("h1", "sim://h1"), HostConfig("h2", "sim://h2")
    told = []
    first = place_on_host(driver, h1, sums, overwrite=False, progress=lambda *a: told.append(a))
    assert (first.outcome, first.how) == ("copied", "copied")
    assert told[-1] == ("h1", str(base), base.stat().st_size, base.stat().st_size)
    assert place_on_host(driver, h1, sums, overwrite=False).outcome == "held"
    assert driver.image_checksum("h1", str(base)) == sums[str(base)]
    assert driver.image_checksum("h2", str(base)) is None

    driver.upload_image("h2", str(base), str(other))   # h2 holds another file at the image's path
    with pytest.raises(InvalidRequest, match="h2 holds a different file at"):
        place_on_host(driver, h2, sums, overwrite=False)
    assert place_on_host(driver, h2, sums, overwrite=True).outcome == "copied"
    # (the copies are on the simulated hosts' state file: a new driver sees them)
    assert _driver(tmp_path).image_checksum("h2", str(base)) == sums[str(base)]


def test_local_storage_a_host_on_shared_storage_is_given_nothing(tmp_path, files):
    base, _ = files
    driver = _driver(tmp_path, shared=[str(tmp_path)])
    shared = HostConfig("h1", "sim://h1", shared_storage=(str(tmp_path),))
    sums = local_checksums((str(base),))
    assert place_on_host(driver, shared, sums, overwrite=False).outcome == "shared"
    assert driver.image_checksum("h1", str(base)) == sums[str(base)]   # (it sees this machine's file)
    assert local_checksums((str(base), str(tmp_path / "missing"))) is None
