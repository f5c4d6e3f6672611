"""How a process gets the cluster for one write: rebuilt from the store each time, or kept in memory.

A CLI command or a `leasewise run` that shares the store with other processes rebuilds the scheduler in
each transaction (`FreshCluster`): another process may have written in between. The server is the store's
only writer, so it keeps one scheduler in memory across transactions (`SharedCluster`), behind a lock that
stands for the store's write lock inside the process. A block that raises leaves the store rolled back and
the scheduler in memory possibly half-changed, so the next use rebuilds it from the store. Its commits
reach the disk after the lock is let go, before the caller goes on (`Store.sync`): the next writer does not
wait for this one's disk flush, and one flush serves every commit made meanwhile.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol, TypeVar

T = TypeVar("T")

from orchestrator.config import Config
from orchestrator.planning.enactment import Enactor
from orchestrator.state.cluster import Cluster
from orchestrator.state.store import Store


class ClusterSession(Protocol):
    store: Store

    def open(self) -> AbstractContextManager[Cluster]: ...   # a write transaction with the cluster in it

    def run(self, work: Callable[[Cluster], T]) -> T: ...     # work(cluster) in a write transaction

    def read(self) -> AbstractContextManager[Cluster]: ...   # the cluster to look at, nothing written

    def invalidate(self) -> None: ...


class FreshCluster:
    def __init__(self, store: Store, config: Config, enactor: Enactor | None = None, live_only: bool = True,
                 make: Callable[..., Cluster] = Cluster):
        self.store = store
        self.config = config
        self.enactor = enactor
        self.live_only = live_only
        self._make = make

    @contextmanager
    def open(self) -> Iterator[Cluster]:
        with self.store.transaction():
            yield self._make(self.store, self.config, self.enactor, live_only=self.live_only)

    def run(self, work: Callable[[Cluster], T]) -> T:
        with self.open() as cluster:
            return work(cluster)

    @contextmanager
    def read(self) -> Iterator[Cluster]:
        """The cluster rebuilt in a read transaction: one snapshot, and writers go on."""
        with self.store.snapshot():
            yield self._make(self.store, self.config, self.enactor, live_only=self.live_only)

    def invalidate(self) -> None:
        pass


class _Work:
    """One caller's `work` waiting to be run, and what came of it."""

    __slots__ = ("work", "finished", "value", "error")

    def __init__(self, work: Callable[[Cluster], object]):
        self.work = work
        self.finished = False
        self.value: object = None
        self.error: BaseException | None = None


class SharedCluster:
    def __init__(self, store: Store, config: Config, enactor: Enactor | None = None,
                 make: Callable[..., Cluster] = Cluster):
        self.store = store
        self.config = config
        self.enactor = enactor
        self.lock = threading.RLock()
        self._make = make
        self._cluster: Cluster | None = None
        self._depth = 0
        self._holds = 0   # times the thread holding the lock has taken it
        self._pending: list[_Work] = []
        self._pending_lock = threading.Lock()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The lock; once the thread lets go of it for the last time, its commits flushed to disk."""
        with self.lock:
            self._holds += 1
            try:
                yield
            finally:
                self._holds -= 1
                released = self._holds == 0
        if released:
            self.store.sync()

    @contextmanager
    def open(self) -> Iterator[Cluster]:
        with self._locked():
            self._depth += 1
            try:
                with self.store.transaction(durable=False):
                    if self._cluster is None:
                        self._cluster = self._make(self.store, self.config, self.enactor, live_only=True)
                    yield self._cluster
            except BaseException:
                if self._depth == 1:
                    self._cluster = None
                raise
            finally:
                self._depth -= 1

    def run(self, work: Callable[[Cluster], T]) -> T:
        """`work(cluster)` in a write transaction. Callers that arrive while another one holds the lock are
        run together when it is free, each in a savepoint of its own, under one commit (group commit: a
        burst of requests waits for one disk flush, not one each). One caller's exception is its own: its
        savepoint is rolled back, the scheduler rebuilt, and the others' work is kept."""
        item = _Work(work)
        with self._pending_lock:
            self._pending.append(item)
        with self._locked():
            if not item.finished:
                self._run_pending()
        if item.error is not None:
            raise item.error
        return item.value  # type: ignore[return-value]

    def _run_pending(self) -> None:
        with self._pending_lock:
            batch, self._pending = self._pending, []
        try:
            with self.open():
                for item in batch:
                    try:
                        with self.open() as cluster:   # (nested: a savepoint)
                            item.value = item.work(cluster)
                    except Exception as exc:
                        item.error = exc
                        self._cluster = None   # possibly half-changed: rebuilt from the store as it now is
        except BaseException as exc:   # the commit itself failed: nothing of the batch was written
            for item in batch:
                item.value, item.error = None, exc
            raise
        finally:
            for item in batch:
                item.finished = True

    def read(self) -> AbstractContextManager[Cluster]:
        """The scheduler in memory (under the lock: it is the same object the writers change)."""
        return self.open()

    def invalidate(self) -> None:
        """Rebuild at the next use (hosts added or removed, the calibration changed...)."""
        with self.lock:
            self._cluster = None
