"""The simulated driver's lock: one operation at a time changes the simulated hosts.

Several threads may share one simulated driver (the daemon's operation runner, a server's requests), so
every public method of `SimulatedDriver` runs inside `held()`. A method may call another (the lock is
re-entrant). An operation that waits on a clock that moves by itself lets go of the lock wholly meanwhile
(`let_go()`), as a real host's operations overlap, and takes it back before it changes anything.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class OperationLock:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0   # how many times the thread holding the lock entered it

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1

    @contextmanager
    def let_go(self) -> Iterator[None]:
        """Release the lock as many times as the calling thread (its holder) entered it, and take it back
        as many times on leaving; whoever takes it meanwhile counts from nothing."""
        depth, self._depth = self._depth, 0
        for _ in range(depth):
            self._lock.release()
        try:
            yield
        finally:
            for _ in range(depth):
                self._lock.acquire()
            self._depth = depth
