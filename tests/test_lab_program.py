"""The lab program (deploy/lab: `lab.py` and its package `lablib`) is held to the same standards as the rest:
linted by ruff (pyproject.toml's [tool.ruff]), type-checked by mypy --strict, no module over 700 lines, and
`deploy/lab/lab` stays the short wrapper the README and the lab tier call."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAB_DIR = REPO / "deploy" / "lab"
MAX_LINES = 700


def _sources() -> list[Path]:
    return [LAB_DIR / "lab.py", *sorted((LAB_DIR / "lablib").glob("*.py"))]


def _tool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec(args[0]) is None:
        pytest.fail(f"{args[0]} is not installed: it is in the test extra (deploy/install.sh installs it)", pytrace=False)
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_the_lab_program_passes_ruff():
    done = _tool("ruff", "check", "--no-cache", *(str(p.relative_to(REPO)) for p in _sources()), cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_lab_program_passes_mypy_strict():
    # (from deploy/lab, as lab.py runs: `lablib` is the package beside it)
    done = _tool("mypy", "--strict", "--no-incremental", "--python-version", "3.11", "lab.py", "lablib", cwd=LAB_DIR)
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_module_of_the_lab_program_is_over_700_lines():
    long = {p.name: n for p in _sources() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"over {MAX_LINES} lines: {long}"


def test_deploy_lab_lab_is_a_two_line_wrapper_of_lab_py():
    wrapper = LAB_DIR / "lab"
    lines = wrapper.read_text().splitlines()
    assert len(lines) == 2 and lines[0].startswith("#!") and "lab.py" in lines[1], lines
    assert os.access(wrapper, os.X_OK) and os.access(LAB_DIR / "lab.py", os.X_OK)
    done = subprocess.run([str(wrapper), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "usage: deploy/lab/lab" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("transport", ["ssh", "tls", "tcp"])
def test_the_inventory_the_lab_writes_is_one_leasewise_reads(transport, tmp_path, monkeypatch):
    """For every transport: the libvirt link is the transport's, the peer link names the hosts' own files, and
    over ssh the link leasewise opens is pinned by the inventory's known_hosts (libssh2 honours it)."""
    monkeypatch.syspath_prepend(str(LAB_DIR))
    from lablib import inventory as lab_inventory  # noqa: PLC0415

    from drivers.inventory import load_inventory  # noqa: PLC0415
    from drivers.libvirt.transport import link_uri, parse_link  # noqa: PLC0415

    monkeypatch.setattr(lab_inventory, "INVENTORY", tmp_path / "inventory.toml")
    hosts = load_inventory(lab_inventory.write_inventory(3, transport))
    assert [h.name for h in hosts] == ["lab1", "lab2", "lab3"]
    for n, host in enumerate(hosts, start=1):
        link, peer = parse_link(link_uri(host)), parse_link(host.peer_uri or host.uri)
        assert link.host == peer.host == f"10.77.0.{10 + n}" and host.migration_uri == f"tcp://10.77.0.{10 + n}"
        assert link.transport == peer.transport == {"ssh": "libssh2", "tls": "tls", "tcp": "tcp"}[transport]
        if transport == "ssh":
            assert (link.user, peer.user) == ("leasewise", "leasewise")
            assert link.params["known_hosts"] == host.known_hosts and link.params["keyfile"] == host.ssh_key
            assert peer.params["keyfile"].startswith("/etc/libvirt/leasewise/")
        # (memory images go host to host with each host's own copy key, whatever the libvirt transport)
        assert host.peer_ssh_key == "/etc/libvirt/leasewise/copy_ed25519"
        assert host.peer_known_hosts == "/etc/libvirt/leasewise/known_hosts"
        if transport == "tls":
            assert link.params["pkipath"].endswith("run/pki/head") and peer.params["pkipath"] == "/etc/libvirt/pki"


@pytest.mark.parametrize("storage", ["shared", "local"])
def test_the_inventory_says_whether_the_hosts_share_their_image_directory(storage, tmp_path, monkeypatch):
    """`up --storage local`: no host names shared storage, each keeps its VMs' disks in its own directory, and
    the file says so; `shared` (the default) is the image directory every host sees."""
    monkeypatch.syspath_prepend(str(LAB_DIR))
    from lablib import inventory as lab_inventory  # noqa: PLC0415

    from drivers.inventory import load_inventory  # noqa: PLC0415

    monkeypatch.setattr(lab_inventory, "INVENTORY", tmp_path / "inventory.toml")
    path = lab_inventory.write_inventory(2, "ssh", storage)
    hosts = load_inventory(path)
    assert f"# storage: {storage}" in path.read_text()
    for host in hosts:
        if storage == "local":
            assert host.shared_storage == () and not host.is_shared("/var/lib/libvirt/images/x.qcow2")
            assert host.vm_disk_dir == "/var/lib/libvirt/images/leasewise-vms"
        else:
            assert host.shared_storage == ("/var/lib/libvirt/images",) and host.disk_dir is None


def test_with_local_storage_each_host_binds_its_own_image_directory(monkeypatch):
    monkeypatch.syspath_prepend(str(LAB_DIR))
    from lablib.hosts import holder_script  # noqa: PLC0415

    bind = 'mount --bind "$dir/images" /var/lib/libvirt/images'
    assert bind in holder_script("local") and bind not in holder_script("shared")
