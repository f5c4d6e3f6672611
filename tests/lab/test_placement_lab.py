"""Placement on real libvirt hosts (issue 32): a `--spread` lease of 2 VMs on a site of 2 hosts runs one VM on
each, and a drain of one of them, with room for both VMs on the other host, must not put them together:
no live migration there; the lease is suspended (or, too soon after its start for that, requeued) and runs
on two hosts again once the drained one is back. Observed through libvirt, sampled every half second, the
whole time: never both VMs on one host."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.lab.labkit import CLI, GUEST_DIR, REPO, daemon_config, domain_state, remove_lease_domains
from tests.lab.labkit import leasewise as cli

VMS = ("lw-1-0", "lw-1-1")


def hosts_of(libvirt_mod, conns) -> dict[str, str | None]:
    """Where each VM of the lease runs now (None: nowhere)."""
    out: dict[str, str | None] = {vm: None for vm in VMS}
    for host, conn in conns.items():
        for vm in VMS:
            if domain_state(libvirt_mod, conn, vm) == "running":
                out[vm] = host
    return out


@pytest.mark.lab
def test_a_spread_lease_stays_apart_through_a_drain(lab, conns, libvirt_mod, tmp_path):
    state, config = tmp_path / "state.sqlite", tmp_path / "leasewise.toml"
    daemon_config(config, "suspend_rate = 32\nresume_rate = 32\nmigration = \"yes\"\n"
                          "preemption_mode = \"migrate-first\"\n")
    common = ["--state", str(state), "--config", str(config)]
    # 2 vCPUs per host: the two 1-vCPU VMs would fit on one host; only their spread keeps them apart
    cli("host", "import", str(lab.inventory), "--cpus", "2", "--memory", "1024", *common, timeout=120)
    names = sorted(h["name"] for h in json.loads(cli("host", "list", "--json", *common).stdout))
    first, second, *rest = names
    for host in rest:   # a site of two hosts
        cli("host", "remove", host, *common)
    guest = ["--kernel", str(GUEST_DIR / "vmlinuz"), "--initrd", str(GUEST_DIR / "initrd.img"),
             "--cmdline", "console=ttyS0 quiet dirtier.mib=16 dirtier.pps=0"]
    answer = json.loads(cli("lease", "submit", "--nodes", "2", "--cpus", "1", "--memory", "256", "--duration", "10m",
                            "--spread", "--json", *guest, *common).stdout)
    assert sorted(answer["hosts"]) == [first, second]
    daemon = subprocess.Popen([*CLI, "run", *common], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    samples: list[dict[str, str | None]] = []

    def sample_until(done, limit: float, what: str) -> None:
        deadline = time.monotonic() + limit
        while True:
            now = hosts_of(libvirt_mod, conns)
            samples.append(now)
            if done(now):
                return
            assert daemon.poll() is None, daemon.stdout.read()
            assert time.monotonic() < deadline, f"{what}: {now}"
            time.sleep(0.5)

    try:
        sample_until(lambda now: sorted(filter(None, now.values())) == [first, second], 90,
                     "the VMs never ran on the two hosts")
        drained = json.loads(cli("host", "drain", first, "--by", "+60s", "--json", *common).stdout)
        change = {d["id"]: d["change"] for d in drained["leases"]}[1]
        # the only other host has room for both, but not apart: suspended or requeued, never moved there
        assert change.startswith(("suspends by", "requeued")), change
        sample_until(lambda now: not any(now.values()), 120, "the lease's VMs never stopped")
        deadline = time.monotonic() + 30
        while (state := json.loads(cli("lease", "show", "1", "--json", *common).stdout)["lease"]["state"]) not in \
                ("suspended-queued", "queued"):   # (waiting for two hosts: one cannot hold it spread)
            assert time.monotonic() < deadline, state
            samples.append(hosts_of(libvirt_mod, conns))
            time.sleep(0.5)
        # while the first host is drained the lease stays suspended (one host cannot hold it spread)
        for _ in range(10):
            samples.append(hosts_of(libvirt_mod, conns))
            time.sleep(0.5)
        assert not any(samples[-1].values())
        cli("host", "undrain", first, *common)
        sample_until(lambda now: sorted(filter(None, now.values())) == [first, second], 120,
                     "the lease never ran again on the two hosts")
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
        remove_lease_domains(libvirt_mod, conns)
    together = [s for s in samples if s[VMS[0]] is not None and s[VMS[0]] == s[VMS[1]]]
    assert not together, together[:3]
