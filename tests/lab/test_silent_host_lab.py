"""A host whose libvirtd dies for a while (issue 19), on real libvirt hosts. Its VMs run on (QEMU does not need
libvirtd), the daemon cannot reach it. A lease that ends meanwhile ends `done`, not failed, and the VM it
left on the silent host is removed the moment that host answers again; the next lease, an advance reservation
needing every host, is given up (failed, the VMs it did start stopped) once the host has been silent for
`[daemon] host_timeout` (the host is then lost: tests/lab/test_power_lab.py). Afterwards no `lw-*` domain is
left on any host and nothing waits in the intent log."""

from __future__ import annotations

import re
import subprocess
import time
from datetime import datetime, timedelta

import pytest

from tests.lab.labkit import CLI, GUEST_DIR, REPO, daemon_config, domain_state, open_conn, remove_lease_domains
from tests.lab.labkit import leasewise as cli


def domains(libvirt_mod, lab, skip: str | None = None) -> dict[str, list[str]]:
    """host -> its lw-* domains, each host (but `skip`) asked on a fresh connection."""
    found = {}
    for name, uri in lab.uris.items():
        if name == skip:
            continue
        conn = open_conn(libvirt_mod, uri)
        try:
            found[name] = sorted(d.name() for d in conn.listAllDomains(0) if d.name().startswith("lw-"))
        finally:
            conn.close()
    return found


@pytest.mark.lab
def test_a_host_silent_through_a_lease_end_loses_nothing(lab, conns, libvirt_mod, tmp_path):
    from orchestrator.state.store import Store

    silent = lab.names[1]
    state = tmp_path / "state.sqlite"
    config = tmp_path / "leasewise.toml"
    daemon_config(config)
    config.write_text(config.read_text().replace("[daemon]\n", '[daemon]\nhost_timeout = "45s"\n'))
    common = ["--state", str(state), "--config", str(config)]
    guest = ["--kernel", str(GUEST_DIR / "vmlinuz"), "--initrd", str(GUEST_DIR / "initrd.img"),
             "--cmdline", "console=ttyS0 quiet dirtier.mib=16 dirtier.pps=0"]
    # one vCPU per host: each lease needs every host, the silent one included
    cli("host", "import", str(lab.inventory), "--cpus", "1", "--memory", "1024", *common)
    nodes = str(len(lab.names))
    cli("lease", "submit", "--nodes", nodes, "--cpus", "1", "--memory", "256", "--duration", "40s", *guest, *common)
    start = (datetime.now().astimezone() + timedelta(seconds=60)).replace(microsecond=0)
    cli("lease", "submit", "--nodes", nodes, "--cpus", "1", "--memory", "256", "--duration", "120s",
        "--start", start.isoformat(), *guest, *common)
    daemon = subprocess.Popen([*CLI, "run", *common], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    stopped = False
    try:
        deadline = time.monotonic() + 90
        while domain_state(libvirt_mod, conns[silent], "lw-1-1") != "running":
            assert time.monotonic() < deadline, "the first lease's VM never started on the host to be cut off"
            assert daemon.poll() is None, daemon.stdout.read()
            time.sleep(0.5)
        lab.stop_libvirtd(silent)
        stopped = True

        def lease_states():
            with Store.open(state) as store:
                return {l.id: l for l in store.load_leases()}

        # the first lease ends; the second one's start on the silent host waits, then is given up
        deadline = time.monotonic() + 180
        while lease_states()[2].state.value not in ("failed", "done"):
            assert time.monotonic() < deadline, f"the second lease was never given up: {lease_states()[2].state}"
            assert daemon.poll() is None, daemon.stdout.read()
            time.sleep(1)
        leases = lease_states()
        assert leases[1].state.value == "done", leases[1].reason
        # (given up by its start's own wait, or because its host stayed silent: whichever came first)
        assert leases[2].state.value == "failed" and re.search(r"no answer for|not answered for", leases[2].reason), \
            leases[2].reason
        deadline = time.monotonic() + 45
        while any(names for host, names in domains(libvirt_mod, lab, skip=silent).items()):
            assert time.monotonic() < deadline, f"left on the reachable hosts: {domains(libvirt_mod, lab, skip=silent)}"
            time.sleep(1)

        lab.start_libvirtd(libvirt_mod, silent)
        stopped = False
        deadline = time.monotonic() + 60
        while any(domains(libvirt_mod, lab).values()):
            assert time.monotonic() < deadline, f"left on the hosts: {domains(libvirt_mod, lab)}"
            assert daemon.poll() is None, daemon.stdout.read()
            time.sleep(1)
        deadline = time.monotonic() + 30
        while True:
            with Store.open(state) as store:
                unreleased, unfinished = store.unreleased_leases(), store.unfinished_operations()
                failures = [e for e in store.events(lease_id=1) if e.kind == "enactment-failed"]
            if not unreleased and not unfinished:
                break
            assert time.monotonic() < deadline, f"cleanup never finished: {unreleased} {unfinished}"
            time.sleep(1)
        assert failures == [], failures
    finally:
        if stopped:
            lab.start_libvirtd(libvirt_mod, silent)
        if daemon.poll() is None:
            daemon.kill()
        output = daemon.stdout.read()
        print(output)   # (shown when the test fails)
        remove_lease_domains(libvirt_mod, {n: open_conn(libvirt_mod, u) for n, u in lab.uris.items()})
    assert f"host {silent} answers again" in output, output
