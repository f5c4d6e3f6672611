"""A restart of `leasewise serve` is invisible to its clients: a refused or reset connection is tried again
for up to `--wait` seconds, and a submission carries an idempotency key, so one tried again after its
answer was lost is answered with the lease it made, never a second one."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from orchestrator.model.errors import InvalidRequest
from orchestrator.service.client import Client
from orchestrator.service.models import submission_of
from orchestrator.state.store import Store
from tests.service.conftest import start_server
from tests.support.load import CLI, ROOT, make_site, wait_until_serving


def _serve(store_path: Path, config: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen([*CLI, "serve", "--state", str(store_path), "--config", str(config), "--log-level",
                             "warning"], cwd=ROOT, stdout=log.open("a"), stderr=subprocess.STDOUT)


def _submit(url: str, index: int) -> subprocess.Popen:
    return subprocess.Popen([*CLI, "lease", "submit", "--cpus", "1", "--memory", "1024", "--duration", "30m",
                             "--name", f"restart-{index}", "--server", url, "--wait", "40", "--json"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_ten_submissions_across_a_restart_all_land_once(tmp_path):
    store_path, config, socket = make_site(tmp_path, 4)
    log = tmp_path / "serve.log"
    url = f"unix:{socket}"
    server = _serve(store_path, config, log)
    clients: list[subprocess.Popen] = []
    try:
        wait_until_serving(url, server, log)
        clients += [_submit(url, i) for i in range(5)]
        time.sleep(0.3)
        server.send_signal(signal.SIGTERM)   # (while some are in flight, and the others start after)
        clients += [_submit(url, i) for i in range(5, 10)]
        assert server.wait(60) == 0, log.read_text()
        time.sleep(1.0)   # (down for a while: the clients find no socket, or a refusing one)
        server = _serve(store_path, config, log)
        outcomes = [(c.wait(90), *c.communicate()) for c in clients]
    finally:
        for c in clients:
            if c.poll() is None:
                c.kill()
        server.send_signal(signal.SIGTERM)
        server.wait(60)
    for code, out, err in outcomes:
        assert code == 0, (code, out, err, log.read_text()[-2000:])
    answers = [json.loads(out) for _, out, _ in outcomes]
    with Store.open(store_path) as store:
        leases = store.leases()
    assert len(leases) == 10, [(l.id, l.request.name) for l in leases]
    assert sorted(l.request.name for l in leases) == sorted(f"restart-{i}" for i in range(10))
    assert sorted(a["id"] for a in answers) == sorted(l.id for l in leases)


@pytest.fixture
def running(tmp_path, unix_users):
    served = start_server(tmp_path)
    try:
        yield served
    finally:
        served.stop()


def test_a_submission_sent_again_with_its_key_is_answered_with_its_lease(running):
    wanted = submission_of({"cpus": 1, "memory": 512, "duration": "30m", "name": "once"})
    with running.client() as client:
        first = client.submit(wanted, key="retry-1")
        again = client.submit(wanted, key="retry-1")
        assert again == first
        with pytest.raises(InvalidRequest) as caught:   # (the same key for another request: refused)
            client.submit(submission_of({"cpus": 2, "memory": 512, "duration": "30m"}), key="retry-1")
        assert caught.value.field == "Idempotency-Key" and f"lease {first['id']}" in caught.value.problem
        other = client.submit(wanted)   # (a new key each time: a second lease, as asked)
    assert other["id"] != first["id"]
    with Store.open(running.store_path) as store:
        assert [l.request.name for l in store.leases()] == ["once", "once"]


def test_a_server_that_stays_away_is_a_permanent_error_after_wait(tmp_path):
    with Client(f"unix:{tmp_path}/none.sock", wait=1.0) as client:
        began = time.monotonic()
        with pytest.raises(Exception) as caught:
            client.leases()
    assert getattr(caught.value, "exit_code", None) == 1 and "no server answers there" in str(caught.value)
    assert 1.0 <= time.monotonic() - began < 4
