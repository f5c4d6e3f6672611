"""The SQLite store: file safety, schema migrations, exact round trips, transactions, concurrency."""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import stat
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from drivers.inventory import HostConfig
from orchestrator.config import Config, SchedulingConfig, SimulationConfig
from orchestrator.model.lease import Lease, LeaseRequest, LeaseType, VMImage
from orchestrator.model.reservations import (
    Reservation,
    ReservationKind,
    ReservationState,
)
from orchestrator.model.resources import Resources
from orchestrator.model.states import LeaseState
from orchestrator.model.timeutil import UTC
from orchestrator.runtime.simulator import Simulator, check_invariants
from orchestrator.state.store import (
    SCHEMA_VERSION,
    HostRecord,
    Store,
    StoreError,
    apply_migrations,
    default_store_path,
    reservation_detail,
)
from orchestrator.workloads import Workload
from tests.support.scenario import T0, ar, be, site

S = LeaseState
K = ReservationKind
RS = ReservationState


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "state.sqlite"


@pytest.fixture
def store(path: Path):
    with Store.open(path) as s:
        yield s


def mode_of(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


# -- comparing leases field by field (Lease and Reservation compare by identity) ------------------------------------
def rr_facts(rr: Reservation) -> tuple:
    for t in (rr.start, rr.end, rr.premature_end):
        assert t is None or t.tzinfo is UTC
    return (type(rr.kind), rr.kind, rr.id, rr.lease_id, rr.start, rr.end, type(rr.state), rr.state,
            {h: (type(r), r) for h, r in rr.resources.items()}, rr.nodes, rr.transfers, rr.premature_end)


def plan_facts(lease: Lease) -> list:
    facts = []
    for vm in lease.reservations:
        assert vm.kind is K.VM and vm.vm is None
        assert all(p.vm is vm for p in vm.pre + vm.post)
        facts.append((rr_facts(vm), [rr_facts(p) for p in vm.pre], [rr_facts(p) for p in vm.post]))
    return facts


def lease_facts(lease: Lease) -> tuple:
    req = lease.request
    assert all(type(n) is Resources for n in req.nodes)
    for t in (req.submit_time, req.start, lease.start_time, lease.end_time, *(t for t, _ in lease.history)):
        assert t is None or t.tzinfo is UTC
    return (lease.id, req, type(req.type), type(lease.state), lease.state, lease.accumulated,
            [(t, type(s), s) for t, s in lease.history], lease.start_time, lease.end_time, lease.reason,
            lease.suspensions, lease.requeues, lease.migrations, plan_facts(lease))


def shape(lease: Lease) -> tuple:
    """(state, kinds of each VM reservation's parts): what a scenario step covered."""
    return lease.state, tuple(tuple(p.kind for p in vm.all_parts()) for vm in lease.reservations)


# -- paths and file safety ----------------------------------------------------------------------------------------
def test_default_path_honours_xdg_data_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_store_path() == tmp_path / "xdg" / "leasewise" / "state.sqlite"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store_path() == tmp_path / "home" / ".local" / "share" / "leasewise" / "state.sqlite"
    # the spec says a relative XDG_DATA_HOME is ignored
    assert default_store_path({"XDG_DATA_HOME": "rel/dir", "HOME": "/h"}) == Path("/h/.local/share/leasewise/state.sqlite")


def test_open_without_a_path_uses_the_xdg_default(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    with Store.open() as s:
        assert s.path == tmp_path / "xdg" / "leasewise" / "state.sqlite"
    assert s.path.is_file() and mode_of(s.path) == 0o600
    assert mode_of(s.path.parent) == 0o700


def test_new_file_is_0600_in_wal_mode_with_foreign_keys(path):
    old = os.umask(0o022)   # what a default umask would give a file SQLite creates itself: 0644
    try:
        with Store.open(path) as s:
            s.add_host(HostConfig("h1", "test:///default"), 2, 2048)
            assert mode_of(path) == 0o600
            wal = path.with_name(path.name + "-wal")
            assert wal.exists() and mode_of(wal) == 0o600
            assert s._conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
            assert s._conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
    finally:
        os.umask(old)
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_existing_file_with_a_loose_mode_is_tightened(path):
    Store.open(path).close()
    os.chmod(path, 0o666)
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            os.chmod(side, 0o644)
    with Store.open(path):
        assert mode_of(path) == 0o600
        for suffix in ("-wal", "-shm"):
            side = path.with_name(path.name + suffix)
            assert not side.exists() or mode_of(side) == 0o600


def test_an_empty_file_created_by_someone_else_is_tightened_and_used(tmp_path):
    p = tmp_path / "state.sqlite"
    p.touch()
    os.chmod(p, 0o644)
    with Store.open(p) as s:
        assert mode_of(p) == 0o600
        assert s.schema_version() == SCHEMA_VERSION


def test_a_file_that_is_not_a_database_is_refused_in_one_line(tmp_path):
    p = tmp_path / "junk.sqlite"
    p.write_bytes(b"this is not sqlite, just bytes " * 200)
    with pytest.raises(StoreError) as exc:
        Store.open(p)
    assert str(p) in str(exc.value) and "\n" not in str(exc.value)


def test_another_programs_database_is_refused_and_left_alone(tmp_path):
    p = tmp_path / "other.sqlite"
    with sqlite3.connect(p) as raw:
        raw.execute("CREATE TABLE notes (x)")
    with pytest.raises(StoreError, match="not a leasewise state database"):
        Store.open(p)
    with sqlite3.connect(p) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "delete"   # not switched to WAL
        assert raw.execute("PRAGMA user_version").fetchone()[0] == 0


# -- migrations ---------------------------------------------------------------------------------------------------
def test_a_version_1_database_is_migrated_with_its_data_kept(path):
    path.parent.mkdir(parents=True)
    raw = sqlite3.connect(path, isolation_level=None)
    apply_migrations(raw, upto=1)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 1
    columns = {r[1] for r in raw.execute("PRAGMA table_info(leases)")}
    assert "real_duration_s" not in columns   # really the old schema
    raw.execute("INSERT INTO hosts (name, uri, domain_type, state_dir, shared_storage, vcpus, memory_mib, "
                "available, added_at) VALUES ('h1', 'qemu+tcp://10.0.0.1/system', 'kvm', '/var/save', '[\"/nfs\"]', "
                "4, 8192, 0, '2026-01-01T12:00:00.000000Z')")
    raw.execute("INSERT INTO leases (id, workload_id, name, user, type, state, preemptible, nodes, duration_s, "
                "submit_time, accumulated_s) VALUES (3, 'w3', 'n', 'ann', 'best-effort', 'queued', 1, "
                "'[{\"cpu\":100,\"memory\":1024,\"disk\":0,\"net_in\":0,\"net_out\":0}]', 3600, "
                "'2026-01-01T13:00:00.000000Z', 0)")
    raw.executemany("INSERT INTO lease_states VALUES (3, ?, ?, ?)",
                    [(0, "2026-01-01T13:00:00.000000Z", "new"), (1, "2026-01-01T13:00:00.000000Z", "pending"),
                     (2, "2026-01-01T13:00:00.000000Z", "queued")])
    raw.execute("INSERT INTO events (time, lease_id, kind, detail) VALUES "
                "('2026-01-01T13:00:00.000000Z', 3, 'planned', '{\"n\":1}')")
    raw.close()

    with Store.open(path) as s:
        assert s.schema_version() == SCHEMA_VERSION > 1
        [host] = s.hosts()
        assert host.config == HostConfig("h1", "qemu+tcp://10.0.0.1/system", state_dir="/var/save",
                                         shared_storage=("/nfs",))
        assert (host.vcpus, host.memory_mib, host.available) == (4, 8192, False)
        assert host.unavailable_from is None   # (version 3: unavailable, since no known time)
        [lease] = s.load_leases()
        assert lease.id == 3 and lease.state is S.QUEUED and lease.request.user == "ann"
        assert lease.request.real_duration is None
        assert [st for _, st in lease.history] == [S.NEW, S.PENDING, S.QUEUED]
        assert [(e.kind, e.lease_id, e.detail) for e in s.events()] == [("planned", 3, {"n": 1})]
        assert s.workload_ids() == {3: "w3"}
        assert s.next_lease_id() == 4
        # the new columns work
        s.save_lease(_handmade_lease(9))
        assert s.lease(9).request.real_duration == timedelta(minutes=50)


def test_a_database_newer_than_the_code_is_refused(path):
    Store.open(path).close()
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 3}")
    with pytest.raises(StoreError) as exc:
        Store.open(path)
    message = str(exc.value)
    assert "\n" not in message and str(path) in message
    assert f"version {SCHEMA_VERSION + 3}" in message and f"({SCHEMA_VERSION})" in message


# -- hosts ----------------------------------------------------------------------------------------------------------
def test_hosts_round_trip(path):
    full = HostConfig(name="node1", uri="qemu+tcp://10.77.0.11/system", domain_type="qemu", ssh="root@10.77.0.11:2222",
                      ssh_key="/home/me/.ssh/lab", known_hosts="/home/me/.ssh/known_hosts",
                      migration_uri="tcp://10.78.0.11", state_dir="/srv/save", shared_storage=("/nfs/images", "/scratch"))
    bare = HostConfig(name="node2", uri="test:///default")
    added = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)
    with Store.open(path) as s:
        first = s.add_host(full, 8, 16384, at=added)
        s.add_host(bare, 2, 2048, available=False, at=added + timedelta(seconds=1))
        assert first == HostRecord(full, 8, 16384, True, added)
    with Store.open(path) as s:
        assert s.hosts() == [HostRecord(full, 8, 16384, True, added),
                             HostRecord(bare, 2, 2048, False, added + timedelta(seconds=1))]
        assert s.host("node1").capacity == Resources(800, 16384)
        s.update_host_capacity("node2", 4, 4096)
        s.set_host_available("node2", True)
        s.set_host_available("node1", False)
        assert [(h.name, h.vcpus, h.memory_mib, h.available) for h in s.hosts()] == [
            ("node1", 8, 16384, False), ("node2", 4, 4096, True)]
        s.remove_host("node1")
        assert [h.name for h in s.hosts()] == ["node2"]


def test_unknown_and_duplicate_hosts_are_one_line_errors_naming_the_host(store):
    store.add_host(HostConfig("h1", "test:///default"), 1, 1024)
    with pytest.raises(StoreError, match="^host 'h1' already exists$"):
        store.add_host(HostConfig("h1", "qemu:///system"), 2, 2048)
    assert store.host("h1").config.uri == "test:///default"   # the first one is untouched
    for call in (lambda: store.host("ghost"), lambda: store.remove_host("ghost"),
                 lambda: store.set_host_available("ghost", False),
                 lambda: store.update_host_capacity("ghost", 1, 1)):
        with pytest.raises(StoreError, match="^no host named 'ghost'$"):
            call()
    with pytest.raises(StoreError, match="'h2'.*vcpus"):
        store.add_host(HostConfig("h2", "test:///default"), 0, 1024)
    assert [h.name for h in store.hosts()] == ["h1"]


# -- leases -------------------------------------------------------------------------------------------------------
def _run(requests, on_step, **scheduling):
    defaults = dict(suspension="all", suspend_rate=32, resume_rate=32, suspendresume_exclusion="local")
    defaults.update(scheduling)
    config = Config(scheduling=SchedulingConfig(**defaults), simulation=SimulationConfig(start=T0))
    workload = Workload(requests=[(f"w{i}", r) for i, r in enumerate(requests, start=1)], site=site(2))

    def step(sched, now):
        check_invariants(sched, now)
        on_step(sched, now)

    return Simulator(workload, config, on_step=step).run()


SCENARIOS = {
    # a BE lease suspended for an AR, its memory image migrated to the other host and resumed there,
    # while a second BE lease waits in the queue (backfilling off)
    "suspend-migrate-resume": (
        [be("13:00", 120), ar("13:05", "13:30", 30, nodes=2), ar("13:10", "14:00", 60), be("13:10", 30, nodes=2)],
        dict(backfilling="off"),
    ),
    # no suspension: the BE lease is killed and requeued (its plan popped), ends early (premature end)
    "requeue-premature": (
        [be("13:00", 60, real_minutes=45), ar("13:15", "13:30", 30, nodes=2)],
        dict(suspension="none", shutdown_time=10, enactment_overhead=5),
    ),
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_leases_round_trip_at_every_step_of_a_simulation(path, name):
    """Every lease is saved after every step (the same rows saved again and again, history appended,
    plans replaced) and read back by a second Store: equal in everything."""
    requests, scheduling = SCENARIOS[name]
    writer, reader = Store.open(path), Store.open(path)
    seen, with_premature_end = set(), set()

    def step(sched, now):
        with writer.transaction():
            for lease in sched.leases.values():
                writer.save_lease(lease, workload_id=f"w{lease.id}")
        loaded = reader.load_leases()
        live = [sched.leases[i] for i in sorted(sched.leases)]
        assert [lease_facts(l) for l in loaded] == [lease_facts(l) for l in live]
        seen.update(shape(l) for l in live)
        with_premature_end.update(l.id for l in loaded for vm in l.reservations if vm.premature_end is not None)

    result = _run(requests, step, **scheduling)
    assert reader.workload_ids() == {i: f"w{i}" for i in result.scheduler.leases}
    rows = reader._conn.execute("SELECT count(*) FROM lease_states").fetchone()[0]
    assert rows == sum(len(l.history) for l in result.scheduler.leases.values())
    first = reader.lease(1)
    assert first.state is S.DONE and first.end_time == first.history[-1][0]
    if name == "suspend-migrate-resume":
        assert (S.QUEUED, ()) in seen
        assert (S.SCHEDULED, ((K.VM, K.SHUTDOWN),)) in seen                       # the ARs
        assert (S.SUSPENDED_QUEUED, ((K.VM, K.SUSPEND),)) in seen
        assert (S.MIGRATING, ((K.VM, K.SUSPEND), (K.MIGRATE, K.RESUME, K.VM, K.SHUTDOWN))) in seen
        assert (S.DONE, ((K.VM, K.SUSPEND), (K.MIGRATE, K.RESUME, K.VM, K.SHUTDOWN))) in seen
        assert (first.suspensions, first.migrations, first.accumulated) == (1, 1, timedelta(minutes=120))
        assert [s for _, s in first.history] == [
            S.NEW, S.PENDING, S.QUEUED, S.SCHEDULED, S.ACTIVE, S.SUSPENDING, S.SUSPENDED_PENDING,
            S.SUSPENDED_QUEUED, S.SUSPENDED_SCHEDULED, S.MIGRATING, S.SUSPENDED_SCHEDULED, S.RESUMING,
            S.RESUMED_READY, S.ACTIVE, S.DONE]
        assert first.reservations[1].pre[0].transfers == {0: ("host1", "host2")}
    else:
        # killed and requeued: the cut VM reservation stays in the plan without its shutdown
        assert (S.SCHEDULED, ((K.VM,), (K.VM, K.SHUTDOWN))) in seen
        assert 1 in with_premature_end
        assert (first.requeues, first.accumulated) == (1, timedelta(minutes=45))
        assert first.request.real_duration == timedelta(minutes=45)
        assert [s for _, s in first.history] == [S.NEW, S.PENDING, S.QUEUED, S.SCHEDULED, S.ACTIVE, S.QUEUED,
                                                 S.SCHEDULED, S.ACTIVE, S.DONE]
    writer.close()
    reader.close()


def _handmade_lease(lease_id: int = 7) -> Lease:
    t = datetime(2026, 3, 1, 9, 0, 0, 250000, tzinfo=UTC)
    request = LeaseRequest(
        type=LeaseType.BEST_EFFORT,
        nodes=(Resources(150, 1536.5, 4096, 12.5, 12.5), Resources(50, 512)),
        duration=timedelta(hours=1, microseconds=5),
        submit_time=t,
        preemptible=False,
        real_duration=timedelta(minutes=50),
        image=VMImage(disk="/nfs/images/alpine.qcow2", size_mib=512.25, kernel="/boot/vmlinuz",
                      initrd="/boot/initrd", cmdline="console=ttyS0 quiet"),
        user="ann", name="nightly build", dirty_rate_mib_s=33.3,
    )
    lease = Lease(id=lease_id, request=request)
    lease.history.append((t, S.NEW))
    for state, minutes in ((S.PENDING, 0), (S.QUEUED, 0), (S.SCHEDULED, 1), (S.ACTIVE, 2), (S.SUSPENDING, 20),
                           (S.SUSPENDED_PENDING, 21), (S.SUSPENDED_QUEUED, 21), (S.SUSPENDED_SCHEDULED, 22)):
        lease.set_state(state, t + timedelta(minutes=minutes, microseconds=7))
    lease.start_time = t + timedelta(minutes=2)
    lease.accumulated = timedelta(minutes=17, seconds=59, microseconds=999999)
    lease.suspensions, lease.migrations, lease.requeues = 1, 2, 3
    lease.reason = "préemption — ünïcode"
    first = Reservation(lease_id, K.VM, t + timedelta(minutes=2), t + timedelta(minutes=20),
                        {"h1": Resources(150, 1536.5, 4096, 0, 0), "h2": Resources(50, 512)}, {0: "h1", 1: "h2"},
                        state=RS.DONE, id=10)
    first.post = [Reservation(lease_id, K.SUSPEND, first.end, t + timedelta(minutes=21), {"h1": Resources(150, 1536.5)},
                              {0: "h1"}, state=RS.DONE, id=11, vm=first),
                  Reservation(lease_id, K.SUSPEND, t + timedelta(minutes=21), t + timedelta(minutes=21, seconds=3),
                              {"h2": Resources(50, 512)}, {1: "h2"}, state=RS.DONE, id=12, vm=first)]
    second = Reservation(lease_id, K.VM, t + timedelta(minutes=40), t + timedelta(minutes=90),
                         {"h3": Resources(200, 2048.5, 4096, 12.5, 12.5)}, {0: "h3", 1: "h3"}, id=20,
                         premature_end=t + timedelta(minutes=75))
    migrate = Reservation(lease_id, K.MIGRATE, t + timedelta(minutes=22), t + timedelta(minutes=24),
                          {"h1": Resources(0, 0, 0, 0, 12.5), "h2": Resources(0, 0, 0, 0, 12.5),
                           "h3": Resources(0, 0, 0, 25, 0)}, transfers={0: ("h1", "h3"), 1: ("h2", "h3")},
                          state=RS.ACTIVE, id=21, vm=second)
    live = Reservation(lease_id, K.LIVE_MIGRATE, t + timedelta(minutes=24), t + timedelta(minutes=24),
                       {}, transfers={1: ("h3", "h3")}, id=19, vm=second)   # empty resources, id below the VM's
    resume = Reservation(lease_id, K.RESUME, t + timedelta(minutes=39), second.start, {"h3": Resources(200, 2048.5)},
                         {0: "h3", 1: "h3"}, id=22, vm=second)
    second.pre = [migrate, live, resume]
    second.post = [Reservation(lease_id, K.SHUTDOWN, second.end, second.end, dict(second.resources),
                               dict(second.nodes), id=23, vm=second)]
    lease.reservations = [first, second]
    return lease


def test_a_lease_with_every_field_set_round_trips(path):
    lease = _handmade_lease()
    with Store.open(path) as s:
        s.save_lease(lease, workload_id="lwf-42")
    with Store.open(path) as s:
        [back] = s.load_leases()
        assert lease_facts(back) == lease_facts(lease)
        assert back.request.image == lease.request.image and back.request.dirty_rate_mib_s == 33.3
        assert [[p.id for p in vm.all_parts()] for vm in back.reservations] == [[10, 11, 12], [21, 19, 22, 20, 23]]
        assert back.reservations[1].transfers == {} and back.reservations[1].pre[0].transfers[0] == ("h1", "h3")
        assert s.workload_ids() == {7: "lwf-42"}
        # the reservation rows: one per part, the overheads pointing at their VM reservation
        rows = s._conn.execute('SELECT id, kind, vm_id, position FROM reservations ORDER BY position').fetchall()
        assert rows == [(10, "vm", None, 0), (11, "suspend", 10, 1), (12, "suspend", 10, 2), (21, "migrate", 20, 3),
                        (19, "live-migrate", 20, 4), (22, "resume", 20, 5), (20, "vm", None, 6),
                        (23, "shutdown", 20, 7)]
        # saving again without a workload id keeps the stored one
        s.save_lease(back)
        assert s.workload_ids() == {7: "lwf-42"}
        assert lease_facts(s.lease(7)) == lease_facts(lease)


def test_saving_appends_only_new_history_and_replaces_the_plan(store):
    lease = _handmade_lease()
    store.save_lease(lease)
    first_rows = store._conn.execute("SELECT * FROM lease_states WHERE lease_id = 7 ORDER BY seq").fetchall()
    assert len(first_rows) == len(lease.history) == 9

    # the plan changes: the future VM reservation is dropped, the lease requeued
    lease.reservations.pop()
    lease.set_state(S.SUSPENDED_QUEUED, lease.history[-1][0] + timedelta(seconds=1))
    store.save_lease(lease)
    rows = store._conn.execute("SELECT * FROM lease_states WHERE lease_id = 7 ORDER BY seq").fetchall()
    assert rows[:9] == first_rows and len(rows) == 10 and rows[9][3] == "suspended-queued"
    assert store._conn.execute("SELECT id FROM reservations ORDER BY id").fetchall() == [(10,), (11,), (12,)]
    assert lease_facts(store.lease(7)) == lease_facts(lease)

    # a stale copy (shorter history) or a diverging one is refused, and writes nothing
    stale = store.lease(7)
    stale.history = stale.history[:5]
    with pytest.raises(StoreError, match="lease 7: the store has 10 history entries, this copy only 5"):
        store.save_lease(stale)
    forked = store.lease(7)
    forked.history[-1] = (forked.history[-1][0], S.SUSPENDED_SCHEDULED)
    forked.reason = "should not be written"
    with pytest.raises(StoreError, match="history entry 9 differs"):
        store.save_lease(forked)
    assert store.lease(7).reason == lease.reason

    # the history table itself refuses updates
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        store._conn.execute("UPDATE lease_states SET state = 'done' WHERE lease_id = 7")


def test_reservation_ids_must_be_assigned_and_unique_across_leases(store):
    store.save_lease(_handmade_lease(7))
    other = _handmade_lease(8)
    with pytest.raises(StoreError, match="reservation id 1[0-9] is already used by lease 7"):
        store.save_lease(other)
    assert [l.id for l in store.load_leases()] == [7]   # nothing of lease 8 was written
    for part in (p for vm in other.reservations for p in vm.all_parts()):
        part.id += 100
    other.reservations[0].post[0].id = 0
    with pytest.raises(StoreError, match="lease 8: a suspend reservation has no id"):
        store.save_lease(other)
    other.reservations[0].post[0].id = 150
    store.save_lease(other)
    assert store.max_reservation_id() == 150
    assert [l.id for l in store.load_leases()] == [7, 8]


def test_the_same_id_with_another_request_is_refused(store):
    store.save_lease(_handmade_lease(7))
    impostor = Lease(7, LeaseRequest(LeaseType.IMMEDIATE, (Resources.of(1, 1024),), timedelta(hours=1), T0))
    with pytest.raises(StoreError, match="lease 7 is already stored with a different request .*type"):
        store.save_lease(impostor)
    assert store.lease(7).request.user == "ann"


def test_listing_leases_by_state_and_user(store):
    a = _handmade_lease(1)
    b = Lease(2, LeaseRequest(LeaseType.ADVANCE_RESERVATION, (Resources.of(1, 512),), timedelta(minutes=30), T0,
                              start=T0 + timedelta(hours=1), user="bob"))
    b.history.append((T0, S.NEW))
    b.set_state(S.PENDING, T0)
    c = Lease(3, LeaseRequest(LeaseType.BEST_EFFORT, (Resources.of(1, 512),), timedelta(minutes=30), T0, user="ann"))
    c.history.append((T0, S.NEW))
    c.set_state(S.CANCELLED, T0 + timedelta(seconds=1))
    for lease in (a, b, c):
        store.save_lease(lease)
    assert [l.id for l in store.leases()] == [1, 2, 3]
    assert [l.id for l in store.leases(user="ann")] == [1, 3]
    assert [l.id for l in store.leases(state=S.PENDING)] == [2]
    assert [l.id for l in store.leases(state="cancelled", user="ann")] == [3]
    assert [l.id for l in store.leases(state=[S.PENDING, S.SUSPENDED_SCHEDULED])] == [1, 2]
    assert store.lease(2).request.start == T0 + timedelta(hours=1)
    assert store.lease(3).end_time == T0 + timedelta(seconds=1)
    with pytest.raises(StoreError, match="^no lease with id 99$"):
        store.lease(99)


def test_next_lease_id_counts_up_and_never_reuses_a_stored_id(store):
    assert [store.next_lease_id() for _ in range(3)] == [1, 2, 3]
    store.save_lease(_handmade_lease(50))
    assert store.next_lease_id() == 51


def test_meta_values_round_trip(store):
    assert store.get_meta("clock") is None and store.get_meta("clock", 0) == 0
    store.set_meta("clock", "2026-01-01T13:00:00Z")
    store.set_meta("clock", "2026-01-01T13:05:00Z")
    store.set_meta("limits", {"a": [1, 2.5, None]})
    assert store.get_meta("clock") == "2026-01-01T13:05:00Z"
    assert store.get_meta("limits") == {"a": [1, 2.5, None]}


# -- transactions and concurrency ---------------------------------------------------------------------------------
def test_an_exception_inside_a_transaction_writes_nothing(path):
    with Store.open(path) as s, Store.open(path) as other:
        with pytest.raises(RuntimeError, match="crash"):
            with s.transaction():
                s.add_host(HostConfig("h1", "test:///default"), 1, 1024)
                assert s.next_lease_id() == 1
                s.save_lease(_handmade_lease(1))
                s.append_event(T0, "planned", 1, what="everything")
                s.set_meta("clock", "x")
                assert [h.name for h in s.hosts()] == ["h1"]   # visible inside...
                assert other.hosts() == [] and other.load_leases() == []   # ...not outside
                raise RuntimeError("crash")
        for store in (s, other):
            assert store.hosts() == [] and store.load_leases() == [] and store.events() == []
            assert store.get_meta("clock") is None
        assert s.next_lease_id() == 1


def test_a_failing_nested_transaction_rolls_back_only_its_own_writes(store):
    with store.transaction():
        store.add_host(HostConfig("kept", "test:///default"), 1, 1024)
        with pytest.raises(StoreError):
            with store.transaction():
                store.add_host(HostConfig("dropped", "test:///default"), 1, 1024)
                store.add_host(HostConfig("kept", "test:///default"), 1, 1024)   # duplicate: fails
    assert [h.name for h in store.hosts()] == ["kept"]


def test_data_version_changes_when_another_process_commits(path):
    with Store.open(path) as daemon, Store.open(path) as cli:
        seen = daemon.data_version()
        assert daemon.data_version() == seen          # nothing happened
        daemon.set_meta("clock", "t1")
        assert daemon.data_version() == seen          # its own writes do not count
        cli.add_host(HostConfig("h1", "test:///default"), 1, 1024)
        assert daemon.data_version() != seen
        assert [h.name for h in daemon.hosts()] == ["h1"]


def test_a_writer_waits_for_another_writer_instead_of_failing(path):
    holder = Store.open(path)
    opened, locked = threading.Event(), threading.Event()
    outcome = {}

    def write(timeout):
        try:
            with Store.open(path, busy_timeout=timeout) as s:
                opened.set()
                locked.wait(5)
                started = time.monotonic()
                s.add_host(HostConfig(f"h{timeout}", "test:///default"), 1, 1024)
                outcome[timeout] = time.monotonic() - started
        except Exception as exc:   # noqa: BLE001 - reported to the test thread
            outcome[timeout] = exc

    for timeout, hold in ((5.0, 0.6), (0.2, 0.8)):
        opened.clear()
        locked.clear()
        thread = threading.Thread(target=write, args=(timeout,))
        thread.start()
        assert opened.wait(5)
        with holder.transaction():
            holder.set_meta("holding", True)
            locked.set()
            time.sleep(hold)
        thread.join(10)
    waited = outcome[5.0]
    assert isinstance(waited, float) and waited >= 0.4      # it waited for the lock, then wrote
    refused = outcome[0.2]
    assert isinstance(refused, StoreError) and "busy" in str(refused) and "\n" not in str(refused)
    assert [h.name for h in holder.hosts()] == ["h5.0"]
    holder.close()


def _worker(path: str, barrier, results, worker: int) -> None:
    """One process: 200 times allocate a lease id, save a lease with it and log an event."""
    try:
        with Store.open(path) as s:
            barrier.wait(30)
            ids = []
            for i in range(200):
                lease_id = s.next_lease_id()
                ids.append(lease_id)
                request = LeaseRequest(LeaseType.BEST_EFFORT, (Resources.of(1, 256),), timedelta(minutes=1), T0,
                                       user=f"worker{worker}")
                lease = Lease(lease_id, request)
                lease.history.append((T0, S.NEW))
                with s.transaction():
                    s.save_lease(lease, workload_id=f"{worker}-{i}")
                    s.append_event(T0, "submitted", lease_id, worker=worker, i=i)
                # a process does something between writes; without this pause SQLite's busy handler (sleep
                # and retry, no queue) may let one process run all 200 before the other gets the lock
                time.sleep(0.002)
            results.put((worker, ids, None))
    except BaseException as exc:   # noqa: BLE001 - reported to the parent
        results.put((worker, [], f"{type(exc).__name__}: {exc}"))


def test_two_processes_allocate_distinct_ids_and_write_concurrently(path):
    Store.open(path).close()
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(str(path), barrier, results, w)) for w in (1, 2)]
    for p in procs:
        p.start()
    outcome = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    assert [error for _, _, error in outcome] == [None, None]
    ids = [i for _, worker_ids, _ in outcome for i in worker_ids]
    assert len(ids) == 400 and len(set(ids)) == 400
    assert sorted(ids) == list(range(1, 401))
    with Store.open(path) as s:
        leases = s.load_leases()
        assert [l.id for l in leases] == list(range(1, 401))
        assert {l.request.user for l in leases} == {"worker1", "worker2"}
        events = s.events()
        assert len(events) == 400 and [e.id for e in events] == sorted(e.id for e in events)
        for worker in (1, 2):   # each process's events appear in the order it appended them
            mine = [e.detail["i"] for e in events if e.detail["worker"] == worker]
            assert mine == list(range(200))
    # interleaved: neither process did all its work before the other started (they really competed)
    by_worker = {w: worker_ids for w, worker_ids, _ in outcome}
    assert min(by_worker[1]) < max(by_worker[2]) and min(by_worker[2]) < max(by_worker[1])


# -- events ---------------------------------------------------------------------------------------------------------
def test_events_are_appended_in_order_with_their_detail(store):
    t = datetime(2026, 1, 1, 13, 0, 0, 500000, tzinfo=UTC)
    rr = _handmade_lease().reservations[1]
    detail = {"nested": {"list": [1, 2.5, None, True, "ü"], "empty": {}}, "big": 2**53 + 1}
    ids = [
        store.append_event(t, "planned", 7, reservation=reservation_detail(rr)),
        store.append_event(t + timedelta(seconds=1), "enacted", 7, op="start_vms", at=t, took=timedelta(seconds=2.5)),
        store.append_event(t + timedelta(seconds=1), "driver-report", None, **detail),
        store.append_event(t, "failed", 8, reason="libvirt: connection refused"),   # an earlier time, appended later
        store.append_event(t + timedelta(minutes=5), "reconciled", 7),
    ]
    assert ids == sorted(ids) and len(set(ids)) == 5
    events = store.events()
    assert [e.kind for e in events] == ["planned", "enacted", "driver-report", "failed", "reconciled"]
    assert [e.time for e in events] == [t, t + timedelta(seconds=1), t + timedelta(seconds=1), t,
                                        t + timedelta(minutes=5)]
    assert all(e.time.tzinfo is UTC for e in events)
    assert events[0].detail["reservation"] == json.loads(json.dumps(reservation_detail(rr)))
    assert events[0].detail["reservation"]["nodes"] == {"0": "h3", "1": "h3"}
    assert events[1].detail == {"op": "start_vms", "at": "2026-01-01T13:00:00.500000Z", "took": 2.5}
    assert events[2].detail == detail and events[2].lease_id is None
    assert events[4].detail == {}
    assert [e.kind for e in store.events(lease_id=7)] == ["planned", "enacted", "reconciled"]
    # `since` compares times (fractional seconds included), `after_id` follows the log
    assert [e.kind for e in store.events(since=t + timedelta(microseconds=1))] == ["enacted", "driver-report",
                                                                                 "reconciled"]
    assert [e.kind for e in store.events(lease_id=7, after_id=ids[0])] == ["enacted", "reconciled"]
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        store._conn.execute("UPDATE events SET kind = 'x'")
    with pytest.raises(StoreError, match="'planned': detail is not JSON data"):
        store.append_event(t, "planned", 7, thing=object())
    with pytest.raises(StoreError, match="kind"):
        store.append_event(t, "  ")
    assert len(store.events()) == 5


def test_lease_records_are_what_the_codec_makes_of_the_leases(tmp_path):
    """The server lists leases straight from their rows: the same JSON the codec makes of each lease."""
    import json

    from orchestrator.state.codec import lease_from_json, lease_to_json
    from tests.runtime.test_daemon import LeaseType, config, driver_for, make_store, request, run, submit

    path, cfg = make_store(tmp_path, n=2), config()
    for minutes in (10, 20, 30):
        submit(path, cfg, request(LeaseType.BEST_EFFORT, minutes, nodes=2))
    run(path, cfg, driver_for(path, None), until=T0 + timedelta(minutes=15))
    with Store.open(path) as store:
        leases = store.leases()
        records = store.lease_records()
        live = store.lease_records(["active", "scheduled", "queued"])
    assert json.loads(json.dumps(records)) == json.loads(json.dumps([lease_to_json(l) for l in leases]))
    assert [lease_from_json(r).state for r in records] == [l.state for l in leases]
    # read back through the API's model, each is the very lease the store holds: its row, history and plan
    from orchestrator.service.models import LeaseRecord
    from orchestrator.state.store.rows import history_rows, lease_row, plan_rows

    for record, lease in zip(records, leases):
        back = lease_from_json(LeaseRecord.model_validate(record).model_dump(mode="json", exclude_unset=True))
        assert (lease_row(back), history_rows(back), plan_rows(back)) == \
            (lease_row(lease), history_rows(lease), plan_rows(lease))
    assert {r["id"] for r in live} == {l.id for l in leases if l.state.value in ("active", "scheduled", "queued")}


def test_lease_records_json_decodes_to_lease_records(tmp_path):
    """The server's list is encoded by SQLite: decoded, the very records `lease_records` reads, in order, for
    every filter (reals that 15 digits would round, dirty rates, several parts and states per lease)."""
    from tests.runtime.test_daemon import LeaseType, config, driver_for, make_store, request, run, submit

    path, cfg = make_store(tmp_path, n=2), config()
    for minutes in (10, 20, 30, 40):
        submit(path, cfg, request(LeaseType.BEST_EFFORT, minutes, nodes=2))
    run(path, cfg, driver_for(path, None), until=T0 + timedelta(minutes=15))
    with Store.open(path) as store:
        assert store.lease_records_json(["failed"]) == "[]"
        ids = [r["id"] for r in store.lease_records()]
        store.record_dirty_rate(ids[0], 1, T0, 1 / 3)
        store.record_dirty_rate(ids[0], 0, T0, 123456.78901234567)
        with store.transaction():
            store._conn.execute("UPDATE leases SET accumulated_s = ?, dirty_rate = ? WHERE id = ?",
                                (2 / 3, 0.1 + 0.2, ids[1]))
        filters = [(None, None), (["active", "scheduled"], None), (["queued"], None), (None, "nobody"),
                   (["done", "active", "scheduled", "queued"], store.lease_records()[0]["user"])]
        for states, user in filters:
            assert json.loads(store.lease_records_json(states, user)) == store.lease_records(states, user)
        records = json.loads(store.lease_records_json())
    assert [r["id"] for r in records] == ids
    assert records[0]["dirty_rates"] == {"1": 1 / 3, "0": 123456.78901234567}
    assert any(len(r["history"]) > 2 for r in records) and any(len(r["plan"]) > 1 for r in records)
    # named fields, JSON as JSON (no JSON text inside strings), flags as booleans
    first = records[0]
    assert isinstance(first["nodes"], list) and isinstance(first["preemptible"], bool)
    assert isinstance(first["plan"][0]["resources"], dict) and isinstance(first["plan"][0]["continues"], bool)
    assert set(first["history"][0]) == {"time", "state"}


def test_local_storage_the_hosts_holding_a_copied_image_go_with_the_image_or_the_host(store):
    from orchestrator.model.images import CatalogImage  # noqa: PLC0415

    for name in ("h1", "h2"):
        store.add_host(HostConfig(name, "test:///default"), 2, 2048)
    store.add_image(CatalogImage("shared", "/nfs/a.qcow2", size_bytes=1))
    copied = store.add_image(CatalogImage("deb", "/img/deb.qcow2", size_bytes=1,
                                          checksums=(("/img/deb.qcow2", "ab" * 32),)), {"h1": "copied", "h2": "copied"})
    assert store.image("deb").checksums == copied.checksums and store.image("deb").copied
    assert store.image_holders() == {"deb": frozenset({"h1", "h2"})}   # (an image on shared storage: not listed)
    store.drop_image_host("deb", "h2")
    assert store.image_hosts("deb") == {"h1": "copied"}
    store.remove_host("h1")
    assert store.image_holders() == {"deb": frozenset()}   # (copied, held by no host: planned nowhere)
    with pytest.raises(StoreError, match="must be one of copied, shared"):
        store.set_image_host("deb", "h2", "maybe")
    store.remove_image("deb")
    assert store.image_holders() == {} and store.image_hosts("deb") == {}


def test_a_connection_sees_every_change_to_the_hosts_it_remembers(path: Path) -> None:
    """`hosts()` is decoded once per connection until the hosts table changes: a change made through another
    connection, or by plain SQL, is seen at the next call (the table's triggers count every change)."""
    with Store.open(path) as reader, Store.open(path) as writer:
        writer.add_host(HostConfig(name="h1", uri="test:///default"), 4, 4096)
        first = reader.hosts()
        assert [h.name for h in first] == ["h1"]
        assert reader.hosts()[0] is first[0]          # remembered, not decoded again
        writer.add_host(HostConfig(name="h2", uri="test:///default"), 8, 8192)
        assert [h.name for h in reader.hosts()] == ["h1", "h2"]
        writer.update_host_capacity("h1", 2, 2048)
        assert reader.hosts()[0].vcpus == 2
        writer.set_host_properties("h2", (("gpu", "a100"),))
        assert reader.hosts()[1].config.property_map == {"gpu": "a100"}
        raw = sqlite3.connect(path)
        with raw:
            raw.execute("UPDATE hosts SET memory_mib = 1024 WHERE name = 'h1'")
        raw.close()
        assert reader.hosts()[0].memory_mib == 1024
        writer.remove_host("h1")
        assert [h.name for h in reader.hosts()] == ["h2"]


def test_connections_sharing_their_decoded_hosts_decode_them_once_and_each_sees_its_own_snapshot(path: Path) -> None:
    """The server's read connections share the hosts its writer decoded (`share_decoded_hosts`): one decode
    for all of them, and a connection whose snapshot is older than what another decoded gets its own."""
    with Store.open(path) as writer, Store.open(path, checked=True) as reader:
        writer.add_host(HostConfig(name="h1", uri="test:///default"), 4, 4096)
        reader.share_decoded_hosts(writer)
        first = writer.hosts()
        assert reader.hosts()[0] is first[0]          # decoded by the writer, not again
        with reader.snapshot():
            assert [h.name for h in reader.hosts()] == ["h1"]
            writer.add_host(HostConfig(name="h2", uri="test:///default"), 8, 8192)
            assert [h.name for h in writer.hosts()] == ["h1", "h2"]
            assert [h.name for h in reader.hosts()] == ["h1"]      # (its snapshot: before h2)
        assert [h.name for h in reader.hosts()] == ["h1", "h2"]
        assert writer.hosts()[1] is reader.hosts()[1]


def test_the_site_shape_follows_every_change_of_the_hosts_and_each_snapshot(path: Path) -> None:
    """`site_shape` (what every submission is first checked against) is computed once per change of the
    hosts, shared like the decoded hosts, and never older or newer than the connection's snapshot."""
    with Store.open(path) as writer, Store.open(path, checked=True) as reader:
        assert writer.site_shape().hosts == 0
        writer.add_host(HostConfig(name="h1", uri="test:///default"), 4, 4096)
        reader.share_decoded_hosts(writer)
        shape = writer.site_shape()
        assert (shape.hosts, shape.largest.vcpus, shape.largest.memory) == (1, 4, 4096)
        assert reader.site_shape() is shape                    # (made once for both)
        with reader.snapshot():
            assert reader.site_shape() is shape                # (the snapshot begins at its first read)
            writer.add_host(HostConfig(name="h2", uri="test:///default"), 8, 2048)
            grown = writer.site_shape()
            assert (grown.hosts, grown.largest.vcpus, grown.largest.memory) == (2, 8, 4096)
            assert reader.site_shape().hosts == 1             # (its snapshot: before h2)
        assert reader.site_shape().hosts == 2
        writer.remove_host("h1")
        assert (writer.site_shape().hosts, writer.site_shape().largest.memory) == (1, 2048)
