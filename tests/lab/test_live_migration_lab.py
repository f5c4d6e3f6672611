"""The daemon on real libvirt hosts evacuates a best-effort VM live for an advance reservation: the VM moves
to the free host (seen through libvirt), keeps running throughout (never saved), the AR starts on time,
and `leasewise report` puts the predicted migration next to the measured one. Over the lab's ssh transport
the migration is peer to peer, host to host: the destination's sshd let the source host's libvirtd in with
that host's own key."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime, timedelta

import pytest

from tests.lab.labkit import (
    CLI,
    REPO,
    domain_state,
    evacuation_site,
    remove_lease_domains,
)
from tests.lab.labkit import leasewise as cli


def states(libvirt_mod, conns, vm: str) -> dict[str, str]:
    """host -> the VM's state there, for the hosts it is defined on."""
    out = {}
    for host, conn in conns.items():
        state = domain_state(libvirt_mod, conn, vm)
        if state is not None:
            out[host] = state
    return out


def peer_logins(lab, source: str, destination: str) -> int:
    """How many times `destination`'s sshd let `source`'s libvirtd in as leasewise, with `source`'s peer key."""
    listed = subprocess.run(["ssh-keygen", "-lf", str(lab.host_dir(source) / "etc" / "leasewise" / "id_ed25519.pub")],
                            capture_output=True, text=True, check=True).stdout.split()[1]
    ip = next(h.uri for h in lab.hosts if h.name == source).split("@")[1].split("/")[0]
    log = (lab.host_dir(destination) / "sshd.log").read_text()
    return sum(1 for line in log.splitlines()
               if f"Accepted publickey for leasewise from {ip} " in line and line.endswith(listed))


@pytest.mark.lab
def test_transport_daemon_live_migrates_a_best_effort_vm_peer_to_peer_out_of_an_ars_way(lab, conns, libvirt_mod,
                                                                                          tmp_path):
    # 256 MiB at 64 MiB/s (libvirt's limit too): 4 s, planned 5 s
    site = evacuation_site(lab, tmp_path, bandwidth_mib_s=64.0, margin="20s", dirtier_mib=16)
    first, second, small, state, common, guest = (site.first, site.second, site.small, site.state, site.common,
                                                  site.guest)
    cli("lease", "submit", "--nodes", "1", "--cpus", "1", "--memory", "256", "--duration", "100s",
        "--preemptible", *guest, *common)
    peers_before = peer_logins(lab, first, small) if lab.transport == "ssh" else 0
    daemon = subprocess.Popen([*CLI, "run", "--until-idle", *common], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    samples: list[tuple[float, dict[str, str]]] = []
    ar_vms: dict[str, list[tuple[float, dict[str, str]]]] = {"lw-2-0": [], "lw-2-1": []}
    try:
        deadline = time.monotonic() + 60
        while states(libvirt_mod, conns, "lw-1-0").get(first) != "running":
            assert time.monotonic() < deadline, "the best-effort VM never started on the first host"
            assert daemon.poll() is None, daemon.stdout.read()
            time.sleep(0.5)
        ar_start = (datetime.now().astimezone() + timedelta(seconds=40)).replace(microsecond=0)
        cli("lease", "submit", "--nodes", "2", "--cpus", "1", "--memory", "512", "--duration", "30s",
            "--start", ar_start.isoformat(), *guest, *common)
        deadline = time.monotonic() + 240
        while daemon.poll() is None and time.monotonic() < deadline:
            now = time.time()
            samples.append((now, states(libvirt_mod, conns, "lw-1-0")))
            for vm in ar_vms:
                ar_vms[vm].append((now, states(libvirt_mod, conns, vm)))
            time.sleep(0.5)
        output = daemon.stdout.read()
        assert daemon.returncode == 0, output
    finally:
        if daemon.poll() is None:
            daemon.kill()
        remove_lease_domains(libvirt_mod, conns)

    start_ts = ar_start.timestamp()
    before = [s for at, s in samples if at < start_ts - 25]
    during = [s for at, s in samples if start_ts <= at <= start_ts + 25]
    # it ran on the first host, then on the small one by the AR's start, and was never saved or shut off
    assert before and before[0].get(first) == "running"
    assert during and all(s.get(small) == "running" for s in during), during[:3]
    # from the first sample that saw it running to the last, it ran (or was paused) on some host in every
    # one: never saved, never shut off (the source may show it shut off for an instant after the switch-over)
    up = ["running" in s.values() or "paused" in s.values() for _, s in samples]
    first_up, last_up = up.index(True), len(up) - 1 - up[::-1].index(True)
    gaps = [s for (_, s), ok in zip(samples[first_up:last_up + 1], up[first_up:last_up + 1]) if not ok]
    assert not gaps, f"the best-effort VM stopped running before its end: {gaps[:3]}"
    assert samples[last_up][0] > start_ts + 25   # it ran on well after the AR started
    # the AR's VMs started on time on the two big hosts
    for vm, seen in ar_vms.items():
        up = [(at, s) for at, s in seen if "running" in s.values()]
        assert up, f"{vm} never ran"
        assert start_ts - 1 <= up[0][0] <= start_ts + 10, (vm, up[0][0] - start_ts)
        assert set(up[0][1]) <= {first, second}
    shown = json.loads(cli("lease", "show", "1", "--json", *common).stdout)
    assert shown["lease"]["state"] == "done"
    kinds = [r["kind"] for r in shown["plan"]]
    assert "live-migrate" in kinds and "suspend" not in kinds
    migrated = [e["detail"] for e in shown["events"] if e["kind"] == "enacted"
                and e["detail"].get("operation") == "migrate"]
    assert len(migrated) == 1 and (migrated[0]["src"], migrated[0]["dst"]) == (first, small)
    if lab.transport == "ssh":   # peer to peer: the source's libvirtd logged in on the destination itself
        assert peer_logins(lab, first, small) > peers_before
    operations = [e["detail"].get("operation") for e in shown["events"] if e["kind"] == "enacted"]
    assert "suspend" not in operations and "resume" not in operations
    report = json.loads((lambda p: (cli("report", "--lease", "1", "--json", str(p), *common), p.read_text())[1])(
        tmp_path / "report.json"))
    rows = [r for r in report["rows"] if r["kind"] == "live-migrate"]
    assert len(rows) == 1 and rows[0]["predicted_seconds"] > 0 and rows[0]["measured_seconds"] > 0
    printed = cli("report", "--lease", "1", *common).stdout
    assert "live-migrate" in printed
    print(printed)
    print(f"live migration of a 256 MiB guest: predicted {rows[0]['predicted_seconds']:.2f} s, "
          f"measured {rows[0]['measured_seconds']:.2f} s, downtime {rows[0]['downtime_ms']:.0f} ms")
