"""The lab's ssh transport (deploy/lab/lab up --transport ssh, the lab tier's default) as a real cluster's admin
sets it up: libvirtd on its socket only, reached as the non-root user `leasewise` in each host's `libvirt`
group over libvirt's libssh2 transport, the host keys pinned by the inventory's known_hosts (for the libvirt
link itself, not only leasewise's own SSH); and `leasewise host check` saying which transport each host uses,
whether it works, every pair both ways (a real peer-to-peer probe migration), and exactly what is missing
when something is: a key, a group.

The daemon-driven live migration over ssh, peer to peer, is tests/lab/test_live_migration_lab.py's; the
driver contract over ssh is tests/lab/test_lab_contract.py's; tls is tests/lab/test_tls_lab.py's."""

from __future__ import annotations

import socket
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.lab.labkit import LAB_TRANSPORT, host_check, imported_site, open_conn, run_cli

pytestmark = pytest.mark.lab

LAB_USER = "leasewise"


@pytest.fixture(autouse=True)
def _over_ssh(lab):
    if lab.transport != "ssh":
        pytest.fail(f"these tests need the lab over ssh (it is up over {lab.transport}: "
                    f"LEASEWISE_LAB_TRANSPORT={LAB_TRANSPORT})", pytrace=False)


def rows(checked: dict) -> dict[str, tuple[str, str]]:
    return {r["check"]: (r["status"], r["detail"]) for r in checked["checks"]}


def pairs(checked: dict) -> dict[tuple[str, str, str], tuple[str, str]]:
    return {(p["source"], p["destination"], p["check"]): (p["status"], p["detail"]) for p in checked["pairs"]}


@contextmanager
def edited(path: Path, change):
    """`path` with each line replaced by `change(line)` (None: dropped), written in place (the same inode: a
    host's /etc/group is a bind mount of it), as it was again afterwards."""
    before = path.read_text()
    lines = (change(line) for line in before.splitlines(keepends=True))
    path.write_text("".join(line for line in lines if line is not None))
    try:
        yield
    finally:
        path.write_text(before)


@pytest.fixture
def site(lab, tmp_path) -> list[str]:
    return imported_site(lab, tmp_path)


def test_transport_ssh_links_are_libssh2_as_leasewise_with_the_host_keys_pinned(lab, libvirt_mod, tmp_path):
    from drivers.libvirt.transport import parse_link, what_is_missing

    for n, host in enumerate(lab.hosts, start=1):
        ip = f"10.77.0.{10 + n}"
        assert host.uri == f"qemu+libssh2://{LAB_USER}@{ip}/system"
        assert host.peer_uri.startswith(f"qemu+libssh2://{LAB_USER}@{ip}/system?keyfile=/etc/libvirt/leasewise/")
        link = parse_link(lab.uris[host.name])    # what leasewise opens: the inventory's key and known_hosts
        assert (link.params["keyfile"], link.params["known_hosts"]) == (host.ssh_key, host.known_hosts)
        # libvirtd listens on no port: ssh is the only way in
        for port in (16509, 16514):
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection((ip, port), timeout=5).close()
    conn = open_conn(libvirt_mod, lab.uris[lab.names[1]])
    try:
        assert conn.getHostname() == lab.names[1]
    finally:
        conn.close()
    # the link checks the host key against the inventory's known_hosts: another key there, and it is refused
    wrong = tmp_path / "known_hosts"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    keytype, key = (tmp_path / "other.pub").read_text().split()[:2]
    wrong.write_text(f"{lab.hosts[1].uri.split('@')[1].split('/')[0]} {keytype} {key}\n")
    uri = lab.uris[lab.names[1]].replace(lab.hosts[1].known_hosts, str(wrong))
    with pytest.raises(libvirt_mod.libvirtError) as refused:
        libvirt_mod.open(uri)
    assert what_is_missing(refused.value.get_error_message()).startswith("host key"), refused.value


def test_transport_host_check_passes_over_ssh_every_pair_both_ways(lab, site):
    code, checked = host_check(site, lab.names[1])
    assert code == 0, checked
    found = rows(checked)
    assert found["transport"][0] == "PASS" and found["transport"][1].startswith(
        f"ssh (libssh2) {LAB_USER}@10.77.0.12:22: key accepted, virt-ssh-helper, /var/run/libvirt/libvirt-sock usable")
    assert found["host key"][0] == "PASS" and lab.hosts[1].known_hosts in found["host key"][1]
    assert all(status in ("PASS", "SKIP") for status, _ in found.values()), found
    between = pairs(checked)
    others = [n for n in lab.names if n != lab.names[1]]
    expected = {(s, d, c) for o in others for s, d in ((o, lab.names[1]), (lab.names[1], o))
                for c in ("peer link", "migration port", "cpu")}
    assert set(between) == expected
    assert all(status == "PASS" for status, _ in between.values()), between
    peer = between[(lab.names[0], lab.names[1], "peer link")][1]
    assert "over ssh (libssh2) leasewise@10.77.0.12:22" in peer and "peer to peer" in peer
    assert "TCG guests run QEMU's emulated CPU" in between[(lab.names[0], lab.names[1], "cpu")][1]


def test_transport_host_check_names_a_missing_key_and_group(lab, site):
    target, source = lab.names[1], lab.names[0]
    keys = lab.host_dir(target) / "ssh" / f"authorized_keys.{LAB_USER}"
    head_key = Path(lab.hosts[1].ssh_key + ".pub").read_text().split()[1]
    # the head node's key is not in leasewise's authorized_keys on the host
    with edited(keys, lambda line: None if head_key in line else line):
        code, checked = host_check(site, target)
    assert code == 1
    status, detail = rows(checked)["transport"]
    assert status == "FAIL" and f"key: {LAB_USER}@10.77.0.12 does not accept {lab.hosts[1].ssh_key}" in detail, detail
    assert rows(checked)["connect"][0] == "FAIL" and "(key:" in rows(checked)["connect"][1]
    assert rows(checked)["host key"][0] == "PASS"   # (the host key is not what is missing)
    # the source host's own peer key is not there: the head node gets in, the source's libvirtd does not
    peer_key = (lab.host_dir(source) / "etc" / "leasewise" / "id_ed25519.pub").read_text().split()[1]
    with edited(keys, lambda line: None if peer_key in line else line):
        code, checked = host_check(site, target)
    assert code == 1 and rows(checked)["transport"][0] == "PASS"
    between = pairs(checked)
    status, detail = between[(source, target, "peer link")]
    assert status == "FAIL" and "key: the SSH key is not accepted" in detail and f"on {source}'s side" in detail
    assert between[(lab.names[2], target, "peer link")][0] == "PASS"
    # `leasewise` is not in the host's libvirt group: its helper may not use libvirtd's socket
    group = lab.host_dir(lab.names[2]) / "rootetc" / "group"
    with edited(group, lambda line: line.rsplit(":", 1)[0] + ":\n" if line.startswith("libvirt:") else line):
        code, checked = host_check(site, lab.names[2])
    assert code == 1
    status, detail = rows(checked)["transport"]
    assert status == "FAIL" and f"group: {LAB_USER} may not use /var/run/libvirt/libvirt-sock" in detail, detail
    assert f"usermod -aG libvirt {LAB_USER}" in detail


def test_transport_host_check_measures_each_pair_and_seeds_the_first_plans(lab, site, tmp_path):
    """`host check` times its probe migration of every pair it checks (256 MiB, over the ssh transport,
    peer to peer) and keeps the rate as the pair's first learned one: the planner plans the pair's next live
    migration at it rather than at the configured 12.5 MB/s; a second check does not replace what the
    daemon will have learned from real migrations (only its own earlier seed)."""
    from orchestrator.config import load_config
    from orchestrator.state.cluster import Cluster
    from orchestrator.state.learned import FROM_HOST_CHECK, LEARNED_KEY
    from orchestrator.state.store import Store

    target = lab.names[1]
    code, checked = host_check(site, target)
    assert code == 0, checked
    measured = {(p["source"], p["destination"]): p.get("link_mib_s") for p in checked["pairs"]
                if p["check"] == "peer link"}
    assert len(measured) == 2 * (len(lab.names) - 1)
    assert all(rate is not None and rate > 12.5 for rate in measured.values()), measured
    state = Path(site[site.index("--state") + 1])
    config = load_config(Path(site[site.index("--config") + 1]))
    with Store.open(state) as store:
        stored = store.get_meta(LEARNED_KEY)["live-migrate"]
        assert {tuple(k.split(">")) for k in stored} == set(measured)
        assert all(v["source"] == FROM_HOST_CHECK for v in stored.values())
        with store.transaction():
            cluster = Cluster(store, config)
            planned = {pair: cluster.scheduler.vm.overheads.live_bandwidth(*pair) for pair in measured}
    assert planned == pytest.approx(measured)


def test_transport_serve_check_keeps_every_pairs_link_rate_as_host_check_does(lab, site, tmp_path):
    """`serve --check` runs the probe migration of every pair both ways, as `host check` runs those of one
    host's pairs, and keeps their rates as the pairs' first learned ones: a server started after it plans its
    first live migrations at the links measured, not at the configured 12.5 MB/s."""
    from orchestrator.state.learned import FROM_HOST_CHECK, LEARNED_KEY
    from orchestrator.state.store import Store

    config = Path(site[site.index("--config") + 1])
    config.write_text(config.read_text() + f'[serve]\nsocket = "{tmp_path / "api.sock"}"\nsocket_group = ""\n')
    done = run_cli("serve", "--check", *site, timeout=300)
    every_pair = {(s, d) for s in lab.names for d in lab.names if s != d}
    assert done.stdout.splitlines()[-2:] == [
        f"link rates: {len(every_pair)} pair(s) measured, kept as their first plans' rates (leasewise calibrate show)",
        "ready to serve"], done.stdout
    with Store.open(Path(site[site.index("--state") + 1])) as store:
        stored = store.get_meta(LEARNED_KEY)["live-migrate"]
    assert {tuple(key.split(">")) for key in stored} == every_pair
    assert all(v["source"] == FROM_HOST_CHECK and v["rate_mib_s"] > 12.5 for v in stored.values()), stored
    assert not (tmp_path / "api.sock").exists()
