"""The store's errors, each one line naming the database file or the thing a write names.

They are defined with the rest of leasewise's errors (`orchestrator.model.errors`), so that the layers above
tell a busy store from the others (and try again) without importing the store; here they are the store's.
"""

from __future__ import annotations

from orchestrator.model.errors import StoreBusy, StoreCorrupt, StoreError

__all__ = ["StoreBusy", "StoreCorrupt", "StoreError"]
