"""Looking at a test's SQLite store from outside: a fingerprint of everything in it."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path


def snapshot(store_path: Path, *, besides: tuple[str, ...] = ()) -> str:
    """A hash of every row of every table (not the file bytes: WAL checkpoints rewrite those), but the
    tables `besides` (the tokens, whose last use a call through HTTPS writes)."""
    conn = sqlite3.connect(store_path)
    try:
        skipped = tuple(f'INSERT INTO "{table}"' for table in besides)
        rows = (line for line in conn.iterdump() if not line.startswith(skipped)) if skipped else conn.iterdump()
        return hashlib.sha256("\n".join(rows).encode()).hexdigest()
    finally:
        conn.close()
