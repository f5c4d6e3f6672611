"""A lease's VMs a person can use, on the real lab: a Debian 12 image catalogued, a 2-VM lease with a test
key, both VMs booting their own overlay with a cloud-init seed, getting addresses from the lab's DHCP, and
answering `leasewise lease ssh`; a VM live-migrated by the daemon (a host drain) with an ssh session open
and the network outage measured; a VM saved and restored keeping its address, uptime and disk; and
nothing left on the hosts once the lease is cancelled. Bad input is refused with nothing created.

The guest boots under TCG (about two minutes), so the module runs one lease through all of this.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from tests.lab.labkit import REPO, daemon_config, remove_lease_domains
from tests.lab.labkit import run_cli as _cli
from tests.lab.labkit import sha256_file as _sha256
from tests.lab.labkit import held_ssh_session, stop_processes

pytestmark = pytest.mark.lab

CLI = [sys.executable, "-c", "from orchestrator.cli import main; main()"]
IMAGE_BUILD = REPO / "deploy" / "images" / "build"
BOOT_TIMEOUT_S = 480
MEMORY_MIB = "768"
VM_DISK_DIR = Path("/var/lib/libvirt/images/leasewise-vms")


def _pool_volumes(conns) -> set[str]:
    """Every volume of the leasewise-vms pool, as the hosts list it (the directory is shared)."""
    names = set()
    for conn in conns.values():
        try:
            pool = conn.storagePoolLookupByName("leasewise-vms")
        except Exception:
            continue
        pool.refresh(0)
        names.update(v.name() for v in pool.listAllVolumes(0))
    return names


def _lw_domains(conns) -> set[str]:
    return {f"{d.name()}@{h}" for h, conn in conns.items() for d in conn.listAllDomains(0) if d.name().startswith("lw-")}


@pytest.fixture(scope="module")
def debian(lab) -> dict:
    """The Debian 12 image (deploy/images/build debian12: cached, built once) and its image.toml."""
    proc = subprocess.run([str(IMAGE_BUILD), "debian12", "--quiet"], capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, f"deploy/images/build debian12 failed:\n{proc.stdout}\n{proc.stderr}"
    toml = Path("/var/lib/libvirt/images/leasewise-images/debian12/image.toml")
    with open(toml, "rb") as handle:
        info = tomllib.load(handle)
    info["cmdline_text"] = Path(info["cmdline"]).read_text().strip()
    return info


@pytest.fixture(scope="module")
def site(lab, debian, tmp_path_factory):
    """A store with the lab's hosts (2 vCPUs each), the image catalogued, a test key, and a daemon config."""
    root = tmp_path_factory.mktemp("guest")
    state, config = root / "state.sqlite", root / "leasewise.toml"
    # the lab's 1 Gbit/s links: a migration of a mostly idle guest is planned at about what it takes
    # The Debian guest keeps dirtying memory under TCG (cloud-init, timers). A wide downtime limit lets its
    # live migration converge within three passes, before QEMU 7.2's TCG dirty tracking starts losing pages
    # (from the fourth pass on, the guest then dies on the destination and the ssh session with it).
    daemon_config(config, "live_migration_bandwidth = 100\nmax_downtime_ms = 1000\n")
    common = ["--state", str(state), "--config", str(config)]
    _cli("host", "import", str(lab.inventory), "--cpus", "1", "--memory", "2048", *common)
    _cli("image", "add", "debian12", debian["disk"], "--login-user", debian["login_user"],
         "--kernel", debian["kernel"], "--initrd", debian["initrd"], "--cmdline", debian["cmdline_text"], *common)
    key = root / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "lab-test", "-f", str(key)], check=True)
    return {"root": root, "common": common, "key": key, "state": state}


def _vms(site) -> list[dict]:
    return json.loads(_cli("lease", "show", "1", "--json", *site["common"]).stdout)["vms"]


def _ssh(site, node: int, *command: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return _cli("lease", "ssh", f"1/{node}", "-i", str(site["key"]), "-o", "ConnectTimeout=5", "-o", "BatchMode=yes",
                *site["common"], "--", *command, timeout=timeout, check=False)


def test_a_two_vm_lease_boots_private_disks_answers_ssh_migrates_suspends_and_leaves_nothing(
        lab, conns, libvirt_mod, site, debian, record_property):
    if len(lab.names) < 3:
        pytest.fail("this test needs three lab hosts (deploy/lab/lab up -n 3)")
    base = Path(debian["disk"])
    base_sum = _sha256(base)
    common = site["common"]
    submitted = _cli("lease", "submit", "--nodes", "2", "--cpus", "1", "--memory", MEMORY_MIB, "--duration", "30m",
                     "--image", "debian12", "--ssh-key", f"{site['key']}.pub", "--start", "now", "--json", *common)
    assert json.loads(submitted.stdout)["state"] in ("scheduled", "active", "ready"), submitted.stdout
    daemon = subprocess.Popen([*CLI, "run", *common], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    session = None
    try:
        # -- both VMs boot, get different addresses from the lab's DHCP and answer ssh as their own name
        t0 = time.monotonic()
        up: set[int] = set()
        while len(up) < 2:
            assert time.monotonic() - t0 < BOOT_TIMEOUT_S, \
                f"VMs not reachable by ssh: {_vms(site)}; last try: {_ssh(site, min({0, 1} - up), 'true')}"
            assert daemon.poll() is None, daemon.stdout.read()
            for node in {0, 1} - up:
                if _ssh(site, node, "true", timeout=30).returncode == 0:
                    up.add(node)
            time.sleep(3)
        record_property("boot_to_ssh_s", round(time.monotonic() - t0, 1))
        vms = _vms(site)
        addresses = [v["addresses"][0]["address"] for v in vms]
        assert len(set(addresses)) == 2 and all(a.startswith("10.77.0.") for a in addresses), vms
        assert {v["host"] for v in vms} and len({v["host"] for v in vms}) == 2
        for node in (0, 1):
            named = _ssh(site, node, "hostname")
            assert named.returncode == 0 and named.stdout.strip() == f"lw-1-{node}", named
        # -- each VM writes to a disk of its own
        assert _ssh(site, 0, "sh", "-c", "'echo private > ~/mine && sync'").returncode == 0
        assert _ssh(site, 1, "test", "-e", "mine").returncode == 1

        # -- live migration by the daemon (the VM's host is drained), an ssh session open across it
        source = vms[0]["host"]
        session = held_ssh_session("1/0", site["key"], common)
        time.sleep(3)
        # (the migration is planned to end just before the deadline, leaving time for a fallback)
        drained = _cli("host", "drain", source, "--by", "+90s", *common)
        assert "live-migrates" in drained.stdout, drained.stdout
        deadline = time.monotonic() + 180
        while True:
            shown = json.loads(_cli("lease", "show", "1", "--json", *common).stdout)
            vms = shown["vms"]
            if vms and vms[0]["host"] != source and vms[0]["state"] == "running":
                break
            assert time.monotonic() < deadline, f"lw-1-0 never left {source}: {shown['lease']} {vms}"
            time.sleep(2)
        out, err = session.communicate(timeout=200)
        events = json.loads(_cli("lease", "show", "1", "--json", *common).stdout)["events"]
        migrated = [e["detail"] for e in events if e["kind"] == "enacted" and e["detail"].get("operation") == "migrate"]
        assert session.returncode == 0 and out.strip() == "alive", (out, err, migrated)
        session = None
        assert migrated and migrated[-1]["network_survived"] is True
        outage = migrated[-1]["network_outage_ms"]
        assert outage is not None and 0 < outage < 10_000
        report_file = site["root"] / "report.json"
        _cli("report", "--lease", "1", "--json", str(report_file), *common)
        report = json.loads(report_file.read_text())
        live = [r for r in report["rows"] if r["kind"] == "live-migrate"]
        assert live and live[0]["network_outage_ms"] == outage and live[0]["downtime_ms"] is not None
        record_property("migration_network_outage_ms", outage)
        record_property("migration_downtime_ms", live[0]["downtime_ms"])
        record_property("migration_predicted_downtime_ms", live[0]["predicted_downtime_ms"])
        print(f"\nlive migration of lw-1-0: network outage {outage:.0f} ms, libvirt downtime "
              f"{live[0]['downtime_ms']} ms, predicted {live[0]['predicted_downtime_ms']} ms")
        _cli("host", "undrain", source, *common)
        assert _ssh(site, 0, "cat", "mine").stdout.strip() == "private"

        # -- save and restore (the daemon stopped meanwhile): same address, uptime goes on, disk kept
        daemon.terminate()
        daemon.wait(timeout=60)
        from drivers.inventory import load_inventory
        from drivers.libvirt.driver import LibvirtDriver

        before = float(_ssh(site, 1, "cut", "-d.", "-f1", "/proc/uptime").stdout.strip())
        assert _ssh(site, 1, "sh", "-c", "'echo kept > ~/before && sync'").returncode == 0
        host = vms[1]["host"]
        driver = LibvirtDriver(load_inventory(lab.inventory))
        try:
            path = "/var/lib/libvirt/qemu/save/lw-1-1.state"
            driver.suspend("lw-1-1", path)
            time.sleep(5)
            driver.resume("lw-1-1", path, host)
            driver.remove_state(path, host)
        finally:
            driver.close()
        daemon = subprocess.Popen([*CLI, "run", *common], cwd=REPO, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 60
        while _ssh(site, 1, "true", timeout=20).returncode != 0:
            assert time.monotonic() < deadline, "lw-1-1 not reachable after its restore"
            time.sleep(2)
        after = float(_ssh(site, 1, "cut", "-d.", "-f1", "/proc/uptime").stdout.strip())
        assert after >= before, (before, after)          # the guest did not reboot
        assert _ssh(site, 1, "cat", "before").stdout.strip() == "kept"
        assert _vms(site)[1]["addresses"][0]["address"] == addresses[1]

        # -- the end: cancelled; the daemon stops the VMs and removes overlays, seeds and saved images
        ours = {f"lw-1-{n}.qcow2" for n in (0, 1)} | {f"lw-1-{n}-seed.iso" for n in (0, 1)}
        assert ours <= _pool_volumes(conns)
        _cli("lease", "cancel", "1", *common)
        deadline = time.monotonic() + 120
        while _lw_domains(conns) or ours & _pool_volumes(conns):
            assert time.monotonic() < deadline, (_lw_domains(conns), ours & _pool_volumes(conns))
            time.sleep(2)
        for name in lab.names:
            saved = lab.private_path(name, "/var/lib/libvirt/qemu/save")
            assert not list(saved.glob("lw-1-*")), f"memory images left on {name}: {list(saved.glob('lw-1-*'))}"
    finally:
        stop_processes(session, daemon)
        remove_lease_domains(libvirt_mod, conns)
        # (the pool's directory is shared storage: it outlives the lab, so a failed run cleans up here)
        for left in VM_DISK_DIR.glob("lw-1-[01]*"):
            left.unlink()
    assert _sha256(base) == base_sum, "the base image changed"


def test_bad_guest_input_is_refused_with_nothing_created_on_the_hosts(lab, conns, site, tmp_path):
    common = site["common"]
    domains, volumes = _lw_domains(conns), _pool_volumes(conns)
    plain = ["lease", "submit", "--cpus", "1", "--memory", MEMORY_MIB, "--duration", "10m", "--start", "now"]
    bad_data = tmp_path / "bad.yaml"
    bad_data.write_text("#cloud-config\npackages: [a\n")
    cases = [
        (["--image", "nope"], "--image: 'nope' is neither a catalogued image"),
        (["--image", "debian12", "--ssh-key", str(tmp_path / "missing.pub")], "--ssh-key:"),
        (["--image", "debian12", "--ssh-key", str(site["key"])], "--ssh-key:"),          # a private key
        (["--image", "debian12", "--ssh-key", f"{site['key']}.pub", "--user-data", str(bad_data)], "--user-data:"),
        (["--image", "debian12", "--ssh-key", f"{site['key']}.pub", "--disk-size", "100M"], "--disk-size:"),
    ]
    for args, message in cases:
        done = _cli(*plain, *args, *common, check=False)
        assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done
    # an image the hosts cannot read: refused at add, and at submit once it is gone
    scratch = Path("/var/lib/libvirt/images/leasewise-test")
    scratch.mkdir(exist_ok=True)
    gone = scratch / "gone.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(gone), "64M"], check=True)
    try:
        missing = _cli("image", "add", "ghost", str(scratch / "nothing.qcow2"), *common, check=False)
        assert missing.returncode == 2 and "PATH:" in missing.stderr and "no such file" in missing.stderr
        _cli("image", "add", "gone", str(gone), *common)
        gone.unlink()
        done = _cli(*plain, "--image", "gone", "--ssh-key", f"{site['key']}.pub", *common, check=False)
        assert done.returncode == 2 and "--image: gone" in done.stderr and "cannot be read on" in done.stderr
        _cli("image", "remove", "gone", *common)
    finally:
        gone.unlink(missing_ok=True)
    assert _lw_domains(conns) == domains and _pool_volumes(conns) == volumes
    assert json.loads(_cli("lease", "list", "--json", *common).stdout) == [] or all(
        lease["id"] == 1 for lease in json.loads(_cli("lease", "list", "--json", *common).stdout))
