"""A lab host loses its power during a lease (deploy/lab/lab crash: its QEMU processes, libvirtd and sshd killed
at once) and comes back empty (deploy/lab/lab boot). The daemon notices within `[daemon] host_timeout`, gives
the host up, requeues the best-effort lease that ran there (it starts again elsewhere, from its image), fails
the advance reservation that had a VM there with a notice to its owner (the `command` notifier), plans nothing
on the host meanwhile, and starts nothing twice when it returns: the domain definitions the host kept are
discarded. `leasewise report` says what the crash cost.

The hosts (store capacities) make the plan certain: lab1 has room for two 1-vCPU VMs, lab2 and lab3 for one;
the best-effort lease takes one of lab1's, the 3-VM reservation then needs a VM on every host."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime, timedelta

import pytest

from tests.lab.labkit import CLI, GUEST_DIR, REPO, daemon_config, domain_state, remove_lease_domains
from tests.lab.labkit import leasewise as cli

pytestmark = pytest.mark.lab

HOST_TIMEOUT_S = 15
NOTIFY = """\
import sys
with open(sys.argv[1], "a") as out:
    out.write(sys.stdin.read().replace("\\n", " ") + "\\n")
"""


def lw_domains(libvirt_mod, conns) -> dict[str, dict[str, str]]:
    """host -> {lw-* domain: state}, for the hosts that answer."""
    found = {}
    for host in conns:
        try:
            conn = conns[host]
            found[host] = {d.name(): domain_state(libvirt_mod, conn, d.name())
                           for d in conn.listAllDomains(0) if d.name().startswith("lw-")}
        except libvirt_mod.libvirtError:   # (the crashed host)
            continue
    return found


def wait(what: str, check, daemon: subprocess.Popen, timeout: float):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert daemon.poll() is None, f"the daemon stopped: {daemon.stdout.read()}"
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(0.5)


def test_power_loss_of_a_host_requeues_best_effort_fails_the_reservation_and_runs_nothing_twice(
        lab, conns, libvirt_mod, tmp_path):
    from orchestrator.state.store import Store

    lost, others = lab.names[0], lab.names[1:]
    state, config, received = tmp_path / "state.sqlite", tmp_path / "leasewise.toml", tmp_path / "notices.jsonl"
    (tmp_path / "notify.py").write_text(NOTIFY)
    daemon_config(config)
    config.write_text(config.read_text().replace("[daemon]\n", f'[daemon]\nhost_timeout = "{HOST_TIMEOUT_S}s"\n')
                      + f'[notify]\nnotifiers = ["command"]\nbefore_end = []\n[notify.command]\n'
                        f'argv = {json.dumps([sys.executable, str(tmp_path / "notify.py"), str(received)])}\n')
    common = ["--state", str(state), "--config", str(config)]
    guest = ["--kernel", str(GUEST_DIR / "vmlinuz"), "--initrd", str(GUEST_DIR / "initrd.img"),
             "--cmdline", "console=ttyS0 quiet dirtier.mib=16 dirtier.pps=0"]
    cli("host", "import", str(lab.inventory), "--cpus", "1", "--memory", "1024", *common)
    with Store.open(state) as store:
        store.update_host_capacity(lost, 2, 1024)
    cli("lease", "submit", "--nodes", "1", "--cpus", "1", "--memory", "256", "--duration", "600s", "--preemptible",
        *guest, *common)
    ar_start = (datetime.now().astimezone() + timedelta(seconds=25)).replace(microsecond=0)
    cli("lease", "submit", "--nodes", "3", "--cpus", "1", "--memory", "256", "--duration", "300s",
        "--start", ar_start.isoformat(), *guest, *common)
    daemon = subprocess.Popen([*CLI, "run", *common], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    crashed = booted = False
    try:
        wait("the best-effort VM runs on the host to lose", lambda: lw_domains(libvirt_mod, conns).get(lost, {})
             .get("lw-1-0") == "running", daemon, 90)
        wait("the reservation runs on every host", lambda: all(
            any(s == "running" and n.startswith("lw-2-") for n, s in lw_domains(libvirt_mod, conns)
                .get(h, {}).items()) for h in lab.names), daemon, 120)
        lab.crash(lost)
        crashed, crashed_at = True, time.time()

        def lease(i: int):
            with Store.open(state) as store:
                return store.lease(i)

        # given up within host_timeout (and a poll or two); the best-effort VM runs again elsewhere
        wait("the reservation fails", lambda: lease(2).state.value == "failed", daemon, HOST_TIMEOUT_S + 30)
        with Store.open(state) as store:
            (down,) = [e for e in store.events() if e.kind == "host-down"]
        assert down.detail["host"] == lost and down.time.timestamp() - crashed_at <= HOST_TIMEOUT_S + 5
        where = wait("the best-effort VM runs again elsewhere", lambda: [
            h for h, vms in lw_domains(libvirt_mod, conns).items() if vms.get("lw-1-0") == "running"], daemon, 90)
        assert where[0] in others and lease(1).state.value == "active"
        assert f"host {lost} has not answered for" in lease(2).reason
        notices = wait("the reservation's owner is told", lambda: [
            json.loads(line) for line in received.read_text().splitlines()] if received.exists() else None,
            daemon, 30)
        (ended,) = [n for n in notices if n["lease"]["id"] == 2]
        assert ended["notice"]["key"] == "ended" and ended["lease"]["state"] == "failed"
        assert f"host {lost} has not answered for" in ended["notice"]["reason"]
        # nothing is planned on the lost host meanwhile
        shown = json.loads(cli("lease", "show", "1", "--json", *common).stdout)
        later = [r for r in shown["plan"] if datetime.fromisoformat(r["start"].replace("Z", "+00:00")) >= down.time]
        assert later and all(lost not in r["hosts"] for r in later), shown["plan"]

        lab.boot(lost)
        booted = True
        with Store.open(state) as store:
            wait("the host is back", lambda: any(e.kind == "host-up" for e in store.events()), daemon, 60)
        # it kept the definitions of the VMs that ran there: the best-effort one is discarded, nothing is started
        # there again. The failed reservation's VM there goes by whichever gets to the host first: the host
        # watch's discard, the reservation's kill (which waited for the host), or its cleanup
        def gone():
            with Store.open(state) as store:
                events = store.events()
            discarded = sorted(e.detail["vm"] for e in events if e.kind == "reconciled"
                               and e.detail.get("outcome") == "discarded-left-on-lost-host")
            left = lw_domains(libvirt_mod, conns).get(lost)
            return discarded if "lw-1-0" in discarded and left == {} else None

        wait("the VMs the host kept are gone", gone, daemon, 60)
        seen = lw_domains(libvirt_mod, conns)
        assert seen[lost] == {}, seen
        running = [h for h, vms in seen.items() if vms.get("lw-1-0") == "running"]
        assert running == where[:1], seen                        # once, where it was started again
        report = json.loads((lambda p: (cli("report", "--json", str(p), *common), p.read_text())[1])(
            tmp_path / "report.json"))
        (row,) = report["host_losses"]
        assert (row["host"], row["requeued"], row["failed"]) == (lost, 1, 1) and row["back_at"] is not None
        assert row["lost_work_s"] > 0
        printed = cli("report", *common).stdout
        assert "hosts lost" in printed and lost in printed
    finally:
        if crashed and not booted:
            lab.boot(lost)
        if daemon.poll() is None:
            daemon.terminate()
            try:
                daemon.wait(30)
            except subprocess.TimeoutExpired:
                daemon.kill()
        print(daemon.stdout.read())
        remove_lease_domains(libvirt_mod, conns)
