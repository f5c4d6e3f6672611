"""Copying the write-ahead log back into the database off the writers' path, for a long-running server.

SQLite checkpoints by itself inside whichever commit makes the log pass `wal_autocheckpoint` pages: that
commit then also writes those pages into the database file and syncs it, while the server's writer lock is
held and every request waits behind it. `BackgroundCheckpoints` raises the writer's own threshold far
above what the server writes between two of its passes (a backstop should this thread stop: the log stays
bounded) and checkpoints from a thread with its own connection, PASSIVE (it never waits for, nor blocks,
a writer or a reader; frames it cannot copy now are copied at a later pass).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

from orchestrator.state.store.connection import StoreConnection

log = logging.getLogger(__name__)

#: the writer's own automatic checkpoint, left as a backstop (pages of the log: 4 KiB each)
BACKSTOP_PAGES = 20_000


class BackgroundCheckpoints:
    """A thread that checkpoints the database of `writer` every `interval_s` seconds while the log holds
    frames, until `stop()`. A failure is logged once and the thread ends: the writer's backstop
    threshold then keeps the log bounded."""

    def __init__(self, writer: StoreConnection, interval_s: float = 1.0):
        self.path: Path = writer.path
        self.interval_s = interval_s
        self.passes = 0   # checkpoints that copied frames (tests read it)
        self._last: tuple[int, int] | None = None
        writer.set_autocheckpoint(BACKSTOP_PAGES)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leasewise-checkpoints", daemon=True)

    def start(self) -> BackgroundCheckpoints:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None)
        except sqlite3.Error as exc:
            log.error("%s: background checkpoints cannot open the database (%s): the writer checkpoints "
                      "every %d pages instead", self.path, exc, BACKSTOP_PAGES)
            return
        try:
            while not self._stop.wait(self.interval_s):
                self.checkpoint(conn)
            self.checkpoint(conn)   # (what the last writes left, before the server closes)
        except sqlite3.Error as exc:
            log.error("%s: background checkpoint failed (%s): the writer checkpoints every %d pages instead",
                      self.path, exc, BACKSTOP_PAGES)
        finally:
            conn.close()

    def checkpoint(self, conn: sqlite3.Connection) -> None:
        """One PASSIVE checkpoint: copies what no reader still needs from the log; counts it if it did."""
        _, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if copied > 0 and (frames, copied) != self._last:   # (a log copied whole reads the same until reset)
            self.passes += 1
        self._last = (frames, copied)
