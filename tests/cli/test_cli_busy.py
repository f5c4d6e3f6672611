"""A store another process is writing to: a command waits and tries again for up to --wait seconds, then
exits 75 (try again) with one line; never 2, nothing written. The lock is a real one: another process
holds SQLite's write lock (BEGIN IMMEDIATE) on the store."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.state.store import BUSY_TIMEOUT_S, Store
from tests.support.stores import snapshot
from tests.support.text import lines

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}

LOCKER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
"""


@pytest.fixture
def store(site, store_path):
    """The site's store (two hosts), closed: only the locker and the command under test open it."""
    return store_path


def hold_lock(path: Path, seconds: float) -> subprocess.Popen:
    locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(path), str(seconds)], stdout=subprocess.PIPE,
                              text=True)
    assert locker.stdout.readline().strip() == "locked"
    return locker


def submit(path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, float]:
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", "from orchestrator.cli import main; main()", "lease", "submit",
                           "--cpus", "1", "--memory", "1024", "--duration", "1h", "--json", "--state", str(path),
                           *extra], capture_output=True, text=True, env=ENV, timeout=120)
    return done, time.monotonic() - began


def test_a_lock_released_within_wait_is_waited_for(store):
    """Held past the store's own busy timeout, so the command got SQLITE_BUSY at least once and succeeded
    by trying again."""
    held = BUSY_TIMEOUT_S + 3
    locker = hold_lock(store, held)
    try:
        done, took = submit(store, "--wait", "30")
    finally:
        locker.wait(timeout=60)
    assert done.returncode == 0, done.stderr
    assert took > BUSY_TIMEOUT_S
    with Store.open(store) as opened:
        assert [lease.id for lease in opened.leases()] == [1]


def submit_while_locked(path: Path, wait: str) -> tuple[subprocess.CompletedProcess, float]:
    """`lease submit --wait WAIT` while another process holds the write lock all along."""
    locker = hold_lock(path, 120)
    try:
        return submit(path, "--wait", wait)
    finally:
        locker.kill()
        locker.wait(timeout=60)


def test_a_lock_held_past_wait_is_exit_75_with_one_line(store):
    before = snapshot(store)
    done, took = submit_while_locked(store, "1")
    assert done.returncode == 75, (done.returncode, done.stderr)
    assert done.stdout == ""
    [line] = lines(done.stderr)
    assert line.startswith(f"error: {store}: busy: ") and "--wait 1" in line and "try again" in line
    assert took < BUSY_TIMEOUT_S * 2 + 1 + 10   # one busy timeout, --wait, the last try's timeout, start-up
    assert snapshot(store) == before


def test_wait_0_does_not_try_again(store):
    done, took = submit_while_locked(store, "0")
    assert done.returncode == 75, done.stderr
    assert took < BUSY_TIMEOUT_S + 10
