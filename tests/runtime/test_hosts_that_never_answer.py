"""Hosts that never answer (each accepts the connection and says nothing, as a host that drops every packet
keeps a connect waiting) hold up the daemon's step by `[daemon] answer_timeout` at most, once, however many
they are: the look asks every host at once, and the lease on the host that answers starts in that step.
Real libvirt: the other host is a `test://` hypervisor, the silent ones a listening socket that never
accepts. (The lab's tests/lab/test_cut_lab.py cuts a real host off.)"""

from __future__ import annotations

import socket
import threading
import time
from datetime import timedelta

from drivers.clock import SimulatedClock
from drivers.deadline import answer_within
from drivers.inventory import HostConfig
from drivers.libvirt import LibvirtDriver
from orchestrator.config import config_from_dict
from orchestrator.model.lease import LeaseType
from orchestrator.runtime.daemon import Daemon
from orchestrator.state.store import Store
from tests.runtime.test_daemon import leases, request, submit
from tests.support.times import T0

NODE = """<node><cpu><nodes>1</nodes><sockets>1</sockets><cores>8</cores><threads>1</threads>
<mhz>2000</mhz></cpu><memory>16777216</memory></node>"""


def test_hosts_that_never_answer_hold_up_the_step_by_the_answer_timeout_once(tmp_path):
    node = tmp_path / "node.xml"
    node.write_text(NODE)
    shared = (str(tmp_path),)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        mute = [HostConfig(f"mute{i}", f"qemu+tcp://127.0.0.1:{silent.getsockname()[1]}/system", domain_type="qemu",
                           state_dir=str(tmp_path), shared_storage=shared) for i in range(3)]
        hosts = [HostConfig("a", f"test://{node}", domain_type="qemu", state_dir=str(tmp_path), shared_storage=shared),
                 *mute]
        path = tmp_path / "state.sqlite"
        with Store.open(path) as store:
            store.add_host(hosts[0], 4, 4096)
            for host in mute:
                store.add_host(host, 1, 512)   # (too small for the lease: it goes to "a")
        cfg = config_from_dict({"daemon": {"driver": "libvirt", "poll_interval": "60s", "answer_timeout": "1s"}})
        lease = submit(path, cfg, request(LeaseType.BEST_EFFORT, 10, memory=1024))
        # as `leasewise run` makes it: the connect gives up after the answer timeout too
        driver = LibvirtDriver(hosts, clock=SimulatedClock(T0), retry_wait_s=0.0, connect_timeout_s=1.0)
        notes: list[str] = []
        # (should the step wait for the silent host, closing the socket after a minute ends the wait)
        hangup = threading.Timer(60, silent.close)
        hangup.start()
        try:
            with Store.open(path) as store:
                daemon = Daemon(store, cfg, driver, driver._connections.clock, say=notes.append)

                def step_at(minutes: float) -> float:
                    daemon.clock.advance_to(T0 + timedelta(minutes=minutes))
                    began = time.monotonic()
                    daemon.step()
                    daemon.runner.wait_idle()
                    return time.monotonic() - began

                first = step_at(0)
                assert sorted(n.split()[2] for n in notes if " does not answer: " in n) == ["mute0", "mute1", "mute2"]
                assert [v.name for v in driver.list_vms("a")] == [f"lw-{lease}-0"]
                assert leases(path)[lease]["state"] == "active"
                # (the look waited for the three at once; the step's own calls to them then failed at once)
                assert 1.0 <= first < 2.5
                assert step_at(1) < 1.0   # their questions still open, their connects under way: not waited for
                daemon.close()
        finally:
            hangup.cancel()
            assert not answer_within(driver.close, 5).timed_out
