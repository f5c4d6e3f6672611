"""The server's cluster kept in memory (`SharedCluster`): callers that wait for its lock together are run in
one transaction, each in a savepoint (group commit), and one caller's failure is its own."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from drivers.inventory import HostConfig
from orchestrator.config import Config
from orchestrator.model.errors import InvalidRequest
from orchestrator.model.lease import LeaseRequest, LeaseType
from orchestrator.model.resources import Resources
from orchestrator.state.session import SharedCluster
from orchestrator.state.store import Store
from tests.support.times import T0


@pytest.fixture
def store(tmp_path: Path):
    with Store.open(tmp_path / "state.sqlite", any_thread=True) as store:
        store.add_host(HostConfig(name="h1", uri="sim://", domain_type="qemu"), 8, 16384)
        yield store


def _request(cpus: float) -> LeaseRequest:
    return LeaseRequest(type=LeaseType.BEST_EFFORT, nodes=(Resources.of(cpus, 1024),),
                        duration=timedelta(hours=1), submit_time=T0, user="alice")


def _submit(cpus: float):
    def work(cluster):
        lease = cluster.submit(_request(cpus), T0)
        cluster.save(T0)
        return lease.id
    return work


def _fails_half_way(cluster):
    cluster.submit(_request(1), T0)   # planned in memory, then the caller fails: none of it may stay
    raise InvalidRequest("test", "fails after changing the plan")


def test_waiting_callers_share_one_commit_and_a_failure_is_only_its_own(store):
    session = SharedCluster(store, Config())
    commits = []
    store._conn.set_trace_callback(lambda sql: commits.append(sql) if sql.strip().upper() == "COMMIT" else None)
    works = [_submit(1), _submit(2), _fails_half_way, _submit(3)]
    results: dict[int, object] = {}

    def call(i):
        try:
            results[i] = session.run(works[i])
        except InvalidRequest as exc:
            results[i] = exc

    with session.lock:   # (as a daemon step would hold it)
        threads = [threading.Thread(target=call, args=(i,)) for i in range(len(works))]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while len(session._pending) < len(works) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(session._pending) == len(works)
    for t in threads:
        t.join(10)
    assert len(commits) == 1
    assert isinstance(results[2], InvalidRequest)
    ids = sorted(v for k, v in results.items() if k != 2)
    assert len(ids) == 3
    stored = {lease.id: lease for lease in store.load_leases()}
    assert sorted(stored) == ids   # the failed caller's lease is neither stored nor kept in memory
    with session.open() as cluster:
        assert sorted(cluster.scheduler.leases) == ids
        assert sorted(stored[i].request.nodes[0].cpu for i in ids) == sorted(
            cluster.scheduler.leases[i].request.nodes[0].cpu for i in ids)


def test_a_caller_alone_runs_at_once_and_sees_its_own_answer(store):
    session = SharedCluster(store, Config())
    first = session.run(_submit(1))
    second = session.run(_submit(1))
    assert second == first + 1
    with pytest.raises(InvalidRequest, match="fails after"):
        session.run(_fails_half_way)
    assert [lease.id for lease in store.load_leases()] == [first, second]
