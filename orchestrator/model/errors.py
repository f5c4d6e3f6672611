"""One exception hierarchy, so the CLI can turn any of them into one clear line.

Every error that comes from bad input names the field it is about; `str(exc)` is the one-line message
shown to the user. The store's errors are here too (raised by `orchestrator.state.store`), so that what
tells them apart (a busy store is worth trying again) is known to every layer above the model.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import date, datetime
from pathlib import Path


class LeasewiseError(Exception):
    """Base of every error leasewise raises on purpose."""


class InvalidRequest(LeasewiseError, ValueError):
    """A request, workload entry or argument is malformed; names the field and the problem."""

    def __init__(self, field: str, problem: str, *, where: str | None = None):
        self.field = field
        self.problem = problem
        self.where = where
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}{field}: {problem}")


def shown(value: object) -> str:
    """A bad value as quoted in an error: short scalars as themselves, containers by their kind only
    (a YAML alias bomb must not be printed)."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        text = repr(value)
    elif isinstance(value, (datetime, date)):
        text = value.isoformat()
    elif isinstance(value, Mapping):
        return "a mapping"
    elif isinstance(value, (list, tuple, set)):
        return "a list"
    else:
        return f"a {type(value).__name__}"
    return text if len(text) <= 60 else text[:57] + "..."


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


class ConfigError(InvalidRequest):
    """A configuration key is unknown or has a bad value."""


class WorkloadError(InvalidRequest):
    """A workload file (LWF or SWF) is malformed."""


class IllegalTransition(LeasewiseError):
    """A lease was asked to move between two states the state table does not connect."""

    def __init__(self, lease_id: object, current: object, target: object):
        self.lease_id = lease_id
        self.current = current
        self.target = target
        super().__init__(f"lease {lease_id}: illegal state transition {current} -> {target}")


class Unschedulable(enum.Enum):
    """Why a lease found no room now, for the queue's failure memo (which larger leases it rules out)."""

    INSTANT = "instant"   # no room even at the start instant
    STRICT = "strict"     # room at the start, but not over the whole interval
    SHORT = "short"       # may be suspended, but fits neither for its whole run nor for its threshold


class NotSchedulable(LeasewiseError):
    """The scheduler could not find room for a lease (the reason is the message). `kind` says why, when
    the queue's failure memo can use it, else None."""

    def __init__(self, message: str, kind: Unschedulable | None = None):
        super().__init__(message)
        self.kind = kind


class InconsistentSchedule(LeasewiseError):
    """An internal invariant of the plan broke: a bug, never bad input."""
