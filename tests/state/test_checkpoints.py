"""Background checkpoints: the server's commits leave the write-ahead log to a thread of its own."""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from pathlib import Path

from orchestrator.state.store import Store
from orchestrator.state.store.checkpoints import BACKSTOP_PAGES, BackgroundCheckpoints

PAGE = 4096


def _write_pages(store: Store, pages: int) -> None:
    """About `pages` pages of the log, in commits of a few pages each (as a server's requests make)."""
    for i in range(pages // 4):
        store.set_meta(f"filler-{i}", "x" * (3 * PAGE))


def _wal_pages(path: Path) -> int:
    return os.path.getsize(f"{path}-wal") // PAGE


def test_the_writers_commits_no_longer_checkpoint_at_the_default_threshold(tmp_path):
    path = tmp_path / "state.db"
    with Store.open(path, any_thread=True) as store:
        BackgroundCheckpoints(store)   # (not started: only the writer's threshold is changed)
        _write_pages(store, 1600)
        # SQLite's default (1000 pages) would have copied the log back and started it over by now
        assert 1500 <= _wal_pages(path) < BACKSTOP_PAGES
        assert os.path.getsize(path) < 100 * PAGE


def test_the_thread_copies_the_log_into_the_database_and_once_more_when_stopped(tmp_path):
    path = tmp_path / "state.db"
    with Store.open(path, any_thread=True) as store:
        checkpoints = BackgroundCheckpoints(store, interval_s=0.05).start()
        try:
            _write_pages(store, 400)
            # (passes may have run while the pages were written: wait for the one after the last write)
            deadline = time.monotonic() + 10
            while (os.path.getsize(path) <= 300 * PAGE or not checkpoints.passes) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert os.path.getsize(path) > 300 * PAGE   # (the pages are in the database file itself)
            assert checkpoints.passes >= 1
            store.set_meta("last", "written just before the stop")
        finally:
            checkpoints.stop()
        # nothing left in the log that is not in the database: a new PASSIVE pass finds it all copied
        with sqlite3.connect(path) as other:
            busy, frames, copied = other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert (busy, copied) == (0, frames)
        assert store.get_meta("last") == "written just before the stop"


def test_a_thread_that_cannot_open_the_database_leaves_the_writer_its_backstop(tmp_path, caplog):
    path = tmp_path / "state.db"
    with Store.open(path, any_thread=True) as store, caplog.at_level(logging.ERROR):
        checkpoints = BackgroundCheckpoints(store, interval_s=0.05)
        checkpoints.path = tmp_path / "missing-dir" / "state.db"   # (its own connection fails to open)
        checkpoints.start()
        checkpoints.stop()
        assert checkpoints.passes == 0
        assert f"the writer checkpoints every {BACKSTOP_PAGES} pages instead" in caplog.text
        store.set_meta("still", "written")   # the writer goes on
        assert store.get_meta("still") == "written"
