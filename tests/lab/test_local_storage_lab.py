"""Hosts without shared storage on the real lab (deploy/lab/lab up --storage local, brought up for this module
and back to shared storage afterwards): each host's /var/lib/libvirt/images is its own. `image add` copies the
Debian image (disk, kernel, initrd) to every host through libvirt's volume upload, each copy's checksum equal
to the source's; `image sync` gives a host that lost its copy a new one; a 2-VM lease boots on the hosts' own
disks (overlay and seed in the VM's host's own directory) and answers ssh; one VM is live-migrated by the
daemon (its host drained) with its overlay copied (a block migration), keeping a file written before and an
ssh session open across it; another is suspended and resumed on another host, its overlay and seed moved with
its memory image host to host (the head node's bridge sees next to none of those bytes; the copies' checksums
equal the source's); nothing is left once the lease is cancelled."""

from __future__ import annotations

import json
import posixpath
import subprocess
import time
import tomllib
from pathlib import Path

import pytest

from tests.lab.labkit import CLI, REPO, daemon_config, remove_lease_domains
from tests.lab.labkit import run_cli as _cli
from tests.lab.labkit import sha256_file as _sha256
from tests.lab.labkit import held_ssh_session, stop_processes

pytestmark = [pytest.mark.lab, pytest.mark.usefixtures("over_local_storage")]

IMAGE_BUILD = REPO / "deploy" / "images" / "build"
IMAGES = "/var/lib/libvirt/images"
HEAD_BRIDGE = Path("/sys/class/net/lwbr0/statistics")
BOOT_TIMEOUT_S = 480


def _head_bytes() -> int:
    """Bytes the head node's own end of the lab bridge received and sent (host-to-host traffic is forwarded
    by the bridge without reaching it)."""
    return sum(int((HEAD_BRIDGE / f"{way}_bytes").read_text()) for way in ("rx", "tx"))


def _on_host(lab, name: str, path: str) -> Path:
    """Where host `name`'s own file `path` (under its image directory) is, seen from this machine."""
    assert path.startswith(IMAGES + "/"), path
    return lab.host_dir(name) / "images" / path[len(IMAGES) + 1:]


@pytest.fixture(scope="module")
def site(lab, tmp_path_factory):
    """The lab's hosts imported into a store, the Debian image built (cached) but not yet catalogued."""
    proc = subprocess.run([str(IMAGE_BUILD), "debian12", "--quiet"], capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, f"deploy/images/build debian12 failed:\n{proc.stdout}\n{proc.stderr}"
    with open(Path(IMAGES) / "leasewise-images" / "debian12" / "image.toml", "rb") as handle:
        debian = tomllib.load(handle)
    root = tmp_path_factory.mktemp("local-storage")
    state, config = root / "state.sqlite", root / "leasewise.toml"
    # (the lab's 1 Gbit/s links; a wide downtime limit: see test_guest_lab.py)
    daemon_config(config, "live_migration_bandwidth = 100\nmax_downtime_ms = 1000\nlive_migration_disk_mib = 256\n")
    common = ["--state", str(state), "--config", str(config)]
    _cli("host", "import", str(lab.inventory), "--cpus", "1", "--memory", "2048", *common)
    key = root / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "lab-test", "-f", str(key)], check=True)
    return {"common": common, "debian": debian, "key": key, "root": root}


def test_local_storage_image_add_copies_to_every_host_and_sync_gives_a_lost_copy_back(lab, site):
    debian, common = site["debian"], site["common"]
    assert "# storage: local" in lab.inventory.read_text()
    files = [debian["disk"], debian["kernel"], debian["initrd"]]
    sums = {f: _sha256(Path(f)) for f in files}
    assert not any(_on_host(lab, name, f).exists() for name in lab.names for f in files)
    t0 = time.monotonic()
    added = _cli("image", "add", "debian12", debian["disk"], "--login-user", debian["login_user"],
                 "--kernel", debian["kernel"], "--initrd", debian["initrd"],
                 "--cmdline", Path(debian["cmdline"]).read_text().strip(), *common, timeout=900)
    print(f"\nimage add: {len(lab.names)} hosts given {sum(Path(f).stat().st_size for f in files) / 2**20:.0f} MiB "
          f"each in {time.monotonic() - t0:.1f} s")
    assert added.stdout.count("copied, checksum verified on the host") == len(lab.names), added.stdout
    for name in lab.names:
        for f in files:
            assert _sha256(_on_host(lab, name, f)) == sums[f], f"{f} on {name}"
    listed = {i["name"]: i for i in json.loads(_cli("image", "list", "--json", *common).stdout)}["debian12"]
    assert listed["hosts"] == {name: "copied" for name in lab.names}
    assert dict(map(tuple, listed["checksums"])) == sums

    lost = lab.names[-1]
    _on_host(lab, lost, debian["disk"]).unlink()
    synced = _cli("image", "sync", "debian12", *common, timeout=900)
    assert f"held by {len(lab.names)} of {len(lab.names)} hosts (1 copied now)" in synced.stdout, synced.stdout
    assert _sha256(_on_host(lab, lost, debian["disk"])) == sums[debian["disk"]]


def test_local_storage_block_migration_and_memory_image_moved_host_to_host(lab, conns, libvirt_mod, site):
    common = site["common"]
    if not json.loads(_cli("image", "list", "--json", *common).stdout):
        pytest.fail("the image was not added (test_local_storage_image_add_... runs first)")
    submitted = _cli("lease", "submit", "--nodes", "2", "--cpus", "1", "--memory", "768", "--duration", "30m",
                     "--image", "debian12", "--ssh-key", f"{site['key']}.pub", "--start", "now", "--json", *common)
    assert json.loads(submitted.stdout)["state"] in ("scheduled", "active", "ready"), submitted.stdout
    daemon = subprocess.Popen([*CLI, "run", *common], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)

    def ssh(node: int, *command: str) -> subprocess.CompletedProcess:
        return _cli("lease", "ssh", f"1/{node}", "-i", str(site["key"]), "-o", "ConnectTimeout=5", "-o",
                    "BatchMode=yes", *common, "--", *command, timeout=40, check=False)

    session = None
    try:
        t0 = time.monotonic()
        up: set[int] = set()
        while len(up) < 2:
            assert time.monotonic() - t0 < BOOT_TIMEOUT_S, "the VMs did not answer ssh"
            assert daemon.poll() is None, daemon.stdout.read()
            up |= {node for node in {0, 1} - up if ssh(node, "true").returncode == 0}
            time.sleep(3)
        vms = json.loads(_cli("lease", "show", "1", "--json", *common).stdout)["vms"]
        hosts = [v["host"] for v in vms]
        assert len(set(hosts)) == 2
        for node, host in enumerate(hosts):
            assert ssh(node, "hostname").stdout.strip() == f"lw-1-{node}"
            own = [_on_host(lab, name, f"{IMAGES}/leasewise-vms/lw-1-{node}.qcow2").exists() for name in lab.names]
            assert own == [name == host for name in lab.names], (node, host, own)   # on its host's disk only

        # -- a block migration by the daemon (the VM's host drained), a file and an ssh session kept
        assert ssh(0, "sh", "-c", "'echo written-before > ~/mine && sync'").returncode == 0
        source = hosts[0]
        session = held_ssh_session("1/0", site["key"], common)
        time.sleep(3)
        drained = _cli("host", "drain", source, "--by", "+120s", *common)
        assert "live-migrates" in drained.stdout, drained.stdout
        deadline = time.monotonic() + 240
        while True:
            vms = json.loads(_cli("lease", "show", "1", "--json", *common).stdout)["vms"]
            if vms[0]["host"] != source and vms[0]["state"] == "running":
                break
            assert time.monotonic() < deadline, f"lw-1-0 never left {source}: {vms}"
            time.sleep(2)
        out, err = session.communicate(timeout=240)
        assert session.returncode == 0 and out.strip() == "alive", (out, err)
        session = None
        assert ssh(0, "cat", "mine").stdout.strip() == "written-before"
        target = vms[0]["host"]
        own = [_on_host(lab, name, f"{IMAGES}/leasewise-vms/lw-1-0.qcow2").exists() for name in lab.names]
        assert own == [name == target for name in lab.names], (source, target, own)   # moved, not copied
        report_file = site["root"] / "report.json"
        _cli("report", "--lease", "1", "--json", str(report_file), *common)
        report = json.loads(report_file.read_text())
        live = [r for r in report["rows"] if r["kind"] == "live-migrate"]
        assert live and live[0]["disk_mib"] and live[0]["disk_mib"] > 0, live
        print(f"\nblock migration of lw-1-0: {live[0]['disk_mib']:.0f} MiB of disk, measured "
              f"{live[0]['measured_seconds']} s, predicted {live[0]['predicted_seconds']} s")
        _cli("host", "undrain", source, *common)

        # -- a suspended VM resumed on another host: its memory image, overlay and seed go with it
        daemon.terminate()
        daemon.wait(timeout=60)
        from drivers.inventory import load_inventory
        from drivers.libvirt.driver import LibvirtDriver

        assert ssh(1, "sh", "-c", "'echo kept > ~/before && sync'").returncode == 0
        driver = LibvirtDriver(load_inventory(lab.inventory))
        try:
            path = "/var/lib/libvirt/qemu/save/lw-1-1.state"
            # what its overlay holds (the planner's disk for a block migration), at most the file's length
            allocation = driver.disk_allocation("lw-1-1")
            overlay = _on_host(lab, hosts[1], f"{IMAGES}/leasewise-vms/lw-1-1.qcow2").stat().st_size
            assert allocation is not None and 0 < allocation <= overlay, (allocation, overlay)
            driver.suspend("lw-1-1", path)
            head_before = _head_bytes()
            moved = driver.move_state(path, hosts[1], source)
            through_head = _head_bytes() - head_before
            print(f"\nmemory image and disks of lw-1-1 {hosts[1]} -> {source}: {moved.bytes / 2**20:.0f} MiB "
                  f"{moved.route} in {moved.wall_seconds:.1f} s; the head node's bridge saw "
                  f"{through_head / 2**20:.1f} MiB")
            assert moved.route == "direct" and moved.bytes > 16 * 2**20, moved
            assert through_head < moved.bytes / 10, (through_head, moved)   # (a relay: twice the bytes)
            disk = f"{IMAGES}/leasewise-vms/lw-1-1.qcow2"
            for there, here in ((lab.private_path(source, path), lab.private_path(hosts[1], path)),
                                (_on_host(lab, source, disk), _on_host(lab, hosts[1], disk))):
                assert _sha256(there) == _sha256(here), there
            assert not [p for p in lab.private_path(source, path).parent.iterdir() if ".part-" in p.name]
            driver.resume("lw-1-1", path, source)
            for host in (hosts[1], source):
                driver.remove_state(path, host)
            assert not driver.shares_vm_storage(hosts[1], source)
            left = driver.remove_vm_storage("lw-1-1", hosts[1])
            assert sorted(posixpath.basename(p) for p in left) == ["lw-1-1-seed.iso", "lw-1-1.qcow2"], left
        finally:
            driver.close()
        deadline = time.monotonic() + 60
        while ssh(1, "true").returncode != 0:
            assert time.monotonic() < deadline, "lw-1-1 not reachable after its restore on another host"
            time.sleep(2)
        assert ssh(1, "cat", "before").stdout.strip() == "kept"
        # (cancelled before the daemon runs again: it releases the lease, on every host it used)
        _cli("lease", "cancel", "1", *common)
        daemon = subprocess.Popen([*CLI, "run", *common], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
        deadline = time.monotonic() + 120
        while True:
            left = [p for name in lab.names
                    for p in _on_host(lab, name, f"{IMAGES}/leasewise-vms/x").parent.glob("lw-1-*")]
            domains = [d.name() for conn in conns.values() for d in conn.listAllDomains(0)
                       if d.name().startswith("lw-")]
            if not left and not domains:
                break
            assert time.monotonic() < deadline, (left, domains)
            time.sleep(2)
    finally:
        stop_processes(session, daemon)
        remove_lease_domains(libvirt_mod, conns)
