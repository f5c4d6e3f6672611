"""The path a person takes on the simulated driver: catalogue an image, submit a lease with a key, see
each VM's MAC, address and ssh line, reach it, and find nothing left once the lease ends; and bad input
that names its field and writes nothing."""

from __future__ import annotations

import json
import subprocess
from datetime import timedelta

import pytest
from typer.testing import CliRunner

from drivers.clock import SimulatedClock
from drivers.simulated import SimulatedDriver
from drivers.simulated.driver import simulated_address
from orchestrator.config import Config
from orchestrator.model.states import LeaseState
from orchestrator.planning.precopy import predict_precopy
from orchestrator.runtime.daemon import Daemon
from orchestrator.state.store import Store
from orchestrator.cli import app
from tests.support.times import CLI_NOW


@pytest.fixture
def image(tmp_path):
    """A real 1 GiB (virtual) qcow2, made by qemu-img."""
    path = tmp_path / "base.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(path), "1G"], check=True)
    return path


@pytest.fixture
def key(tmp_path):
    path = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice@lab", "-f", str(path)], check=True)
    return path


def _driver(store_path):
    with Store.open(store_path) as store:
        hosts = {h.name: (h.vcpus, h.memory_mib) for h in store.hosts()}
    return SimulatedDriver.for_hosts(hosts, SimulatedClock(CLI_NOW), state_file=store_path.with_suffix(".hosts.json"),
                                     migration_model=predict_precopy)


def _step(store_path, at):
    with Store.open(store_path) as store:
        Daemon(store, Config(), _driver(store_path), SimulatedClock(at)).step()


def test_image_lease_ssh_and_nothing_left_after_the_end(site, store_path, image, key, clock):
    added = site("image", "add", "deb", str(image), "--login-user", "alice")
    assert added.exit_code == 0, added.output
    assert "qcow2, 1.0 GiB" in added.stdout
    listed = json.loads(site("image", "list", "--json").stdout)
    assert [(i["name"], i["format"], i["size_bytes"], i["login_user"]) for i in listed] == [("deb", "qcow2", 2**30, "alice")]

    submitted = site("lease", "submit", "--nodes", "2", "--cpus", "1", "--memory", "1024", "--duration", "1h",
                     "--image", "deb", "--ssh-key", f"{key}.pub", "--disk-size", "2G", "--hostname-prefix", "web")
    assert submitted.exit_code == 0, submitted.output
    with Store.open(store_path) as store:
        request = store.lease(1).request
    assert request.image.name == "deb" and request.image.disk == str(image)
    assert request.guest.ssh_keys == ((key.with_suffix(".pub")).read_text().strip(),)
    assert request.guest.disk_size_mib == 2048 and len(set(request.guest.macs)) == 2

    refused = site("image", "remove", "deb")
    assert refused.exit_code == 2 and "used by lease 1" in refused.output

    _step(store_path, CLI_NOW)
    shown = site("lease", "show", "1")
    assert shown.exit_code == 0, shown.output
    for vnode, mac in enumerate(request.guest.macs):
        row = next(line for line in shown.stdout.splitlines() if f"lw-1-{vnode}" in line and mac in line)
        assert "running" in row and "ssh -o StrictHostKeyChecking=no" in row and "alice@10." in row
    vms = json.loads(site("lease", "show", "1", "--json").stdout)["vms"]
    assert [(v["vm"], v["state"], v["mac"]) for v in vms] == [
        ("lw-1-0", "running", request.guest.macs[0]), ("lw-1-1", "running", request.guest.macs[1])]
    assert vms[1]["ssh"].endswith(f"alice@{vms[1]['addresses'][0]['address']}")
    with Store.open(store_path) as store:
        store.record_dirty_rate(1, 1, CLI_NOW, 3.5)
    vms = json.loads(site("lease", "show", "1", "--json").stdout)["vms"]
    assert [v["dirty_rate_mib_s"] for v in vms] == [None, 3.5]
    assert "3.5" in next(line for line in site("lease", "show", "1").stdout.splitlines() if "lw-1-1" in line)
    line = CliRunner().invoke(app, ["lease", "ssh", "1/1", "--print", "-i", str(key), "--state", str(store_path),
                                    "--", "hostname"])
    assert line.exit_code == 0, line.output
    assert line.stdout.split()[-2:] == [f"alice@{simulated_address(request.guest.macs[1])}", "hostname"]
    assert f"-i {key}" in line.stdout
    console = site("lease", "console", "1/0", "--print")
    assert console.exit_code == 0 and console.stdout.split()[-2:] == ["console", "lw-1-0"]
    assert site("lease", "ssh", "1/2").exit_code == 2
    assert _driver(store_path).disks() == ["lw-1-0", "lw-1-1"]

    _step(store_path, CLI_NOW + timedelta(hours=1, seconds=5))
    with Store.open(store_path) as store:
        assert store.lease(1).state is LeaseState.DONE
        assert [e.kind for e in store.events(lease_id=1)].count("released") == 1
    assert _driver(store_path).disks() == []
    assert site("image", "remove", "deb").exit_code == 0


def test_a_cancelled_running_lease_is_stopped_and_cleaned_up_by_the_daemon(site, store_path, image, key):
    assert site("image", "add", "deb", str(image)).exit_code == 0
    assert site("lease", "submit", "--cpus", "1", "--memory", "512", "--duration", "2h", "--image", "deb",
                "--ssh-key", f"{key}.pub").exit_code == 0
    _step(store_path, CLI_NOW)
    assert _driver(store_path).locate("lw-1-0") is not None
    assert site("lease", "cancel", "1").exit_code == 0
    _step(store_path, CLI_NOW + timedelta(minutes=1))
    driver = _driver(store_path)
    assert driver.locate("lw-1-0") is None and driver.disks() == []


@pytest.mark.parametrize("args, message", [
    (["--image", "nope"], "--image: 'nope' is neither a catalogued image nor an absolute path (catalogued: deb)"),
    (["--image", "deb", "--ssh-key", "/nonexistent.pub"], "--ssh-key: /nonexistent.pub: no such file"),
    (["--image", "deb", "--disk-size", "512M"], "--disk-size: 512 MiB is smaller than the image (1024 MiB)"),
    (["--image", "deb", "--disk-size", "lots"], "--disk-size: must be a size such as 20G"),
    (["--image", "deb", "--hostname-prefix", "Bad_Name"], "--hostname-prefix:"),
    (["--kernel", "/boot/vmlinuz", "--ssh-key", "/x.pub"], "--ssh-key: needs an image with a disk (--image)"),
])
def test_bad_guest_input_names_the_field_and_writes_nothing(site, store_path, image, key, args, message):
    assert site("image", "add", "deb", str(image)).exit_code == 0
    result = site("lease", "submit", "--cpus", "1", "--memory", "512", "--duration", "1h", *args)
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    with Store.open(store_path) as store:
        assert store.leases() == []


def test_user_data_must_be_cloud_config(site, store_path, image, key, tmp_path):
    assert site("image", "add", "deb", str(image)).exit_code == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("packages: [htop]\n")
    result = site("lease", "submit", "--cpus", "1", "--memory", "512", "--duration", "1h", "--image", "deb",
                  "--ssh-key", f"{key}.pub", "--user-data", str(bad))
    assert result.exit_code == 2 and "--user-data:" in result.output and "#cloud-config" in result.output
    with Store.open(store_path) as store:
        assert store.leases() == []


def test_image_add_refuses_what_the_hosts_cannot_read(site, tmp_path, image):
    missing = site("image", "add", "deb", str(tmp_path / "missing.qcow2"))
    assert missing.exit_code == 2 and "PATH: lab1 cannot read it" in missing.output and "no such file" in missing.output
    wrong = site("image", "add", "deb", str(image), "--format", "raw")
    # (the hosts name no shared storage: the file is checked here before it would be copied to them)
    assert wrong.exit_code == 2 and f"--format: {image} is qcow2, not raw" in wrong.output
    assert site("image", "add", "bad name", str(image)).exit_code == 2
    assert site("image", "add", "deb", str(image)).exit_code == 0
    again = site("image", "add", "deb", str(image))
    assert again.exit_code == 2 and "already exists" in again.output


def test_host_check_says_whether_each_catalogued_image_is_readable(site, image):
    assert site("image", "add", "deb", str(image)).exit_code == 0
    checked = site("host", "check", "lab1", "--json")
    rows = {r["check"]: r for r in json.loads(checked.stdout)["checks"]}
    assert rows["image deb"]["status"] == "PASS" and "qcow2, 1.0 GiB" in rows["image deb"]["detail"]
    image.unlink()
    rows = {r["check"]: r for r in json.loads(site("host", "check", "lab1", "--json").stdout)["checks"]}
    assert rows["image deb"]["status"] == "FAIL" and "no such file" in rows["image deb"]["detail"]


def test_host_add_takes_the_network_its_vms_attach_to(cli, store_path):
    added = cli("host", "add", "lab9", "--uri", "test:///default", "--cpus", "2", "--memory", "2048",
                "--network", "br0", "--disk-dir", "/srv/vms")
    assert added.exit_code == 0, added.output
    with Store.open(store_path) as store:
        config = store.host("lab9").config
    assert (config.network, config.network_type, config.vm_disk_dir) == ("br0", "bridge", "/srv/vms")
    bad = cli("host", "add", "lab8", "--uri", "test:///default", "--cpus", "2", "--memory", "2048",
              "--network-type", "wire")
    assert bad.exit_code == 2 and "--network-type:" in bad.output
