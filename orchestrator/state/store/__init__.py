"""The SQLite store shared by the daemon and every CLI command: hosts, leases, their plans, an event log,
quotas and API tokens.

`Store` is one process's connection to the database with every table's queries on it
(`store.hosts()`, `store.save_lease(lease)`, ...). Its rooms, one concept each:

- `connection`: opening the file safely (mode 0600, WAL, busy timeout, `PRAGMA quick_check`), and
  transactions and snapshots;
- `schema`: the tables, as migrations (`MIGRATIONS`, `SCHEMA_VERSION`, `apply_migrations`);
- `rows`: a lease, its request, history and plan as rows and back (also their form on the wire);
- one repository per aggregate: `hosts`, `images`, `leases`, `dirty_rates`, `quotas`, `tokens`, `submissions` (idempotency keys), `notices`,
  `operations` (the intent log), `events` (the event log), `meta` (values by key and the id counters);
- `errors`: `StoreError`, `StoreCorrupt`, `StoreBusy`.

Every write runs inside `Store.transaction()`: a crash between two writes leaves the previous consistent
state. Times are stored as fixed-width ISO 8601 UTC text and read back as aware UTC datetimes.
"""

from __future__ import annotations

from orchestrator.state.store.connection import BUSY_TIMEOUT_S, DIR_MODE, FILE_MODE, default_store_path
from orchestrator.state.store.dirty_rates import DirtyRateRepository
from orchestrator.state.store.errors import StoreBusy, StoreCorrupt, StoreError
from orchestrator.state.store.events import Event, EventLog
from orchestrator.state.store.hosts import HostRecord, HostRepository
from orchestrator.state.store.images import ImageRepository
from orchestrator.state.store.leases import LeaseRepository
from orchestrator.state.store.meta import MetaRepository
from orchestrator.state.store.notices import NoticeRecord, NoticeRepository
from orchestrator.state.store.operations import OperationLog, OperationRecord
from orchestrator.state.store.quotas import QuotaRepository
from orchestrator.state.store.rows import (
    history_rows,
    lease_from_rows,
    lease_row,
    plan_rows,
    request_row,
    reservation_detail,
)
from orchestrator.state.store.submissions import SubmissionRepository
from orchestrator.state.store.schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION, Migration, apply_migrations
from orchestrator.state.store.tokens import TokenRecord, TokenRepository

__all__ = [
    "APPLICATION_ID", "BUSY_TIMEOUT_S", "DIR_MODE", "FILE_MODE", "MIGRATIONS", "SCHEMA_VERSION", "Event", "HostRecord",
    "Migration", "NoticeRecord", "OperationRecord", "Store", "StoreBusy", "StoreCorrupt", "StoreError", "TokenRecord",
    "apply_migrations", "default_store_path", "history_rows", "lease_from_rows", "lease_row", "plan_rows",
    "request_row", "reservation_detail",
]


class Store(MetaRepository, HostRepository, ImageRepository, LeaseRepository, DirtyRateRepository,
            NoticeRepository, QuotaRepository, TokenRepository, SubmissionRepository, OperationLog, EventLog):
    """One process's connection to the state database, with every table's queries. Not thread-safe: one
    Store per thread. Opened with `Store.open(path)`; a context manager that closes it."""
