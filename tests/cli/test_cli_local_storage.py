"""Hosts without shared storage, on the simulated driver: `image add` gives every host a copy of its own
(checksummed), `image list` says who holds it, a host added later holds nothing until `image sync`, and a
lease booting the image is planned on the hosts holding it only. Hosts that name shared storage read the
image there and are given nothing."""

from __future__ import annotations

import hashlib
import json
import subprocess
from datetime import timedelta

import pytest

from drivers.clock import SimulatedClock
from drivers.simulated import SimulatedDriver
from orchestrator.config import Config
from orchestrator.model.states import LeaseState
from orchestrator.planning.precopy import predict_precopy
from orchestrator.runtime.daemon import Daemon
from orchestrator.state.store import Store
from tests.support.times import CLI_NOW


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "images" / "base.qcow2"
    path.parent.mkdir()
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(path), "1G"], check=True)
    return path


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _add_hosts(cli, *names, shared=None):
    for name in names:
        extra = ["--shared-storage", str(shared)] if shared else []
        result = cli("host", "add", name, "--uri", "test:///default", "--cpus", "8", "--memory", "16384", *extra)
        assert result.exit_code == 0, result.output


def _listed(cli):
    result = cli("image", "list", "--json")
    assert result.exit_code == 0, result.output
    return {i["name"]: i for i in json.loads(result.stdout)}


def test_local_storage_image_add_copies_to_every_host_and_a_host_added_later_gets_it_by_sync(cli, store_path, image):
    _add_hosts(cli, "lab1", "lab2")
    added = cli("image", "add", "deb", str(image))
    assert added.exit_code == 0, added.output
    assert "copied to or held by 2 hosts" in added.stdout
    assert added.stdout.count("copied, checksum verified on the host") == 2
    deb = _listed(cli)["deb"]
    assert deb["checksums"] == [[str(image), _sha256(image)]]
    assert deb["hosts"] == {"lab1": "copied", "lab2": "copied"}
    assert "lab1, lab2" in cli("image", "list").stdout

    _add_hosts(cli, "lab3")
    assert _listed(cli)["deb"]["hosts"] == {"lab1": "copied", "lab2": "copied"}
    # three nodes of 8 vCPUs need three hosts: with two holding the image the lease cannot be placed
    submitted = cli("lease", "submit", "--nodes", "3", "--cpus", "8", "--memory", "1024",
                    "--duration", "1h", "--image", "deb")
    assert submitted.exit_code == 0, submitted.output
    with Store.open(store_path) as store:
        assert store.lease(1).state is LeaseState.QUEUED

    synced = cli("image", "sync", "deb", "--host", "lab3")
    assert synced.exit_code == 0, synced.output
    assert "held by 1 of 1 host (1 copied now)" in synced.stdout
    assert _listed(cli)["deb"]["hosts"] == {"lab1": "copied", "lab2": "copied", "lab3": "copied"}
    with Store.open(store_path) as store:
        hosts = {h.name: (h.vcpus, h.memory_mib) for h in store.hosts()}
        driver = SimulatedDriver.for_hosts(hosts, SimulatedClock(CLI_NOW), migration_model=predict_precopy)
        Daemon(store, Config(), driver, SimulatedClock(CLI_NOW)).step()
        lease = store.lease(1)
        assert lease.state is LeaseState.SCHEDULED   # (planned now: the queue was looked at again)
        assert set(lease.last_vm.nodes.values()) == {"lab1", "lab2", "lab3"}


def test_local_storage_a_lease_goes_only_to_the_hosts_holding_its_image(cli, store_path, image):
    _add_hosts(cli, "lab1")
    assert cli("image", "add", "deb", str(image)).exit_code == 0
    _add_hosts(cli, "lab2")
    for _ in range(2):   # (the second would go to the empty lab2 if the image did not keep it off)
        submitted = cli("lease", "submit", "--cpus", "4", "--memory", "1024", "--duration", "1h", "--image", "deb")
        assert submitted.exit_code == 0, submitted.output
    with Store.open(store_path) as store:
        assert [set(store.lease(i).last_vm.nodes.values()) for i in (1, 2)] == [{"lab1"}, {"lab1"}]


def test_hosts_on_shared_storage_read_the_image_there_and_are_given_no_copy(cli, image):
    _add_hosts(cli, "lab1", "lab2", shared=image.parent)
    added = cli("image", "add", "deb", str(image))
    assert added.exit_code == 0, added.output
    assert "readable on 2 hosts" in added.stdout and "copied" not in added.stdout
    deb = _listed(cli)["deb"]
    assert deb["checksums"] == [] and deb["hosts"] == {}
    assert "all (shared)" in cli("image", "list").stdout
    refused = cli("image", "sync", "deb")
    assert refused.exit_code == 2 and "on storage the hosts share: nothing to copy" in refused.output


def test_sync_refuses_an_image_changed_since_it_was_added(cli, image):
    _add_hosts(cli, "lab1")
    assert cli("image", "add", "deb", str(image)).exit_code == 0
    with open(image, "ab") as handle:
        handle.write(b"\0" * 512)
    refused = cli("image", "sync", "deb")
    assert refused.exit_code == 2, refused.output
    assert f"{image} changed since it was added" in refused.output
    unknown = cli("image", "sync", "deb", "--host", "lab9")
    assert unknown.exit_code == 2 and "--host: no host named 'lab9'" in unknown.output
