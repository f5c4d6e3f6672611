"""End-of-lease notices sent by a real daemon (simulated driver, fast clock) through a real SMTP server
(aiosmtpd on loopback) and a real program: each once, across restarts, failures recorded, never fatal."""

from __future__ import annotations

import email
import json
import logging
import socket
import sys
from datetime import datetime, timedelta
from email.message import Message
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller

from drivers.clock import SimulatedClock
from drivers.inventory import HostConfig
from orchestrator.config import NOTIFIER_NAMES, config_from_dict
from orchestrator.model.lease import LeaseRequest, LeaseType
from orchestrator.model.resources import Resources
from orchestrator.runtime.daemon import Daemon, fast_clock_start, simulated_driver_for
from orchestrator.runtime.notices import SINCE_KEY
from orchestrator.runtime.notifiers import NOTIFIERS
from orchestrator.state.cluster import Cluster
from orchestrator.state.store import Store
from tests.support.times import T0

H, M = timedelta(hours=1), timedelta(minutes=1)


class Inbox:
    """aiosmtpd's handler: every message the server accepted, as (envelope recipients, parsed message)."""

    def __init__(self):
        self.messages: list[tuple[list[str], Message]] = []

    async def handle_DATA(self, server, session, envelope):
        self.messages.append((list(envelope.rcpt_tos), email.message_from_bytes(envelope.content)))
        return "250 Message accepted for delivery"

    def subjects(self) -> list[str]:
        return [m["Subject"] for _, m in self.messages]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def smtp():
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        yield controller.port, inbox
    finally:
        controller.stop()


def config(port: int, notifiers=("email",), **notify):
    return config_from_dict({
        "daemon": {"driver": "simulated", "poll_interval": "60s"},
        "notify": {"notifiers": list(notifiers), **notify,
                   "email": {"smtp_host": "127.0.0.1", "smtp_port": port, "sender": "leasewise@lab.example.org",
                             "domain": "example.org", "timeout": "5s"}},
    })


def make_store(tmp_path: Path) -> Path:
    path = tmp_path / "state.sqlite"
    with Store.open(path) as store:
        store.add_host(HostConfig(name="host1", uri="sim://", domain_type="qemu"), 2, 2048)
    return path


def submit(path: Path, cfg, hours: float = 3, user: str = "alice", name: str = "build", at: datetime = T0) -> int:
    req = LeaseRequest(type=LeaseType.BEST_EFFORT, nodes=(Resources.of(1, 1024),), duration=hours * H,
                       submit_time=at, user=user, name=name)
    with Store.open(path) as store, store.transaction():
        cluster = Cluster(store, cfg)
        lease = cluster.submit(req, at)
        cluster.save(at)
        return lease.id


def run(path: Path, cfg, until: datetime | None = None) -> None:
    """A new Daemon (as after a restart) on the store, from where the last one stopped."""
    with Store.open(path) as store:
        driver = simulated_driver_for(store, path.with_suffix(".hosts.json"), cfg.scheduling)   # (its VMs kept)
        Daemon(store, cfg, driver, SimulatedClock(fast_clock_start(store, T0))).run(until_idle=until is None,
                                                                                   until=until)


def outcomes(path: Path) -> dict[tuple[int, str, str], tuple[str, datetime]]:
    with Store.open(path) as store:
        return {(n.lease_id, n.key, n.notifier): (n.outcome, n.sent_at) for n in store.notices()}


def lease_state(path: Path, lease_id: int) -> tuple[str, datetime | None]:
    with Store.open(path) as store:
        lease = store.lease(lease_id)
        return lease.state.value, lease.end_time


def test_the_registry_has_every_notifier_the_configuration_accepts():
    assert tuple(NOTIFIERS) == NOTIFIER_NAMES


def test_reminders_and_the_end_arrive_once_each_to_the_owner_across_a_restart(tmp_path, smtp):
    port, inbox = smtp
    path, cfg = make_store(tmp_path), config(port)
    lease_id = submit(path, cfg)
    run(path, cfg, until=T0 + 2 * H + 30 * M)            # stopped after the 1 h reminder
    assert inbox.subjects() == [f"leasewise: lease {lease_id} (build) ends in 1 hour"]
    run(path, cfg)                                        # restarted: the rest, not the 1 h one again
    run(path, cfg)                                        # and once more, with nothing left to do
    assert inbox.subjects() == [f"leasewise: lease {lease_id} (build) ends in 1 hour",
                                f"leasewise: lease {lease_id} (build) ends in 10 minutes",
                                f"leasewise: lease {lease_id} (build) ended (done)"]
    for recipients, message in inbox.messages:
        assert recipients == ["alice@example.org"] and message["To"] == "alice@example.org"
        assert message["From"] == "leasewise@lab.example.org" and message["Auto-Submitted"] == "auto-generated"
    reminder = inbox.messages[1][1].get_payload()
    assert "ends at 2026-01-01T16:00:00Z, in 10 minutes" in reminder
    assert "Hosts: host1" in reminder and f"leasewise lease extend {lease_id} --by 1h" in reminder
    assert "ended at 2026-01-01T16:00:00Z: done: its time is up" in inbox.messages[2][1].get_payload()
    assert outcomes(path) == {(lease_id, "before_end:1h", "email"): ("sent", T0 + 2 * H),
                              (lease_id, "before_end:10m", "email"): ("sent", T0 + 2 * H + 50 * M),
                              (lease_id, "ended", "email"): ("sent", T0 + 3 * H)}
    assert lease_state(path, lease_id) == ("done", T0 + 3 * H)


def test_an_extended_lease_is_reminded_against_its_new_end_and_not_twice(tmp_path, smtp):
    port, inbox = smtp
    path, cfg = make_store(tmp_path), config(port, before_end=["1h", "10m"])
    lease_id = submit(path, cfg)
    run(path, cfg, until=T0 + 2 * H + 55 * M)            # both reminders sent for the end at 16:00
    with Store.open(path) as store, store.transaction():
        cluster = Cluster(store, cfg)
        cluster.extend(lease_id, 2 * H, T0 + 2 * H + 55 * M)
        cluster.save(T0 + 2 * H + 55 * M)
    run(path, cfg)
    assert [s.split(") ")[1] for s in inbox.subjects()] == ["ends in 1 hour", "ends in 10 minutes", "ended (done)"]
    assert lease_state(path, lease_id) == ("done", T0 + 5 * H)


def test_leases_that_ended_before_notices_began_are_not_announced(tmp_path, smtp):
    port, inbox = smtp
    path = make_store(tmp_path)
    quiet = config(port, notifiers=())
    before = submit(path, quiet, hours=1)
    run(path, quiet)                                      # no notifier: nothing sent, nothing recorded
    with Store.open(path) as store:
        assert store.get_meta(SINCE_KEY) is None
    cfg = config(port)
    later = submit(path, cfg, hours=0.5, name="", at=T0 + H)
    run(path, cfg)
    assert inbox.subjects() == [f"leasewise: lease {later} ends in 10 minutes", f"leasewise: lease {later} ended (done)"]
    assert {key[0] for key in outcomes(path)} == {later} and before != later


def test_a_dead_smtp_server_is_logged_recorded_and_the_lease_still_ends(tmp_path, caplog):
    path, cfg = make_store(tmp_path), config(free_port())   # nothing listens there
    lease_id = submit(path, cfg)
    with caplog.at_level(logging.WARNING, logger="orchestrator.runtime.notices"):
        run(path, cfg)
    assert lease_state(path, lease_id) == ("done", T0 + 3 * H)
    recorded = outcomes(path)
    assert set(recorded) == {(lease_id, k, "email") for k in ("before_end:1h", "before_end:10m", "ended")}
    for outcome, _ in recorded.values():
        assert outcome.startswith("failed: SMTP 127.0.0.1:") and "refused" in outcome.lower()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3 and all(r.lease == lease_id for r in warnings)
    assert all("\n" not in r.getMessage() for r in warnings)


SCRIPT = """\
import sys
data = sys.stdin.read()
with open(sys.argv[1], "a") as out:
    out.write(data)
if len(sys.argv) > 2:
    sys.stderr.write("first line\\n" + sys.argv[2] + "\\n")
    sys.exit(3)
"""


def test_the_command_gets_each_notice_as_json_and_a_failing_one_stops_nothing(tmp_path, smtp):
    port, inbox = smtp
    script = tmp_path / "notify-lease.py"
    script.write_text(SCRIPT)
    received = tmp_path / "received.jsonl"
    path = make_store(tmp_path)
    cfg = config_from_dict({
        "daemon": {"driver": "simulated", "poll_interval": "60s"},
        "notify": {"notifiers": ["command", "email"], "before_end": ["10m"],
                   "command": {"argv": [sys.executable, str(script), str(received)], "timeout": "20s"},
                   "email": {"smtp_host": "127.0.0.1", "smtp_port": port, "domain": "example.org"}},
    })
    lease_id = submit(path, cfg, hours=1)
    run(path, cfg)
    documents = [json.loads(line) for line in received.read_text().splitlines()]
    assert [d["notice"]["key"] for d in documents] == ["before_end:10m", "ended"]
    first, last = documents
    assert first["recipient"] == "alice@example.org"
    assert first["lease"] == {"id": lease_id, "name": "build", "user": "alice", "type": "best-effort",
                              "state": "active", "hosts": ["host1"], "vms": 1, "start_time": "2026-01-01T13:00:00Z",
                              "end_time": None, "extend": f"leasewise lease extend {lease_id} --by 1h"}
    assert first["notice"]["end"] == "2026-01-01T14:00:00Z" and first["notice"]["sent_at"] == "2026-01-01T13:50:00Z"
    assert first["notice"]["subject"] == f"leasewise: lease {lease_id} (build) ends in 10 minutes"
    assert last["lease"]["state"] == "done" and last["notice"]["reason"] == "done: its time is up"
    assert len(inbox.messages) == 2                       # the other notifier sent its own

    # the same program failing: recorded with its exit code and its last stderr line, the mail still sent
    failing = config_from_dict({
        "daemon": {"driver": "simulated", "poll_interval": "60s"},
        "notify": {"notifiers": ["command", "email"], "before_end": ["10m"],
                   "command": {"argv": [sys.executable, str(script), str(received), "no pager here"]},
                   "email": {"smtp_host": "127.0.0.1", "smtp_port": port, "domain": "example.org"}},
    })
    other = submit(path, failing, hours=1, user="bob", at=T0 + H)
    run(path, failing)
    recorded = outcomes(path)
    assert recorded[(other, "ended", "command")][0] == f"failed: {sys.executable} exited with code 3: no pager here"
    assert recorded[(other, "ended", "email")][0] == "sent"
    assert inbox.messages[-1][0] == ["bob@example.org"]
    assert lease_state(path, other)[0] == "done"


def test_a_command_that_hangs_is_killed_after_its_timeout(tmp_path):
    path = make_store(tmp_path)
    cfg = config_from_dict({
        "daemon": {"driver": "simulated", "poll_interval": "60s"},
        "notify": {"notifiers": ["command"], "before_end": [], "at_end": True,
                   "command": {"argv": [sys.executable, "-c", "import time; time.sleep(60)"], "timeout": "1s"}},
    })
    lease_id = submit(path, cfg, hours=1)
    run(path, cfg)
    [(outcome, _)] = outcomes(path).values()
    assert outcome == f"failed: {sys.executable} took longer than 1 s: killed"
    assert lease_state(path, lease_id)[0] == "done"
