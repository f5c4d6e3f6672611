"""The store writes many rows in few statements: the server's writer makes every statement while each
request waits for its lock, and each one releases and retakes the GIL. These tests hold the rows to what
they were written as one per statement, and count the statements a submission makes."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from drivers.inventory import HostConfig
from orchestrator.config import Config
from orchestrator.model.lease import Lease, LeaseRequest, LeaseType
from orchestrator.model.reservations import Reservation, ReservationKind, ReservationState
from orchestrator.model.resources import Resources
from orchestrator.model.states import LeaseState
from orchestrator.state.cluster import Cluster
from orchestrator.state.store import Store, StoreError
from tests.support.times import T0


@pytest.fixture
def store(tmp_path: Path):
    with Store.open(tmp_path / "state.sqlite") as s:
        yield s


class Statements:
    """The statements a connection runs, as SQLite's trace sees them."""

    def __init__(self, store: Store):
        self.seen: list[str] = []
        store._conn.set_trace_callback(self.seen.append)

    def starting(self, prefix: str) -> list[str]:
        return [s for s in self.seen if s.startswith(prefix)]


def test_many_events_are_appended_in_order_in_few_statements(store):
    events = [(T0 + timedelta(seconds=i % 7), "state" if i % 3 else "planned", i % 5 or None, {"n": i, "ü": [i]})
              for i in range(600)]
    statements = Statements(store)
    store.append_events(events)
    # 4 values a row, at most 999 a statement: 249 rows each
    assert len(statements.starting("INSERT INTO events")) == 3
    back = store.events()
    assert [(e.time, e.kind, e.lease_id, e.detail) for e in back] == [
        (t, kind, lease_id, {"n": detail["n"], "ü": detail["ü"]}) for t, kind, lease_id, detail in events]
    assert [e.id for e in back] == sorted(e.id for e in back)


def test_a_batch_with_one_bad_event_writes_none_of_it(store):
    store.append_event(T0, "submitted", 1)
    batch = [(T0, "state", 1, {"n": i}) for i in range(300)] + [(T0, "planned", 1, {"thing": object()})]
    with pytest.raises(StoreError, match="'planned': detail is not JSON data"):
        store.append_events(batch)
    with pytest.raises(StoreError, match="kind"):
        store.append_events([(T0, "state", 1, {}), (T0, " ", 1, {})])
    assert [e.kind for e in store.events()] == ["submitted"]


def _lease(lease_id: int, nodes: int, user: str = "ann") -> Lease:
    request = LeaseRequest(LeaseType.BEST_EFFORT, (Resources.of(1, 512),) * nodes, timedelta(hours=1), T0, user=user)
    lease = Lease(lease_id, request)
    lease.history.append((T0, LeaseState.NEW))
    lease.set_state(LeaseState.PENDING, T0)
    lease.set_state(LeaseState.QUEUED, T0)
    return lease


def test_a_lease_saved_as_new_that_is_stored_already_gets_every_check(store):
    stored = _lease(5, 1)
    store.save_lease(stored)
    # the same lease, one state further: its history is appended, not written twice
    stored.set_state(LeaseState.CANCELLED, T0 + timedelta(minutes=1))
    store.save_lease(stored, new=True)
    assert [s for _, s in store.lease(5).history] == [LeaseState.NEW, LeaseState.PENDING, LeaseState.QUEUED,
                                                     LeaseState.CANCELLED]
    # another request under its id is refused as before, and nothing of it is written
    with pytest.raises(StoreError, match="lease 5 is already stored with a different request"):
        store.save_lease(_lease(5, 3, user="bob"), new=True)
    assert store.lease(5).request.user == "ann" and len(store.lease(5).history) == 4


def test_a_submission_makes_as_many_statements_whatever_its_size(tmp_path: Path):
    """A lease of 1 VM and one of 60 on 60 hosts: the same statements, one per table written, and none that
    looks for a stored copy of a lease this process has just made."""
    with Store.open(tmp_path / "state.sqlite") as store:
        for i in range(60):
            store.add_host(HostConfig(name=f"h{i:02}", uri="sim://", domain_type="qemu"), 2, 4096)
        with store.transaction():
            cluster = Cluster(store, Config(), live_only=True)

        def submit(nodes: int) -> list[str]:
            statements = Statements(store)
            with store.transaction():
                cluster.submit(LeaseRequest(LeaseType.BEST_EFFORT, (Resources.of(2, 1024),) * nodes,
                                            timedelta(hours=1), T0, user="ann"), T0)
                cluster.save(T0)
            store._conn.set_trace_callback(None)
            return [re.sub(r"\d+", "#", s.split(" (")[0].split(" VALUES")[0]) for s in statements.seen]

        small, big = submit(1), submit(60)
        assert store.lease(2).reservations[0].nodes == {i: f"h{i:02}" for i in range(60)}
    # (the big lease queues behind the small one: both are planned, one VM reservation each)
    # (one event for the submission, then one for what its save logs: states and plan)
    assert small.count("INSERT INTO events") == big.count("INSERT INTO events") == 2
    for table in ("leases", "lease_states", "reservations"):
        assert small.count(f"INSERT INTO {table}") == big.count(f"INSERT INTO {table}") == 1
    assert big == small
    assert not [s for s in big if s.startswith(("SELECT count(*) FROM lease_states", "SELECT \"name\""))]


def test_a_plan_of_many_parts_is_written_in_few_statements_and_read_back_whole(store):
    lease = _lease(9, 1)
    start = T0 + timedelta(minutes=1)
    for i in range(150):   # a lease suspended and resumed many times: one VM reservation a run
        at = start + timedelta(minutes=2 * i)
        lease.reservations.append(Reservation(9, ReservationKind.VM, at, at + timedelta(minutes=1),
                                              {"h1": Resources.of(1, 512)}, {0: "h1"},
                                              state=ReservationState.DONE, id=1000 + i))
    statements = Statements(store)
    store.save_lease(lease, new=True)
    # 14 values a row: 71 rows a statement
    assert len(statements.starting("INSERT INTO reservations")) == 3
    back = store.lease(9)
    assert [(r.id, r.start, r.end, r.nodes) for r in back.reservations] == \
           [(r.id, r.start, r.end, r.nodes) for r in lease.reservations]
