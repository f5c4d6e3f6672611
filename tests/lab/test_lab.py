"""The lab itself (deploy/lab/lab), looked at through plain libvirt and ssh: no leasewise driver involved."""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET

import pytest

from tests.lab.labkit import LAB, SHARED_DIR

pytestmark = pytest.mark.lab


def _ssh(host, command: str, *extra: str) -> subprocess.CompletedProcess:
    user_host = host.ssh
    return subprocess.run(
        ["ssh", "-i", host.ssh_key, "-o", f"UserKnownHostsFile={host.known_hosts}", "-o", "StrictHostKeyChecking=yes",
         "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "IdentitiesOnly=yes", *extra, user_host, command],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)


def test_inventory_describes_the_lab(lab):
    from drivers.libvirt.transport import parse_link

    assert len(lab.hosts) >= 2
    for n, host in enumerate(lab.hosts, start=1):
        ip = f"10.77.0.{10 + n}"
        assert host.name == f"lab{n}"
        link, peer = parse_link(host.uri), parse_link(host.peer_uri or host.uri)
        assert (link.host, peer.host) == (ip, ip)
        assert {"ssh": "libssh2", "tls": "tls", "tcp": "tcp"}[lab.transport] == link.transport == peer.transport
        assert host.domain_type == "qemu"
        assert host.ssh == f"root@{ip}"
        assert host.migration_uri == f"tcp://{ip}"
        assert host.state_dir == "/var/lib/libvirt/qemu/save"
        assert host.shared_storage == (str(SHARED_DIR),)
        assert host.ssh_key.startswith("/") and host.known_hosts.startswith("/")


def test_hosts_are_distinct_libvirt_hosts(lab, conns):
    uuids = set()
    for name, conn in conns.items():
        assert conn.getHostname() == name
        caps = ET.fromstring(conn.getCapabilities())
        uuids.add(caps.findtext("host/uuid"))
        guests = {g.get("type") for g in caps.iter("domain")}
        assert "qemu" in guests, f"{name} cannot run TCG guests: {guests}"
        # the lab starts no libvirt network of its own (no default NAT network)
        assert conn.listAllNetworks(0) == []
    assert len(uuids) == len(conns), "every lab host needs its own host_uuid (migration refuses the same host)"


def test_ssh_reaches_each_host_in_its_own_namespaces(lab):
    a, b = lab.hosts[0], lab.hosts[1]
    marker = "lwtest-ssh-marker"
    save_a = lab.private_path(a.name, a.state_dir)
    (save_a / marker).write_text("only on A\n")
    try:
        got = _ssh(a, f"hostname; test -f {a.state_dir}/{marker} && echo present")
        assert got.returncode == 0, got.stderr
        assert got.stdout.split() == [a.name, "present"]
        # B has its own /var/lib/libvirt/qemu: the file is not there
        got = _ssh(b, f"hostname; test -f {b.state_dir}/{marker} && echo present || echo absent")
        assert got.returncode == 0, got.stderr
        assert got.stdout.split() == [b.name, "absent"]
    finally:
        (save_a / marker).unlink(missing_ok=True)
    # key only: no password login
    got = _ssh(a, "true", "-o", "PreferredAuthentications=password,keyboard-interactive", "-o", "PubkeyAuthentication=no")
    assert got.returncode != 0


def test_qemu_ssh_uri_reaches_the_hosts_own_libvirtd(lab, libvirt_mod):
    host = lab.hosts[1]
    uri = (f"qemu+libssh://{host.ssh}/system?keyfile={host.ssh_key}&known_hosts={host.known_hosts}"
           f"&known_hosts_verify=normal&sshauth=privkey")
    conn = libvirt_mod.open(uri)
    try:
        assert conn.getHostname() == host.name
    finally:
        conn.close()


def test_status_reports_every_host_healthy(lab):
    got = subprocess.run([str(LAB), "status"], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stdout + got.stderr
    for name in lab.names:
        assert any(line.startswith(name) and "NO" not in line for line in got.stdout.splitlines()), got.stdout
