"""The daemon on real libvirt hosts: a best-effort VM is saved before an advance reservation's start, the
AR's VMs start on time, and the best-effort VM is restored after the AR, all observed through libvirt."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime, timedelta

import pytest

from tests.lab.labkit import (
    CLI,
    GUEST_DIR,
    REPO,
    daemon_config,
    domain_state,
    remove_lease_domains,
)
from tests.lab.labkit import leasewise as cli


def where_running(libvirt_mod, conns, vm: str) -> str | None:
    for host, conn in conns.items():
        if domain_state(libvirt_mod, conn, vm) == "running":
            return host
    return None


@pytest.mark.lab
def test_daemon_saves_best_effort_vm_for_an_ar_and_restores_it_after(lab, conns, libvirt_mod, tmp_path):
    state = tmp_path / "state.sqlite"
    config = tmp_path / "leasewise.toml"
    daemon_config(config, (
        "suspend_rate = 32\n"      # 256 MiB: an 8 s suspension is planned (a TCG save takes 1-2 s)
        "resume_rate = 32\n"
    ))
    common = ["--state", str(state), "--config", str(config)]
    guest = ["--kernel", str(GUEST_DIR / "vmlinuz"), "--initrd", str(GUEST_DIR / "initrd.img"),
             "--cmdline", "console=ttyS0 quiet dirtier.mib=16 dirtier.pps=0"]
    # one vCPU per host, so an AR for every host needs the best-effort lease's host too
    cli("host", "import", str(lab.inventory), "--cpus", "1", "--memory", "1024", *common)
    # the lease first: a daemon started with --until-idle on an empty plan would stop at once
    cli("lease", "submit", "--nodes", "1", "--cpus", "1", "--memory", "256", "--duration", "150s",
        "--preemptible", *guest, *common)
    daemon = subprocess.Popen([*CLI, "run", "--until-idle", *common], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    seen: dict[str, list[tuple[float, str | None]]] = {}
    names = ["lw-1-0", "lw-2-0", "lw-2-1", "lw-2-2"]
    try:
        deadline = time.monotonic() + 60
        while where_running(libvirt_mod, conns, "lw-1-0") is None:
            assert time.monotonic() < deadline, "the best-effort VM never started"
            assert daemon.poll() is None, daemon.stdout.read()
            time.sleep(0.5)
        ar_start = datetime.now().astimezone() + timedelta(seconds=45)
        ar_start = ar_start.replace(microsecond=0)
        cli("lease", "submit", "--nodes", "3", "--cpus", "1", "--memory", "256", "--duration", "40s",
            "--start", ar_start.isoformat(), *guest, *common)
        ar_end = ar_start + timedelta(seconds=40)
        deadline = time.monotonic() + 300
        while daemon.poll() is None and time.monotonic() < deadline:
            now = time.time()
            for vm in names:
                seen.setdefault(vm, []).append((now, where_running(libvirt_mod, conns, vm)))
            time.sleep(0.5)
        output = daemon.stdout.read()
        assert daemon.returncode == 0, output
    finally:
        if daemon.poll() is None:
            daemon.kill()
        remove_lease_domains(libvirt_mod, conns)

    def running_at(vm: str, t: float) -> bool:
        samples = [host for at, host in seen[vm] if abs(at - t) < 0.75]
        return any(samples)

    start_ts, end_ts = ar_start.timestamp(), ar_end.timestamp()
    # the best-effort VM ran, was not running just before the AR started (saved), and ran again after it
    assert running_at("lw-1-0", start_ts - 20)
    assert not running_at("lw-1-0", start_ts - 1)
    assert not any(host for at, host in seen["lw-1-0"] if start_ts <= at <= end_ts)
    assert any(host for at, host in seen["lw-1-0"] if at > end_ts)
    # the AR's three VMs were running within a few seconds of its start, on three different hosts
    for vm in ("lw-2-0", "lw-2-1", "lw-2-2"):
        first = min((at for at, host in seen[vm] if host), default=None)
        assert first is not None and start_ts - 1 <= first <= start_ts + 10, (vm, first, start_ts)
    hosts = {host for vm in ("lw-2-0", "lw-2-1", "lw-2-2") for at, host in seen[vm] if host}
    assert len(hosts) == 3
    shown = json.loads(cli("lease", "show", "1", "--json", *common).stdout)
    kinds = [r["kind"] for r in shown["plan"]]
    assert shown["lease"]["state"] == "done" and "suspend" in kinds and "resume" in kinds
    assert json.loads(cli("lease", "show", "2", "--json", *common).stdout)["lease"]["state"] == "done"
    operations = [e["detail"].get("operation") for e in shown["events"] if e["kind"] == "enacted"]
    assert operations[:3] == ["start", "suspend", "resume"] and operations[-1] == "stop"
    measured = [e["detail"]["wall_seconds"] for e in shown["events"] if e["detail"].get("operation") == "suspend"]
    print(f"measured suspend of a 256 MiB guest: {measured[0]:.2f} s (planned 8 s)")
