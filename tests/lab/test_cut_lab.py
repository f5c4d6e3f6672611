"""A lab host cut off while the daemon runs (deploy/lab/lab cut: it drops every packet, as behind a partition
or a firewall; nothing answers, not even "connection refused"). The daemon's connection to it hangs until its
keepalive gives up and a connect to it would wait minutes, yet each step waits for it `[daemon] answer_timeout`
at most: a lease on another host is cancelled and the next one starts there while the cut host is silent. Its
own lease runs on through the cut (QEMU does not need the network), and once mended it answers again through
the connect that went on meanwhile. The libvirt driver's operations each wait on a connection of their own,
so a cut wakes every one; a host removed and added again meanwhile gets new ones."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

from tests.lab.labkit import (CLI, GUEST_DIR, REPO, domain_state, imported_site, remove_lease_domains,
                             stop_processes)
from tests.lab.labkit import leasewise as cli

pytestmark = pytest.mark.lab

ANSWER_TIMEOUT_S = 3


def test_a_host_cut_off_holds_up_the_others_by_the_answer_timeout_at_most(lab, conns, libvirt_mod, tmp_path):
    common = imported_site(lab, tmp_path)   # (1 vCPU a host: one lease's VM fills it)
    config = tmp_path / "leasewise.toml"
    config.write_text(config.read_text().replace("[daemon]\n", f'[daemon]\nanswer_timeout = "{ANSWER_TIMEOUT_S}s"\n'))
    guest = ["--kernel", str(GUEST_DIR / "vmlinuz"), "--initrd", str(GUEST_DIR / "initrd.img"),
             "--cmdline", "console=ttyS0 quiet dirtier.mib=16 dirtier.pps=0"]
    lease = ["lease", "submit", "--nodes", "1", "--cpus", "1", "--memory", "256", "--duration", "600s", *guest,
             *common]
    for _ in lab.names:
        cli(*lease)
    log = tmp_path / "daemon.log"
    out = log.open("w")
    daemon = subprocess.Popen([*CLI, "run", *common], cwd=REPO, stdout=out, stderr=subprocess.STDOUT, text=True)
    cut, other = lab.names[1], lab.names[0]
    is_cut = False

    def wait(what: str, check, timeout: float):
        deadline = time.monotonic() + timeout
        while not (value := check()):
            assert daemon.poll() is None, f"the daemon stopped:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s\n{log.read_text()}"
            time.sleep(0.2)
        return value

    def running_on(host: str) -> list[str]:
        return [d.name() for d in conns[host].listAllDomains(0)
                if d.name().startswith("lw-") and domain_state(libvirt_mod, conns[host], d.name()) == "running"]

    try:
        placed = wait("a VM runs on every host", lambda: (lambda found: found if all(found.values()) else None)(
            {h: running_on(h) for h in lab.names}), 120)
        lab.cut(cut)
        is_cut = True
        began = time.monotonic()
        status = subprocess.run([str(REPO / "deploy/lab/lab"), "status"], stdin=subprocess.DEVNULL,
                                capture_output=True, text=True, timeout=120)
        (line,) = [row for row in status.stdout.splitlines() if row.startswith(cut)]
        assert status.returncode == 1 and "YES" in line.split() and "(cut)" in line, status.stdout
        assert time.monotonic() - began < 60   # (the cut host is not asked: no ask waits out its timeout)
        time.sleep(max(0.0, 2 - (time.monotonic() - began)))   # (the daemon's next looks ask the cut host)
        (on_other,) = placed[other]
        cli("lease", "cancel", on_other.split("-")[1], *common)
        began = time.monotonic()
        cli(*lease)   # its only room: the cancelled lease's host
        fourth = f"lw-{len(lab.names) + 1}-0"
        wait("the next lease runs where the cancelled one ran", lambda: fourth in running_on(other), 60)
        took = time.monotonic() - began
        wait("the daemon says the cut host does not answer", lambda: f"host {cut} does not answer" in log.read_text(),
             ANSWER_TIMEOUT_S + 10)
        # a stop and a start through steps that each waited for the cut host once at most (its keepalive alone
        # takes longer; a connect to it, minutes)
        assert took < 3 * ANSWER_TIMEOUT_S + 10, (took, log.read_text())
        lab.mend(cut)
        is_cut = False
        # the connect begun during the cut gets through at the kernel's next SYN (they come 1, 2, 4, ... 64 s apart)
        wait("the cut host answers again", lambda: f"host {cut} answers again" in log.read_text(), 150)
        assert running_on(cut) == placed[cut]   # its lease ran on through the cut
    finally:
        if is_cut:
            lab.mend(cut)
        stop_processes(None, daemon)
        out.close()
        print(log.read_text())
        remove_lease_domains(libvirt_mod, conns)


def test_operations_on_a_host_cut_off_each_end_within_the_keepalive_and_a_connect(lab, libvirt_mod):
    """libvirt 9.0's client wakes one of the calls waiting on a connection when its keepalive gives the link
    up, and leaves the others waiting until the kernel does (about 15 min). Each operation makes its calls
    over a connection no other call uses meanwhile, so each is woken: three operations under way at the cut,
    with a question beside them on the shared connection, and three begun after it, all end `HostUnreachable`
    within the keepalive, a retry and a connect timeout."""
    from drivers.clock import RealClock
    from drivers.errors import HostUnreachable
    from drivers.libvirt.connection import Connections, RetryPolicy

    cut = lab.names[1]
    connections = Connections(libvirt_mod, lab.hosts, clock=RealClock(), retry=RetryPolicy(attempts=2, wait_s=0.2),
                              keepalive_interval_s=2, keepalive_count=2, connect_timeout_s=3)
    ended: dict[str, tuple[str, float]] = {}

    def operation(name: str, wait_s: float) -> None:
        began = time.monotonic()

        def step(conn):
            time.sleep(wait_s)   # (under way, its connection open, when the host is cut off)
            return conn.getHostname()

        try:
            with connections.operation():
                connections.call(cut, name, step)
            ended[name] = ("answered", time.monotonic() - began)
        except HostUnreachable:
            ended[name] = ("unreachable", time.monotonic() - began)

    def run(names: list[str], wait_s: float) -> list[threading.Thread]:
        threads = [threading.Thread(target=operation, args=(name, wait_s), daemon=True) for name in names]
        for thread in threads:
            thread.start()
        return threads

    is_cut = False
    try:
        shared = connections.call(cut, "connect", lambda c: c)

        def connection_of_an_operation():
            with connections.operation():
                return connections.call(cut, "connect", lambda c: c)

        first = connection_of_an_operation()
        # an operation's connection is not the shared one, and is kept for the next operation (a connect
        # each time would cost a handshake over ssh)
        assert first is not shared and connection_of_an_operation() is first
        under_way = run(["under way 1", "under way 2", "under way 3"], 2.0)
        time.sleep(1.0)
        lab.cut(cut)
        is_cut = True
        question = threading.Thread(target=lambda: connections.ask_each("list", {cut: lambda c: c.listAllDomains(0)}),
                                    daemon=True)
        question.start()
        time.sleep(1.5)
        after = run(["after 1", "after 2", "after 3"], 0.0)
        for thread in under_way + after:
            thread.join(60)
        # (the keepalive gives up after about 6 s, the retry waits 0.2 s, the connect 3 s: 30 s is ample)
        assert set(ended) == {"under way 1", "under way 2", "under way 3", "after 1", "after 2", "after 3"}, ended
        assert all(outcome == "unreachable" and took < 30 for outcome, took in ended.values()), ended
    finally:
        if is_cut:
            lab.mend(cut)
        connections.close()


def test_an_operations_connection_to_a_host_removed_and_added_again_is_not_used_again(lab, libvirt_mod):
    """A host removed and added again (its URI may have changed) while an operation holds a connection to it:
    the operation's next call to it opens a connection for the host as it is now, and the old one is not
    kept for a later operation; the new one is."""
    import dataclasses

    from drivers.clock import RealClock
    from drivers.libvirt.connection import Connections, RetryPolicy

    host = lab.names[0]
    (cfg,) = [h for h in lab.hosts if h.name == host]
    connections = Connections(libvirt_mod, lab.hosts, clock=RealClock(), retry=RetryPolicy(attempts=2, wait_s=0.2))

    def own():
        return connections.call(host, "connect", lambda c: c)

    try:
        with connections.operation():
            before = own()
            connections.remove(host)
            connections.add(dataclasses.replace(cfg))
            during = own()
        with connections.operation():
            after = own()
        assert during is not before and after is during
    finally:
        connections.close()
