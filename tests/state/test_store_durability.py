"""A commit is on disk before anyone is told of it, and the server's writer does not wait for the disk while
it holds its lock: SQLite runs with `synchronous = NORMAL` and the store flushes the write-ahead log itself
(`Store.sync`), once for every commit made while a flush was under way. The flushes are seen by wrapping
`os.fsync` and `os.fdatasync` (the real calls still run): a test of what reaches the disk cannot watch the
disk itself."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from drivers.inventory import HostConfig
from orchestrator.config import Config
from orchestrator.state.session import SharedCluster
from orchestrator.state.store import Store


class Flushes:
    """The files `os.fsync` and `os.fdatasync` flushed (by path), calling the real ones; `during` runs inside
    each flush."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, during=None):
        self.paths: list[str] = []
        self.during = during
        for name in ("fsync", "fdatasync"):
            monkeypatch.setattr(os, name, self._watching(getattr(os, name)))

    def _watching(self, real):
        def flush(fd: int) -> None:
            self.paths.append(os.readlink(f"/proc/self/fd/{fd}"))
            if self.during is not None:
                self.during()
            real(fd)
        return flush

    def of_log(self, store: Store) -> int:
        return sum(1 for p in self.paths if p == f"{store.path}-wal")


@pytest.fixture
def store(tmp_path: Path):
    with Store.open(tmp_path / "state.sqlite", any_thread=True) as s:
        yield s


def _add_host(store: Store, name: str, **transaction) -> None:
    with store.transaction(**transaction):
        store.add_host(HostConfig(name=name, uri="sim://", domain_type="qemu"), 8, 16384)


def test_sqlite_leaves_the_flush_to_the_store(store):
    assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 1   # NORMAL: no fsync inside COMMIT


def test_a_transaction_is_flushed_before_it_returns_and_its_directory_once(store, monkeypatch):
    flushes = Flushes(monkeypatch)
    _add_host(store, "h1")
    assert flushes.of_log(store) == 1
    assert flushes.paths.count(str(store.path.parent)) == 1   # the log's name in its directory, as SQLite does
    _add_host(store, "h2")
    assert flushes.of_log(store) == 2
    assert flushes.paths.count(str(store.path.parent)) == 1


def test_a_transaction_that_wrote_nothing_flushes_nothing(store, monkeypatch):
    flushes = Flushes(monkeypatch)
    with store.transaction():
        store.hosts()
    assert flushes.paths == []


def test_commits_not_made_durable_wait_for_one_sync(store, monkeypatch):
    flushes = Flushes(monkeypatch)
    for name in ("h1", "h2", "h3"):
        _add_host(store, name, durable=False)
    assert flushes.of_log(store) == 0
    store.sync()
    assert flushes.of_log(store) == 1
    store.sync()   # nothing new: no second flush
    assert flushes.of_log(store) == 1
    assert [h.name for h in Store.open(store.path).hosts()] == ["h1", "h2", "h3"]


def test_closing_flushes_what_its_caller_did_not(tmp_path, monkeypatch):
    store = Store.open(tmp_path / "state.sqlite")
    _add_host(store, "h1", durable=False)
    flushes = Flushes(monkeypatch)
    store.close()
    assert flushes.of_log(store) == 1


def test_a_flush_under_way_serves_the_commits_made_meanwhile(store, monkeypatch):
    """Group commit: while one thread flushes, others commit and ask; one more flush serves them all."""
    started, go_on = threading.Event(), threading.Event()

    def slow_first_flush():
        if not started.is_set():
            started.set()
            assert go_on.wait(10)

    flushes = Flushes(monkeypatch, during=slow_first_flush)
    _add_host(store, "h0", durable=False)
    first = threading.Thread(target=store.sync)
    first.start()
    assert started.wait(10)
    lock = threading.Lock()   # (the connection is one writer's: the server's lock)
    waiting = []
    for i in range(1, 5):
        with lock:
            _add_host(store, f"h{i}", durable=False)
        waiting.append(threading.Thread(target=store.sync))
        waiting[-1].start()
    go_on.set()
    for t in (first, *waiting):
        t.join(10)
    assert flushes.of_log(store) == 2
    assert store._synced == store._commits == 5


def test_the_servers_writer_flushes_after_letting_go_of_its_lock(store, monkeypatch):
    """While a write waits for the disk, the next caller may already take the lock."""
    _add_host(store, "h1")
    session = SharedCluster(store, Config())
    free_during_flush: list[bool] = []

    def lock_is_free_to_another_thread():
        taken = []
        probe = threading.Thread(target=lambda: taken.append(session.lock.acquire(timeout=5)) or session.lock.release())
        probe.start()
        probe.join(10)
        free_during_flush.append(taken == [True])

    flushes = Flushes(monkeypatch, during=lock_is_free_to_another_thread)
    session.run(lambda cluster: store.add_host(HostConfig(name="h2", uri="sim://", domain_type="qemu"), 8, 16384))
    assert flushes.of_log(store) == 1
    assert free_during_flush == [True]
    with session.read():   # a look, nothing written: no flush
        pass
    assert flushes.of_log(store) == 1
