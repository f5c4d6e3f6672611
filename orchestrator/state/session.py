"""How a process gets the cluster for one write: rebuilt from the store each time, or kept in memory.

A CLI command or a `leasewise run` that shares the store with other processes rebuilds the scheduler in
each transaction (`FreshCluster`): another process may have written in between. The server is the store's
only writer, so it keeps one scheduler in memory across transactions (`SharedCluster`), behind a lock that
stands for the store's write lock inside the process. A block that raises leaves the store rolled back and
the scheduler in memory possibly half-changed, so the next use rebuilds it from the store.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

from orchestrator.model.config import Config
from orchestrator.planning.enactment import Enactor
from orchestrator.state.cluster import Cluster
from orchestrator.state.store import Store


class ClusterSession(Protocol):
    store: Store

    def open(self) -> AbstractContextManager[Cluster]: ...   # a write transaction with the cluster in it

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

    def invalidate(self) -> None:
        pass


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

    @contextmanager
    def open(self) -> Iterator[Cluster]:
        with self.lock:
            self._depth += 1
            try:
                with self.store.transaction():
                    if self._cluster is None:
                        self._cluster = self._make(self.store, self.config, self.enactor, live_only=True)
                    yield self._cluster
            except BaseException:
                if self._depth == 1:
                    self._cluster = None
                raise
            finally:
                self._depth -= 1

    def invalidate(self) -> None:
        """Rebuild at the next use (hosts added or removed, the calibration changed...)."""
        with self.lock:
            self._cluster = None
