"""Looking at a test's SQLite store from outside: a fingerprint of everything in it."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path


def snapshot(store_path: Path) -> str:
    """A hash of every row of every table (not the file bytes: WAL checkpoints rewrite those)."""
    conn = sqlite3.connect(store_path)
    try:
        return hashlib.sha256("\n".join(conn.iterdump()).encode()).hexdigest()
    finally:
        conn.close()
