"""The store's errors, each one line naming the database file or the thing a write names."""

from __future__ import annotations

from pathlib import Path

from orchestrator.model.errors import LeasewiseError


class StoreError(LeasewiseError):
    """The state database cannot be opened, is too new, or a write names a missing / duplicate thing."""


class StoreCorrupt(StoreError):
    """SQLite finds the database file damaged (PRAGMA quick_check, or "malformed" on the way there)."""


class StoreBusy(StoreError):
    """Another process held the database's write lock for longer than the busy timeout: nothing was
    written, and the same operation may succeed if tried again."""

    def __init__(self, path: Path, message: str):
        super().__init__(f"{path}: {message}")
        self.path = path
