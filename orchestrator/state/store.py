"""The SQLite store shared by the daemon and every CLI command: hosts, leases, their plans, an event log,
quotas and API tokens.

One database file (`default_store_path()`, or whatever the caller passes) opened by each process with its
own `Store` (no module-level connection). It runs in WAL mode, so readers never block the writer, with a
busy timeout, so two processes writing at once wait for each other instead of failing with "database is
locked"; the file is kept at mode 0600 because it names hosts, users and SSH key paths.

Opening checks the file once per process (`PRAGMA quick_check`, see `_intact`): a corrupted store is one
error naming the file, never data shown as if nothing were wrong or a traceback half-way through.

Every write runs inside `Store.transaction()` (BEGIN IMMEDIATE ... COMMIT, ROLLBACK on any exception):
a crash between two writes leaves the previous consistent state. Reads that span several queries run in
one read transaction, so they see one snapshot even while another process commits.

Schema changes are migrations: `MIGRATIONS[i]` moves a database from version i to i + 1 (PRAGMA
user_version). Opening an older database migrates it forward in one transaction; a database newer than
this code is refused.

Times are stored as fixed-width ISO 8601 UTC text (`2026-01-01T13:00:00.000000Z`, so text order is time
order) and read back as aware UTC datetimes; durations as float seconds.
"""

from __future__ import annotations

import json
import math
import logging
import os
import sqlite3
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import Any

from drivers.inventory import HostConfig
from orchestrator.model.errors import LeasewiseError
from orchestrator.model.guest import MAC_COUNT, GuestSetup, mac_address
from orchestrator.model.images import CatalogImage
from orchestrator.model.lease import Lease, LeaseRequest, LeaseType, VMImage
from orchestrator.model.quota import Quota, check_subject
from orchestrator.model.reservations import (
    Reservation,
    ReservationKind,
    ReservationState,
)
from orchestrator.model.resources import Resources
from orchestrator.model.states import FINAL_STATES, LeaseState
from orchestrator.model.timeutil import UTC, as_utc, iso, parse_time

log = logging.getLogger(__name__)

FILE_MODE = 0o600
DIR_MODE = 0o700
BUSY_TIMEOUT_S = 5.0
#: PRAGMA application_id of a leasewise state database ("LWST"), so another program's file is refused
APPLICATION_ID = 0x4C575354


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


def _is_busy(exc: sqlite3.Error) -> bool:
    """SQLITE_BUSY / SQLITE_LOCKED, by code where Python gives it, else by SQLite's message."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    message = str(exc)
    return "database is locked" in message or "database is busy" in message or "database table is locked" in message


# -- paths ---------------------------------------------------------------------------------------------------
def default_store_path(env: Mapping[str, str] | None = None) -> Path:
    """`$XDG_DATA_HOME/leasewise/state.sqlite`, else `~/.local/share/leasewise/state.sqlite`.

    A relative XDG_DATA_HOME is ignored, as the XDG base directory spec says."""
    environ = os.environ if env is None else env
    base = environ.get("XDG_DATA_HOME", "")
    if not base or not os.path.isabs(base):
        home = environ.get("HOME") or os.path.expanduser("~")
        base = os.path.join(home, ".local", "share")
    return Path(base) / "leasewise" / "state.sqlite"


def _tighten_modes(path: Path) -> None:
    """Mode 0600 on the database and its WAL files, by path (never opening them)."""
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            if stat.S_IMODE(file.stat().st_mode) != FILE_MODE:
                os.chmod(file, FILE_MODE)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StoreError(f"{file}: cannot set mode 600 ({exc.strerror or exc})") from None


def _secure_file(path: Path) -> None:
    """Create `path` with mode 0600 before SQLite touches it; tighten an existing file (and its WAL files)."""
    if not path.parent.exists():
        os.makedirs(path.parent, mode=DIR_MODE, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
    except OSError as exc:
        raise StoreError(f"{path}: cannot open the state database ({exc.strerror or exc})") from None
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode != FILE_MODE:
            if mode & 0o077:
                log.warning("%s: mode was %o, set to 600", path, mode)
            os.fchmod(fd, FILE_MODE)
    except OSError as exc:
        raise StoreError(f"{path}: cannot set mode 600 on the state database ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        try:
            if stat.S_IMODE(side.stat().st_mode) != FILE_MODE:
                os.chmod(side, FILE_MODE)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StoreError(f"{side}: cannot set mode 600 ({exc.strerror or exc})") from None


# -- integrity -----------------------------------------------------------------------------------------------
#: files this process found intact, by (device, inode, size, modification time): a memo so a process that
#: opens the store many times checks it once (a changed file is checked again). Only a cache: losing it
#: costs one more check, and nothing reads it but `_intact`.
_FOUND_INTACT: set[tuple[int, int, int, int]] = set()


def _intact(conn: sqlite3.Connection, path: Path) -> None:
    """Refuse a damaged database with `StoreCorrupt`, naming the file and SQLite's first complaint.

    `quick_check` reads every page (O(size), no index cross-checks): cheap enough once per process."""
    try:
        info = os.stat(path)
    except OSError:   # (`_secure_file` has just made it: gone again, SQLite's next statement says so)
        return
    key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    if key in _FOUND_INTACT:
        return
    try:
        rows = conn.execute("PRAGMA quick_check(1)").fetchall()
    except sqlite3.DatabaseError as exc:
        if _is_busy(exc):
            raise
        problem = _sqlite_message(exc)
    else:
        problem = None if rows == [("ok",)] else "; ".join(str(r[0]) for r in rows)
    if problem is not None:
        raise StoreCorrupt(_damaged(f"quick_check: {problem}"))
    _FOUND_INTACT.add(key)


def _damaged(problem: str) -> str:
    problem = " ".join(problem.replace("*** in database main ***", "").split())
    return (f"the state database is damaged (SQLite {problem}); restore it from a backup, or move it aside "
            "to start an empty one")


# -- encoding ------------------------------------------------------------------------------------------------
def _t(value: datetime | None) -> str | None:
    """Fixed-width ISO 8601 UTC text: always microseconds, so comparing the text compares the times."""
    if value is None:
        return None
    return as_utc(value).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _dt(text: str | None) -> datetime | None:
    """A time as `_t` wrote it (fixed width, `Z`): read straight by `fromisoformat`; anything else is
    checked in full by `parse_time`."""
    if text is None:
        return None
    if len(text) == 27 and text[26] == "Z":
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            return parse_time(text)
        if value.tzinfo is UTC and 1970 <= value.year <= 9998:
            return value
    return parse_time(text)


def _secs(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def _td(value: float | None) -> timedelta | None:
    return None if value is None else timedelta(seconds=value)


def _res(r: Resources) -> dict[str, float]:
    return dict(r._asdict())


def _unres(d: Mapping[str, float]) -> Resources:
    return Resources(**d)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=_json_default)


def _json_default(value: Any) -> Any:
    """Event details may carry times, durations, enums and sets; everything else must be plain JSON."""
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def reservation_detail(rr: Reservation) -> dict[str, Any]:
    """A reservation as plain JSON data (the encoding of the reservations table), e.g. for a "planned" event."""
    return {
        "id": rr.id,
        "lease_id": rr.lease_id,
        "kind": rr.kind.value,
        "start": iso(rr.start),
        "end": iso(rr.end),
        "state": rr.state.value,
        "resources": {h: _res(r) for h, r in rr.resources.items()},
        "nodes": {str(v): h for v, h in rr.nodes.items()},
        "transfers": {str(v): list(t) for v, t in rr.transfers.items()},
        **({"continues": True} if rr.continues else {}),
        **({"extra": rr.extra} if rr.extra else {}),
    }


# -- schema --------------------------------------------------------------------------------------------------
Migration = Sequence[str] | Callable[[sqlite3.Connection], None]

_V1 = (
    """CREATE TABLE hosts (
        name TEXT PRIMARY KEY,
        uri TEXT NOT NULL,
        domain_type TEXT NOT NULL,
        ssh TEXT,
        ssh_key TEXT,
        known_hosts TEXT,
        migration_uri TEXT,
        state_dir TEXT NOT NULL,
        shared_storage TEXT NOT NULL DEFAULT '[]',        -- JSON list of path prefixes
        vcpus INTEGER NOT NULL CHECK (vcpus > 0),
        memory_mib INTEGER NOT NULL CHECK (memory_mib > 0),
        available INTEGER NOT NULL DEFAULT 1 CHECK (available IN (0, 1)),
        added_at TEXT NOT NULL
    )""",
    """CREATE TABLE leases (
        id INTEGER PRIMARY KEY,
        workload_id TEXT,                                 -- the id the submitter knows it by (LWF id, ...)
        name TEXT NOT NULL DEFAULT '',
        user TEXT NOT NULL DEFAULT '',
        type TEXT NOT NULL,
        state TEXT NOT NULL,
        preemptible INTEGER NOT NULL CHECK (preemptible IN (0, 1)),
        nodes TEXT NOT NULL,                              -- JSON list of resource dicts, one per vnode
        duration_s REAL NOT NULL,
        start TEXT,                                       -- requested start (advance reservations)
        submit_time TEXT NOT NULL,
        image TEXT,                                       -- JSON VMImage or NULL
        dirty_rate REAL,
        accumulated_s REAL NOT NULL DEFAULT 0,
        reason TEXT NOT NULL DEFAULT '',
        suspensions INTEGER NOT NULL DEFAULT 0,
        migrations INTEGER NOT NULL DEFAULT 0,
        requeues INTEGER NOT NULL DEFAULT 0,
        start_time TEXT,
        end_time TEXT
    )""",
    "CREATE INDEX leases_state ON leases (state)",
    "CREATE INDEX leases_user ON leases (user)",
    """CREATE TABLE lease_states (
        lease_id INTEGER NOT NULL REFERENCES leases (id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,                             -- index in Lease.history
        time TEXT NOT NULL,
        state TEXT NOT NULL,
        PRIMARY KEY (lease_id, seq)
    ) WITHOUT ROWID""",
    """CREATE TABLE reservations (
        id INTEGER PRIMARY KEY,                           -- Reservation.id (assigned by the slot table)
        lease_id INTEGER NOT NULL REFERENCES leases (id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        start TEXT NOT NULL,
        "end" TEXT NOT NULL,
        state TEXT NOT NULL,
        resources TEXT NOT NULL,                          -- JSON host -> resource dict
        nodes TEXT NOT NULL,                              -- JSON vnode -> host
        transfers TEXT NOT NULL,                          -- JSON vnode -> [source, destination]
        vm_id INTEGER REFERENCES reservations (id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED,
        position INTEGER NOT NULL                         -- order among the lease's parts
    )""",
    "CREATE INDEX reservations_lease ON reservations (lease_id, position)",
    "CREATE INDEX reservations_vm ON reservations (vm_id)",
    """CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        time TEXT NOT NULL,
        lease_id INTEGER,                                 -- no foreign key: the log outlives what it mentions
        kind TEXT NOT NULL,
        detail TEXT NOT NULL DEFAULT '{}'
    )""",
    "CREATE INDEX events_lease ON events (lease_id, id)",
    "CREATE INDEX events_time ON events (time)",
    """CREATE TABLE meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL                               -- JSON
    )""",
    "INSERT INTO meta (key, value) VALUES ('next_lease_id', '1')",
)

_V2 = (
    # simulation-only fields, stored so a round trip through the store is exact
    "ALTER TABLE leases ADD COLUMN real_duration_s REAL",
    "ALTER TABLE reservations ADD COLUMN premature_end TEXT",
    # the history and the event log are append-only
    """CREATE TRIGGER lease_states_append_only BEFORE UPDATE ON lease_states
       BEGIN SELECT RAISE(ABORT, 'lease_states is append-only'); END""",
    """CREATE TRIGGER events_append_only BEFORE UPDATE ON events
       BEGIN SELECT RAISE(ABORT, 'events is append-only'); END""",
)

#: MIGRATIONS[i] takes a database from schema version i to i + 1. Append only; never edit a released one.
#: Each is a list of SQL statements or a function of the connection; all run inside one transaction
#: (foreign_keys cannot be switched inside it: a migration that rebuilds a table must keep references valid).
_V3 = (
    # live migration as a planning move: continuation VM reservations and a migration's predictions
    "ALTER TABLE reservations ADD COLUMN continues INTEGER NOT NULL DEFAULT 0 CHECK (continues IN (0, 1))",
    "ALTER TABLE reservations ADD COLUMN extra TEXT NOT NULL DEFAULT '{}'",   # JSON
    # a drained host is unavailable from this time on (NULL: from whenever it was marked unavailable)
    "ALTER TABLE hosts ADD COLUMN unavailable_from TEXT",
)

_V4 = (
    # VMs a person can use: where a host's VMs attach and keep their disks, a lease's guest setup, the
    # catalogue of base images, and the counter MAC addresses are handed out from
    "ALTER TABLE hosts ADD COLUMN network TEXT",
    "ALTER TABLE hosts ADD COLUMN network_type TEXT NOT NULL DEFAULT 'bridge'",
    "ALTER TABLE hosts ADD COLUMN disk_dir TEXT",
    "ALTER TABLE leases ADD COLUMN guest TEXT",                          # JSON GuestSetup or NULL
    """CREATE TABLE images (
        name TEXT PRIMARY KEY,
        path TEXT NOT NULL,
        format TEXT NOT NULL,
        login_user TEXT NOT NULL,
        os TEXT NOT NULL,
        kernel TEXT,
        initrd TEXT,
        cmdline TEXT,
        size_bytes INTEGER NOT NULL DEFAULT 0,
        added_at TEXT NOT NULL,
        added_by TEXT NOT NULL DEFAULT ''
    )""",
    "INSERT INTO meta (key, value) VALUES ('next_mac', '0')",
    # a finished lease whose VMs, memory images and disks are not cleaned up from the hosts yet
    "ALTER TABLE leases ADD COLUMN released INTEGER NOT NULL DEFAULT 0 CHECK (released IN (0, 1))",
    "UPDATE leases SET released = 1 WHERE state IN ('done', 'cancelled', 'rejected', 'failed')",
    "CREATE INDEX leases_unreleased ON leases (id) WHERE released = 0",
)

_V5 = (
    # the dirty rate last measured on each running VM (libvirt's dirty-rate calculation), which the planner
    # uses in place of the declared one when it plans a live migration
    """CREATE TABLE dirty_rates (
        lease_id INTEGER NOT NULL REFERENCES leases(id) ON DELETE CASCADE,
        vnode INTEGER NOT NULL,
        measured_at TEXT NOT NULL,
        mib_s REAL NOT NULL CHECK (mib_s >= 0),
        PRIMARY KEY (lease_id, vnode)
    )""",
)

_V6 = (
    # quotas per user (`alice`) or Unix group (`@lab`); NULL: that limit is unlimited
    """CREATE TABLE quotas (
        subject TEXT PRIMARY KEY,
        vcpus INTEGER CHECK (vcpus >= 0),
        memory_mib INTEGER CHECK (memory_mib >= 0),
        vms INTEGER CHECK (vms >= 0),
        max_duration_s REAL CHECK (max_duration_s >= 0),
        max_ahead_s REAL CHECK (max_ahead_s >= 0),
        set_at TEXT NOT NULL
    )""",
    # API tokens: only a salt and a slow salted hash of the secret are kept
    """CREATE TABLE tokens (
        id INTEGER PRIMARY KEY,
        user TEXT NOT NULL,
        admin INTEGER NOT NULL DEFAULT 0 CHECK (admin IN (0, 1)),
        salt BLOB NOT NULL,
        hash BLOB NOT NULL,
        created_at TEXT NOT NULL,
        expires_at TEXT,
        revoked_at TEXT,
        last_used_at TEXT,
        note TEXT NOT NULL DEFAULT ''
    )""",
    "CREATE INDEX tokens_user ON tokens (user)",
)

_V7 = (
    # the intent log: an operation on the hosts is written here, with the plan that asked for it, before
    # it runs off the store's lock; its outcome is written when it ends. A daemon that starts again finds
    # the ones that never ended and runs them again (every operation accepts its own outcome as done)
    """CREATE TABLE operations (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        lease_id INTEGER,                                 -- no foreign key: outlives what it mentions
        operation TEXT NOT NULL,                          -- an Operation value, or 'release'
        reservation_id INTEGER,
        hosts TEXT NOT NULL DEFAULT '[]',                 -- JSON list
        created_at TEXT NOT NULL,
        finished_at TEXT,
        outcome TEXT CHECK (outcome IN ('done', 'failed', 'abandoned')),
        error TEXT
    )""",
    "CREATE INDEX operations_unfinished ON operations (id) WHERE finished_at IS NULL",
)

_V8 = (
    # end-of-lease notices: a row per lease, notice key ("before_end:1h", "ended") and notifier, inserted
    # before the notice is sent (the claim) and given its outcome after: "claimed" (being sent, or lost to
    # a crash between the claim and the send), "sent", or "failed: why"
    """CREATE TABLE notices (
        lease_id INTEGER NOT NULL REFERENCES leases(id) ON DELETE CASCADE,
        key TEXT NOT NULL,
        notifier TEXT NOT NULL,
        sent_at TEXT NOT NULL,                            -- when it was claimed, just before the send
        outcome TEXT NOT NULL DEFAULT 'claimed',
        PRIMARY KEY (lease_id, key, notifier)
    ) WITHOUT ROWID""",
    # the leases that ended since some time, which the sender looks for at every step
    "CREATE INDEX leases_end_time ON leases (end_time)",
)

_V9 = (
    # how the other hosts' libvirtd reach a host for a peer-to-peer migration (the inventory's peer_uri)
    "ALTER TABLE hosts ADD COLUMN peer_uri TEXT",
)

MIGRATIONS: list[Migration] = [_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9]
SCHEMA_VERSION = len(MIGRATIONS)


def apply_migrations(conn: sqlite3.Connection, upto: int = SCHEMA_VERSION) -> int:
    """Bring the database on `conn` (autocommit mode) to version `upto`; returns the version it had.

    Runs in one BEGIN IMMEDIATE transaction, reading the version again once the write lock is held, so two
    processes opening an old database at once migrate it once."""
    current = _check_version(conn)
    if current >= upto:   # the usual case: no write lock needed just to open
        return current
    conn.execute("BEGIN IMMEDIATE")
    try:
        current = _check_version(conn)
        for version in range(current, upto):
            migration = MIGRATIONS[version]
            if callable(migration):
                migration(conn)
            else:
                for statement in migration:
                    conn.execute(statement)
        if upto > current:
            conn.execute(f"PRAGMA user_version = {int(upto)}")
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute("COMMIT")
        return current
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _check_version(conn: sqlite3.Connection) -> int:
    """The schema version, after refusing another program's database and one newer than this code."""
    current = conn.execute("PRAGMA user_version").fetchone()[0]
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    if app_id not in (0, APPLICATION_ID):
        raise StoreError(f"not a leasewise state database (application_id {app_id:#x})")
    if current == 0:
        tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'").fetchone()[0]
        if tables:
            raise StoreError("not a leasewise state database (it has tables but no schema version)")
    if current > SCHEMA_VERSION:
        raise StoreError(f"database schema version {current} is newer than this leasewise supports "
                         f"({SCHEMA_VERSION}); upgrade leasewise")
    return current


# -- records -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HostRecord:
    """A host as the store knows it: how to reach it, its capacity, and whether leases may use it."""

    config: HostConfig
    vcpus: int
    memory_mib: int
    available: bool
    added_at: datetime
    unavailable_from: datetime | None = None     # a drained host: leases may not use it from then on

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def capacity(self) -> Resources:
        return Resources.of(self.vcpus, self.memory_mib)


@dataclass(frozen=True)
class Event:
    id: int
    time: datetime
    kind: str
    lease_id: int | None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class OperationRecord:
    """An entry of the intent log: an operation on the hosts, and how it ended (None: it never did)."""

    id: int
    lease_id: int | None
    operation: str
    reservation_id: int | None
    hosts: tuple[str, ...]
    created_at: datetime
    finished_at: datetime | None = None
    outcome: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class TokenRecord:
    """An API token as the store keeps it: whose, what it may do, its life; the secret only as a salted
    hash (`salt`, `hash`: never shown, left out of `repr` and `public()`)."""

    id: int
    user: str
    admin: bool
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None
    note: str
    salt: bytes = field(repr=False)
    hash: bytes = field(repr=False)

    def public(self) -> dict[str, Any]:
        """Everything but the salt and the hash, as JSON data."""
        return {"id": self.id, "user": self.user, "admin": self.admin, "created_at": iso(self.created_at),
                "expires_at": iso(self.expires_at), "revoked_at": iso(self.revoked_at),
                "last_used_at": iso(self.last_used_at), "note": self.note}


@dataclass(frozen=True)
class NoticeRecord:
    """An end-of-lease notice as claimed for one notifier, and what came of it."""

    lease_id: int
    key: str
    notifier: str
    sent_at: datetime
    outcome: str            # "claimed" (or lost), "sent", "failed: why"


_HOST_COLUMNS = ("name", "uri", "domain_type", "ssh", "ssh_key", "known_hosts", "migration_uri", "state_dir",
                 "shared_storage", "vcpus", "memory_mib", "available", "added_at", "unavailable_from", "network",
                 "network_type", "disk_dir", "peer_uri")
_IMAGE_COLUMNS = ("name", "path", "format", "login_user", "os", "kernel", "initrd", "cmdline", "size_bytes",
                  "added_at", "added_by")
#: the columns that hold the (immutable) request: a lease saved again must not change them
_REQUEST_COLUMNS = ("name", "user", "type", "preemptible", "nodes", "duration_s", "start", "submit_time", "image",
                    "dirty_rate", "real_duration_s", "guest")
_JSON_REQUEST_COLUMNS = ("nodes", "image", "guest")
_STATE_COLUMNS = ("state", "accumulated_s", "reason", "suspensions", "migrations", "requeues", "start_time",
                  "end_time")
_LEASE_COLUMNS = ("id", "workload_id") + _REQUEST_COLUMNS + _STATE_COLUMNS
_QUOTA_COLUMNS = ("subject", "vcpus", "memory_mib", "vms", "max_duration_s", "max_ahead_s")
_TOKEN_COLUMNS = ("id", "user", "admin", "created_at", "expires_at", "revoked_at", "last_used_at", "note", "salt",
                  "hash")
_RR_COLUMNS = ("id", "lease_id", "kind", "start", "end", "state", "resources", "nodes", "transfers", "vm_id",
               "position", "premature_end", "continues", "extra")


def _q(column: str) -> str:
    return f'"{column}"'


def _lease_filter(state: Iterable[str] | None, user: str | None, prefix: str = "") -> tuple[str, list]:
    """The WHERE clause (and its parameters) picking leases in these states and of this user."""
    clauses, params = [], []
    if state is not None:
        values = [LeaseState(s).value for s in state]
        clauses.append(f"{prefix}state IN ({', '.join('?' * len(values))})")
        params.extend(values)
    if user is not None:
        clauses.append(f"{prefix}user = ?")
        params.append(user)
    return (f"WHERE {' AND '.join(clauses)}" if clauses else ""), params


def _json_value(expr: str) -> str:
    """SQL making a column's value a JSON value as Python's `json` writes it: a real with 17 significant
    digits (SQLite's JSON keeps 15, which may read back as another float)."""
    return f"CASE typeof({expr}) WHEN 'real' THEN json(printf('%!.17g', {expr})) ELSE {expr} END"


def _capacity(value: object, what: str, host: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise StoreError(f"host {host!r}: {what} must be a positive integer (got {value!r})")
    return value


# -- the store -----------------------------------------------------------------------------------------------
class Store:
    """One process's connection to the state database. Not thread-safe: one Store per thread."""

    def __init__(self, conn: sqlite3.Connection, path: Path):
        self._conn = conn
        self.path = path
        self._savepoints = 0

    # -- opening -------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None, *, busy_timeout: float = BUSY_TIMEOUT_S,
             any_thread: bool = False) -> "Store":
        """Open (creating it with mode 0600, and migrating it) the database at `path`, by default
        `default_store_path()`. Raises `StoreError` with a one-line message naming the file.

        `any_thread`: the connection may be used from several threads, one at a time (the caller holds
        a lock around each use: the server's single writer)."""
        path = Path(path) if path is not None else default_store_path()
        _secure_file(path)
        try:
            conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=not any_thread)
        except sqlite3.Error as exc:
            raise StoreError(f"{path}: cannot open the state database ({exc})") from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            _check_version(conn)   # before changing anything in a file that may not be ours
            _intact(conn, path)
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"WAL journal mode is not available (got {mode}); is it on a network filesystem?")
            conn.execute("PRAGMA foreign_keys = ON")
            apply_migrations(conn)
        except StoreError as exc:
            conn.close()
            raise (StoreCorrupt if isinstance(exc, StoreCorrupt) else StoreError)(f"{path}: {exc}") from None
        except sqlite3.Error as exc:
            conn.close()
            if _is_busy(exc):
                raise StoreBusy(path, f"busy: another process holds the write lock ({_sqlite_message(exc)})") from None
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_CORRUPT:   # (found before the check)
                raise StoreCorrupt(f"{path}: {_damaged(_sqlite_message(exc))}") from None
            raise StoreError(f"{path}: cannot open the state database ({_sqlite_message(exc)})") from None
        # the -wal / -shm files SQLite just created. By path only: opening and closing a descriptor on
        # the database here would drop every POSIX lock this process holds on it (fcntl locks belong to
        # the process, not the descriptor), and another process could then reset the WAL under us
        _tighten_modes(path)
        return cls(conn, path)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def schema_version(self) -> int:
        return self._conn.execute("PRAGMA user_version").fetchone()[0]

    def data_version(self) -> int:
        """A number that changes when another connection commits to the database (PRAGMA data_version).

        Cheap (no I/O beyond the WAL index): the daemon compares it with the value it saw last to learn
        that a CLI command changed something. Commits made through this Store do not change it."""
        return self._conn.execute("PRAGMA data_version").fetchone()[0]

    # -- transactions ------------------------------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator["Store"]:
        """BEGIN IMMEDIATE ... COMMIT; ROLLBACK if the block raises. Nested use is a savepoint."""
        conn = self._conn
        if conn.in_transaction:
            self._savepoints += 1
            name = f"leasewise_sp{self._savepoints}"
            conn.execute(f"SAVEPOINT {name}")
            try:
                yield self
            except BaseException:
                conn.execute(f"ROLLBACK TO {name}")
                conn.execute(f"RELEASE {name}")
                raise
            conn.execute(f"RELEASE {name}")
            return
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise self._busy(exc) from None
        try:
            yield self
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise self._busy(exc) from None

    @contextmanager
    def snapshot(self) -> Iterator["Store"]:
        """A read-only view: every query inside sees one snapshot, and writers are not blocked."""
        with self._read():
            yield self

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """Several queries seeing one snapshot (a deferred read transaction unless one is open already)."""
        conn = self._conn
        if conn.in_transaction:
            yield conn
            return
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")

    def _busy(self, exc: sqlite3.OperationalError) -> Exception:
        if _is_busy(exc):
            return StoreBusy(self.path, f"busy: another process holds the write lock ({_sqlite_message(exc)})")
        return exc

    # -- meta --------------------------------------------------------------------------------------------------
    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None else json.loads(row[0])

    def set_meta(self, key: str, value: Any) -> None:
        with self.transaction():
            self._conn.execute("INSERT INTO meta (key, value) VALUES (?, ?) "
                               "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, _json(value)))

    def next_lease_id(self) -> int:
        """Allocate a lease id no other process gets: one UPDATE ... RETURNING under the write lock, never
        below an id already stored."""
        sql = ("UPDATE meta SET value = max(CAST(value AS INTEGER), "
               "(SELECT coalesce(max(id), 0) + 1 FROM leases)) + 1 "
               "WHERE key = 'next_lease_id' RETURNING CAST(value AS INTEGER) - 1")
        with self.transaction():
            rows = self._conn.execute(sql).fetchall()
            if not rows:   # the row was deleted by hand: start again from the stored leases
                self._conn.execute("INSERT INTO meta (key, value) VALUES ('next_lease_id', '1')")
                rows = self._conn.execute(sql).fetchall()
        return int(rows[0][0])

    def max_reservation_id(self) -> int:
        """The largest reservation id stored: a new slot table must hand out ids above it."""
        return self._conn.execute("SELECT coalesce(max(id), 0) FROM reservations").fetchone()[0]

    # -- hosts ----------------------------------------------------------------------------------------------------
    def add_host(self, config: HostConfig, vcpus: int, memory_mib: int, *, available: bool = True,
                 at: datetime | None = None) -> HostRecord:
        name = config.name
        record = HostRecord(config=config, vcpus=_capacity(vcpus, "vcpus", name),
                            memory_mib=_capacity(memory_mib, "memory_mib", name), available=bool(available),
                            added_at=as_utc(at, "added_at") if at is not None else datetime.now(UTC))
        values = (name, config.uri, config.domain_type, config.ssh, config.ssh_key, config.known_hosts,
                  config.migration_uri, config.state_dir, _json(list(config.shared_storage)), record.vcpus,
                  record.memory_mib, int(record.available), _t(record.added_at), None, config.network,
                  config.network_type, config.disk_dir, config.peer_uri)
        self._insert_new("hosts", _HOST_COLUMNS, values, f"host {name!r}")
        return record

    def _insert_new(self, table: str, columns: tuple[str, ...], values: tuple, what: str) -> None:
        """One row into `table`; `StoreError` "WHAT already exists" when its key is taken."""
        with self.transaction():
            try:
                self._conn.execute(f"INSERT INTO {table} ({', '.join(columns)}) "
                                   f"VALUES ({', '.join('?' * len(columns))})", values)
            except sqlite3.IntegrityError:
                raise StoreError(f"{what} already exists") from None

    def _update_host(self, name: str, sql: str, params: tuple) -> None:
        with self.transaction():
            if self._conn.execute(f"UPDATE hosts SET {sql} WHERE name = ?", (*params, name)).rowcount == 0:
                raise StoreError(f"no host named {name!r}")

    def update_host_capacity(self, name: str, vcpus: int, memory_mib: int) -> None:
        self._update_host(name, "vcpus = ?, memory_mib = ?",
                          (_capacity(vcpus, "vcpus", name), _capacity(memory_mib, "memory_mib", name)))

    def set_host_available(self, name: str, available: bool, since: datetime | None = None) -> None:
        """Mark a host (un)available to leases; `since`: from when (a drain), kept until it is available again."""
        since = as_utc(since, "since") if since is not None and not available else None
        self._update_host(name, "available = ?, unavailable_from = ?", (int(bool(available)), _t(since)))

    def remove_host(self, name: str) -> None:
        """Forget a host. Does not look at reservations: the caller refuses to remove a host in use."""
        with self.transaction():
            if self._conn.execute("DELETE FROM hosts WHERE name = ?", (name,)).rowcount == 0:
                raise StoreError(f"no host named {name!r}")

    def hosts(self) -> list[HostRecord]:
        """Every host, in the order they were added."""
        rows = self._conn.execute(f"SELECT {', '.join(_HOST_COLUMNS)} FROM hosts ORDER BY rowid").fetchall()
        return [self._host(row) for row in rows]

    def host(self, name: str) -> HostRecord:
        row = self._conn.execute(f"SELECT {', '.join(_HOST_COLUMNS)} FROM hosts WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise StoreError(f"no host named {name!r}")
        return self._host(row)

    def _host(self, row: tuple) -> HostRecord:
        (name, uri, domain_type, ssh, ssh_key, known_hosts, migration_uri, state_dir, shared, vcpus, memory,
         available, added_at, unavailable_from, network, network_type, disk_dir, peer_uri) = row
        try:
            config = HostConfig(name=name, uri=uri, domain_type=domain_type, ssh=ssh, ssh_key=ssh_key,
                                known_hosts=known_hosts, migration_uri=migration_uri, state_dir=state_dir,
                                shared_storage=tuple(json.loads(shared)), network=network,
                                network_type=network_type, disk_dir=disk_dir, peer_uri=peer_uri)
        except LeasewiseError as exc:
            raise StoreError(f"{self.path}: host {name!r} is invalid in the store: {exc}") from None
        return HostRecord(config=config, vcpus=vcpus, memory_mib=memory, available=bool(available),
                          added_at=_dt(added_at), unavailable_from=_dt(unavailable_from))

    # -- images ---------------------------------------------------------------------------------------------------
    def add_image(self, image: CatalogImage) -> CatalogImage:
        """Catalogue a base image; `StoreError` if the name is taken."""
        added = image if image.added_at is not None else replace(image, added_at=datetime.now(UTC))
        values = tuple(getattr(added, c) for c in _IMAGE_COLUMNS)
        values = (*values[:9], _t(added.added_at), added.added_by)
        self._insert_new("images", _IMAGE_COLUMNS, values, f"image {image.name!r}")
        return added

    def images(self) -> list[CatalogImage]:
        rows = self._conn.execute(f"SELECT {', '.join(_IMAGE_COLUMNS)} FROM images ORDER BY name").fetchall()
        return [self._image(row) for row in rows]

    def image(self, name: str) -> CatalogImage:
        row = self._conn.execute(f"SELECT {', '.join(_IMAGE_COLUMNS)} FROM images WHERE name = ?",
                                 (name,)).fetchone()
        if row is None:
            raise StoreError(f"no image named {name!r}")
        return self._image(row)

    def _image(self, row: tuple) -> CatalogImage:
        values = dict(zip(_IMAGE_COLUMNS, row))
        values["added_at"] = _dt(values["added_at"])
        try:
            return CatalogImage(**values)
        except LeasewiseError as exc:
            raise StoreError(f"{self.path}: image {values['name']!r} is invalid in the store: {exc}") from None

    def leases_using_image(self, name: str) -> list[int]:
        """The leases not yet in a final state that boot the catalogued image `name`."""
        final = tuple(s.value for s in FINAL_STATES)
        rows = self._conn.execute(
            f"SELECT id FROM leases WHERE json_extract(image, '$.name') = ? "
            f"AND state NOT IN ({', '.join('?' * len(final))}) ORDER BY id", (name, *final)).fetchall()
        return [r[0] for r in rows]

    def remove_image(self, name: str) -> None:
        """Forget a catalogued image (the file stays); refused while a lease still uses it."""
        with self.transaction():
            users = self.leases_using_image(name)
            if users:
                raise StoreError(f"image {name!r} is used by lease{'s' if len(users) > 1 else ''} "
                                 f"{', '.join(map(str, users))}")
            if self._conn.execute("DELETE FROM images WHERE name = ?", (name,)).rowcount == 0:
                raise StoreError(f"no image named {name!r}")

    def allocate_macs(self, count: int) -> tuple[str, ...]:
        """`count` MAC addresses no other VM of this store was given (a counter under the write lock)."""
        if count <= 0:
            return ()
        with self.transaction():
            row = self._conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + ? WHERE key = 'next_mac' "
                                     "RETURNING CAST(value AS INTEGER) - ?", (count, count)).fetchone()
            if row is None:
                self._conn.execute("INSERT INTO meta (key, value) VALUES ('next_mac', ?)", (str(count),))
                row = (0,)
        first = int(row[0])
        if first + count > MAC_COUNT:
            raise StoreError("no MAC addresses left under 52:54:00 (16,777,216 handed out)")
        return tuple(mac_address(first + i) for i in range(count))

    # -- quotas ---------------------------------------------------------------------------------------------------
    def set_quota(self, subject: str, quota: Quota, at: datetime | None = None) -> None:
        """Set (replace) the limits of a user (`alice`) or a group (`@lab`)."""
        check_subject(subject)
        values = (subject, quota.vcpus, quota.memory_mib, quota.vms, _secs(quota.max_duration),
                  _secs(quota.max_ahead), _t(as_utc(at, "at") if at is not None else datetime.now(UTC)))
        with self.transaction():
            self._conn.execute(f"INSERT INTO quotas ({', '.join(_QUOTA_COLUMNS)}, set_at) VALUES (?, ?, ?, ?, ?, ?, ?) "
                               "ON CONFLICT (subject) DO UPDATE SET "
                               + ", ".join(f"{c} = excluded.{c}" for c in (*_QUOTA_COLUMNS[1:], "set_at")), values)

    def quota(self, subject: str) -> Quota | None:
        row = self._conn.execute(f"SELECT {', '.join(_QUOTA_COLUMNS)} FROM quotas WHERE subject = ?",
                                 (subject,)).fetchone()
        return None if row is None else self._quota(row)

    def quotas(self) -> dict[str, Quota]:
        """subject -> its quota, users and groups, by subject."""
        rows = self._conn.execute(f"SELECT {', '.join(_QUOTA_COLUMNS)} FROM quotas ORDER BY subject").fetchall()
        return {row[0]: self._quota(row) for row in rows}

    def quota_set_at(self, subject: str) -> datetime | None:
        row = self._conn.execute("SELECT set_at FROM quotas WHERE subject = ?", (subject,)).fetchone()
        return None if row is None else _dt(row[0])

    def remove_quota(self, subject: str) -> None:
        with self.transaction():
            if self._conn.execute("DELETE FROM quotas WHERE subject = ?", (subject,)).rowcount == 0:
                raise StoreError(f"no quota for {subject!r}")

    def _quota(self, row: tuple) -> Quota:
        subject, vcpus, memory, vms, duration, ahead = row
        try:
            return Quota(vcpus=vcpus, memory_mib=memory, vms=vms, max_duration=_td(duration), max_ahead=_td(ahead))
        except LeasewiseError as exc:
            raise StoreError(f"{self.path}: the quota of {subject!r} is invalid in the store: {exc}") from None

    # -- tokens ---------------------------------------------------------------------------------------------------
    def add_token(self, user: str, *, salt: bytes, hash: bytes, created_at: datetime, admin: bool = False,
                  expires_at: datetime | None = None, note: str = "") -> TokenRecord:
        """Store a new token's hash; its id comes back in the record (`orchestrator.state.tokens` makes it)."""
        if not isinstance(user, str) or not user:
            raise StoreError(f"a token needs a user (got {user!r})")
        created = as_utc(created_at, "created_at")
        expires = None if expires_at is None else as_utc(expires_at, "expires_at")
        with self.transaction():
            cur = self._conn.execute(
                "INSERT INTO tokens (user, admin, salt, hash, created_at, expires_at, note) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (user, int(bool(admin)), bytes(salt), bytes(hash), _t(created), _t(expires), note))
        return self.token(cur.lastrowid)

    def token(self, token_id: int) -> TokenRecord | None:
        row = self._conn.execute(f"SELECT {', '.join(_TOKEN_COLUMNS)} FROM tokens WHERE id = ?",
                                 (token_id,)).fetchone()
        return None if row is None else self._token(row)

    def tokens(self, user: str | None = None) -> list[TokenRecord]:
        """Every token (or `user`'s), by id, revoked and expired ones included."""
        where, params = ("WHERE user = ?", (user,)) if user is not None else ("", ())
        rows = self._conn.execute(f"SELECT {', '.join(_TOKEN_COLUMNS)} FROM tokens {where} ORDER BY id",
                                  params).fetchall()
        return [self._token(row) for row in rows]

    def revoke_token(self, token_id: int, at: datetime) -> TokenRecord:
        """Revoke a token from `at` on; one revoked already keeps its first revocation time."""
        with self.transaction():
            if self._conn.execute("UPDATE tokens SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?",
                                  (_t(as_utc(at, "at")), token_id)).rowcount == 0:
                raise StoreError(f"no token with id {token_id}")
            return self.token(token_id)

    def touch_token(self, token_id: int, at: datetime) -> None:
        """Record that the token was just used."""
        with self.transaction():
            if self._conn.execute("UPDATE tokens SET last_used_at = ? WHERE id = ?",
                                  (_t(as_utc(at, "at")), token_id)).rowcount == 0:
                raise StoreError(f"no token with id {token_id}")

    @staticmethod
    def _token(row: tuple) -> TokenRecord:
        v = dict(zip(_TOKEN_COLUMNS, row))
        return TokenRecord(id=v["id"], user=v["user"], admin=bool(v["admin"]), created_at=_dt(v["created_at"]),
                           expires_at=_dt(v["expires_at"]), revoked_at=_dt(v["revoked_at"]),
                           last_used_at=_dt(v["last_used_at"]), note=v["note"], salt=bytes(v["salt"]),
                           hash=bytes(v["hash"]))

    # -- leases ---------------------------------------------------------------------------------------------------
    def save_lease(self, lease: Lease, workload_id: str | None = None) -> None:
        """Write the lease, append its history entries not stored yet, and replace its reservations with
        its current plan. `workload_id` None keeps the one stored before."""
        req = lease.request
        request_values = request_row(req)
        state_values = _state_row(lease)
        conn = self._conn
        with self.transaction():
            stored = conn.execute(f"SELECT {', '.join(map(_q, _REQUEST_COLUMNS))} FROM leases WHERE id = ?",
                                  (lease.id,)).fetchone()
            if stored is None:
                conn.execute(f"INSERT INTO leases ({', '.join(map(_q, _LEASE_COLUMNS))}) "
                             f"VALUES ({', '.join('?' * len(_LEASE_COLUMNS))})",
                             (lease.id, workload_id, *request_values, *state_values))
            else:
                # the duration may grow (`lease extend`); anything else differing means an id clash
                changed = [c for c, a, b in zip(_REQUEST_COLUMNS, stored, request_values)
                           if c != "duration_s"
                           and (json.loads(a) if c in _JSON_REQUEST_COLUMNS and a else a)
                           != (json.loads(b) if c in _JSON_REQUEST_COLUMNS and b else b)]
                if changed:
                    raise StoreError(f"lease {lease.id} is already stored with a different request "
                                     f"({', '.join(changed)} differ): two leases were given the same id")
                conn.execute(f"UPDATE leases SET workload_id = coalesce(?, workload_id), duration_s = ?, "
                             f"{', '.join(f'{_q(c)} = ?' for c in _STATE_COLUMNS)} WHERE id = ?",
                             (workload_id, _secs(req.duration), *state_values, lease.id))
            self._append_history(lease)
            self._replace_reservations(lease)

    def _append_history(self, lease: Lease) -> None:
        conn = self._conn
        count, = conn.execute("SELECT count(*) FROM lease_states WHERE lease_id = ?", (lease.id,)).fetchone()
        history = lease.history
        if count > len(history):
            raise StoreError(f"lease {lease.id}: the store has {count} history entries, this copy only "
                             f"{len(history)} (another process saved a newer version)")
        if count:
            last = conn.execute("SELECT time, state FROM lease_states WHERE lease_id = ? AND seq = ?",
                                (lease.id, count - 1)).fetchone()
            at, state = history[count - 1]
            if last != (_t(at), state.value):
                raise StoreError(f"lease {lease.id}: history entry {count - 1} differs from the stored one "
                                 f"({last[1]} at {last[0]} stored, {state.value} at {_t(at)} here)")
        conn.executemany("INSERT INTO lease_states (lease_id, seq, time, state) VALUES (?, ?, ?, ?)",
                         [(lease.id, seq, _t(at), state.value)
                          for seq, (at, state) in enumerate(history[count:], start=count)])

    def _replace_reservations(self, lease: Lease) -> None:
        conn = self._conn
        rows = plan_rows(lease)
        seen = {row[0] for row in rows}
        conn.execute("DELETE FROM reservations WHERE lease_id = ?", (lease.id,))
        try:
            conn.executemany(f"INSERT INTO reservations ({', '.join(map(_q, _RR_COLUMNS))}) "
                             f"VALUES ({', '.join('?' * len(_RR_COLUMNS))})", rows)
        except sqlite3.IntegrityError:
            clash = conn.execute(
                f"SELECT id, lease_id FROM reservations WHERE lease_id != ? AND id IN "
                f"({', '.join('?' * len(seen))}) LIMIT 1", (lease.id, *seen)).fetchone()
            if clash is not None:
                raise StoreError(f"lease {lease.id}: reservation id {clash[0]} is already used by lease "
                                 f"{clash[1]} (seed the slot table above max_reservation_id())") from None
            raise

    def load_leases(self) -> list[Lease]:
        """Every lease, rebuilt with its request, state, history, counters and plan, by id."""
        return self._load_leases("", ())

    def lease(self, lease_id: int) -> Lease:
        found = self._load_leases("WHERE id = ?", (lease_id,))
        if not found:
            raise StoreError(f"no lease with id {lease_id}")
        return found[0]

    def leases(self, state: LeaseState | str | Iterable[LeaseState | str] | None = None,
               user: str | None = None) -> list[Lease]:
        """Leases in `state` (one or several) and/or of `user`, by id."""
        clauses, params = [], []
        if state is not None:
            states = [state] if isinstance(state, str) else list(state)
            values = [LeaseState(s).value for s in states]
            clauses.append(f"state IN ({', '.join('?' * len(values))})")
            params.extend(values)
        if user is not None:
            clauses.append("user = ?")
            params.append(user)
        return self._load_leases(f"WHERE {' AND '.join(clauses)}" if clauses else "", tuple(params))

    def unreleased_leases(self, skip: Iterable[int] = ()) -> list[Lease]:
        """Finished leases whose leftovers on the hosts (VMs, memory images, disks) are not cleaned up yet
        (but those in `skip`: their cleanup is under way, so they are not read at all)."""
        final = tuple(s.value for s in FINAL_STATES)
        where = f"WHERE released = 0 AND state IN ({', '.join('?' * len(final))})"
        skip = set(skip)
        if skip:
            ids = [i for (i,) in self._conn.execute(f"SELECT id FROM leases {where}", final) if i not in skip]
            if not ids:
                return []
            return self._load_leases(f"WHERE id IN ({', '.join('?' * len(ids))})", tuple(ids))
        return self._load_leases(where, final)

    def lease_records(self, state: Iterable[str] | None = None, user: str | None = None) -> list[dict[str, Any]]:
        """Leases as `orchestrator.state.codec` sends them, straight from their rows (no `Lease` is built:
        the server lists many leases often)."""
        where, params = _lease_filter(state, user)
        rows, history, plan, rates = self._lease_rows(where, params)
        out = {row[0]: {"row": list(row), "history": [], "plan": [], "dirty_rates": {}} for row in rows}
        for lease_id, at, st in history:
            out[lease_id]["history"].append([at, st])
        for rr in plan:
            out[rr[1]]["plan"].append(list(rr))
        for lease_id, vnode, mib_s in rates:
            out[lease_id]["dirty_rates"][str(vnode)] = mib_s
        return list(out.values())

    def lease_records_json(self, state: Iterable[str] | None = None, user: str | None = None) -> str:
        """`lease_records` encoded as one JSON array, made by SQLite: the server lists many leases often, and
        SQLite builds the text without holding the GIL, so a list does not slow down whoever holds the
        scheduler's lock. Decoded, it equals `lease_records` (reals are written with 17 digits, which read
        back as the same float)."""
        where, params = _lease_filter(state, user, "l.")
        row = ", ".join(_json_value(f"l.{_q(c)}") for c in _LEASE_COLUMNS)
        plan = ", ".join(_json_value(f"r.{_q(c)}") for c in _RR_COLUMNS)
        # each part's rows in the order `lease_records` gives them (ordered subqueries: SQLite 3.40 has no
        # ORDER BY inside an aggregate); the parts joined as text, which SQLite would otherwise parse again
        query = (
            "SELECT '[' || coalesce(group_concat(record, ','), '') || ']' FROM (SELECT "
            f"'{{\"row\":' || json_array({row}) || "
            "',\"history\":' || (SELECT json_group_array(json_array(h.time, h.state)) FROM "
            "(SELECT time, state FROM lease_states WHERE lease_id = l.id ORDER BY seq) AS h) || "
            f"',\"plan\":' || (SELECT json_group_array(json_array({plan})) FROM "
            "(SELECT * FROM reservations WHERE lease_id = l.id ORDER BY position) AS r) || "
            "',\"dirty_rates\":' || (SELECT json_group_object(CAST(d.vnode AS TEXT), "
            f"{_json_value('d.mib_s')}) FROM dirty_rates AS d WHERE d.lease_id = l.id) || '}}'"
            f" AS record FROM leases AS l {where} ORDER BY l.id)")
        with self._read() as conn:
            return conn.execute(query, params).fetchone()[0]

    def lease_states(self, ids: Iterable[int]) -> dict[int, tuple[LeaseState, bool]]:
        """id -> (state, released) of these leases (those the store has), without loading them whole."""
        ids = sorted(set(ids))
        if not ids:
            return {}
        rows = self._conn.execute(f"SELECT id, state, released FROM leases WHERE id IN ({', '.join('?' * len(ids))})",
                                  tuple(ids)).fetchall()
        return {i: (LeaseState(state), bool(released)) for i, state, released in rows}

    def mark_released(self, lease_id: int) -> None:
        with self.transaction():
            self._conn.execute("UPDATE leases SET released = 1 WHERE id = ?", (lease_id,))

    def record_dirty_rate(self, lease_id: int, vnode: int, at: datetime, mib_s: float) -> None:
        """The dirty rate just measured on a lease's VM (replaces the one measured before)."""
        if not (isinstance(mib_s, (int, float)) and math.isfinite(mib_s) and mib_s >= 0):
            raise StoreError(f"dirty rate of lease {lease_id} VM {vnode} must be a finite number >= 0 (got {mib_s!r})")
        with self.transaction():
            self._conn.execute("INSERT INTO dirty_rates (lease_id, vnode, measured_at, mib_s) VALUES (?, ?, ?, ?) "
                               "ON CONFLICT (lease_id, vnode) DO UPDATE SET measured_at = excluded.measured_at, "
                               "mib_s = excluded.mib_s", (lease_id, vnode, _t(at), float(mib_s)))

    def dirty_rates(self, lease_id: int) -> dict[int, tuple[datetime, float]]:
        """vnode -> (when, MiB/s) of the last dirty rate measured on each of the lease's VMs."""
        rows = self._conn.execute("SELECT vnode, measured_at, mib_s FROM dirty_rates WHERE lease_id = ? "
                                  "ORDER BY vnode", (lease_id,))
        return {vnode: (_dt(at), rate) for vnode, at, rate in rows}

    # -- end-of-lease notices -----------------------------------------------------------------------------------
    def claimed_notices(self, lease_ids: Iterable[int]) -> set[tuple[int, str, str]]:
        """(lease id, key, notifier) of every notice already claimed for these leases, whatever its outcome."""
        ids = sorted(set(lease_ids))
        found: set[tuple[int, str, str]] = set()
        with self._read() as conn:
            for i in range(0, len(ids), 500):   # (SQLite's limit on bound parameters)
                chunk = ids[i:i + 500]
                found.update(conn.execute(f"SELECT lease_id, key, notifier FROM notices WHERE lease_id IN "
                                          f"({', '.join('?' * len(chunk))})", chunk).fetchall())
        return found

    def claim_notices(self, wanted: Iterable[tuple[int, str, str]], at: datetime) -> list[tuple[int, str, str]]:
        """Claim (lease id, key, notifier) notices before sending them, in one transaction; returns those
        this call claimed (a row already there, claimed by an earlier step or another process, is left)."""
        claimed = []
        with self.transaction():
            for lease_id, key, notifier in wanted:
                cur = self._conn.execute("INSERT INTO notices (lease_id, key, notifier, sent_at) VALUES (?, ?, ?, ?) "
                                         "ON CONFLICT DO NOTHING", (lease_id, key, notifier, _t(at)))
                if cur.rowcount:
                    claimed.append((lease_id, key, notifier))
        return claimed

    def unannounced_ended_leases(self, since: datetime, states: Iterable[LeaseState]) -> list[Lease]:
        """Leases in one of `states` (final ones) that ended after `since` and have no `ended`
        notice claimed yet: those ended by another process or just before a crash are found here."""
        values = [LeaseState(s).value for s in states]
        where = (f"WHERE end_time > ? AND state IN ({', '.join('?' * len(values))}) "
                 "AND id NOT IN (SELECT lease_id FROM notices WHERE key = 'ended')")
        return self._load_leases(where, (_t(since), *values))

    def record_notice_outcomes(self, outcomes: Mapping[tuple[int, str, str], str]) -> None:
        """The outcome ("sent", "failed: why") of claimed notices, in one transaction."""
        with self.transaction():
            self._conn.executemany("UPDATE notices SET outcome = ? WHERE lease_id = ? AND key = ? AND notifier = ?",
                                   [(outcome, *row) for row, outcome in outcomes.items()])

    def notices(self, lease_id: int | None = None) -> list[NoticeRecord]:
        """The notices claimed so far (for one lease, or all), by lease, time, key and notifier."""
        where, params = ("WHERE lease_id = ?", (lease_id,)) if lease_id is not None else ("", ())
        rows = self._conn.execute(f"SELECT lease_id, key, notifier, sent_at, outcome FROM notices {where} "
                                  f"ORDER BY lease_id, sent_at, key, notifier", params).fetchall()
        return [NoticeRecord(l, k, n, _dt(t), o) for l, k, n, t, o in rows]

    def workload_ids(self) -> dict[int, str]:
        """lease id -> the workload id it was saved with (only leases that have one)."""
        rows = self._conn.execute("SELECT id, workload_id FROM leases WHERE workload_id IS NOT NULL")
        return {i: w for i, w in rows}

    def _lease_rows(self, where: str, params: Sequence) -> tuple[list, list, list, list]:
        """The rows of the leases `where` picks, of their state histories, plans and dirty rates, in one read
        (each by lease id, then in its order)."""
        select = f"SELECT id FROM leases {where}"
        with self._read() as conn:
            leases = conn.execute(f"SELECT {', '.join(map(_q, _LEASE_COLUMNS))} FROM leases {where} ORDER BY id",
                                  params).fetchall()
            history = conn.execute(f"SELECT lease_id, time, state FROM lease_states WHERE lease_id IN ({select}) "
                                   f"ORDER BY lease_id, seq", params).fetchall()
            plan = conn.execute(f"SELECT {', '.join(map(_q, _RR_COLUMNS))} FROM reservations WHERE lease_id IN "
                                f"({select}) ORDER BY lease_id, position", params).fetchall()
            rates = conn.execute(f"SELECT lease_id, vnode, mib_s FROM dirty_rates WHERE lease_id IN ({select})",
                                 params).fetchall()
        return leases, history, plan, rates

    def _load_leases(self, where: str, params: tuple) -> list[Lease]:
        lease_rows, history_rows, rr_rows, rate_rows = self._lease_rows(where, params)
        histories: dict[int, list[tuple[datetime, LeaseState]]] = {}
        for lease_id, at, state in history_rows:
            histories.setdefault(lease_id, []).append((_dt(at), LeaseState(state)))
        plans: dict[int, list[tuple]] = {}
        for row in rr_rows:
            plans.setdefault(row[1], []).append(row)
        rates: dict[int, dict[int, float]] = {}
        for lease_id, vnode, mib_s in rate_rows:
            rates.setdefault(lease_id, {})[vnode] = mib_s
        leases = []
        for row in lease_rows:
            lease_id = row[0]
            try:
                lease = _lease_from_row(row)
                lease.history = histories.get(lease_id, [])
                lease.reservations = _plan_from_rows(plans.get(lease_id, []))
                lease.measured_dirty_rates = rates.get(lease_id, {})
            except (LeasewiseError, ValueError, KeyError, TypeError) as exc:
                raise StoreError(f"{self.path}: lease {lease_id} cannot be read back: {exc}") from None
            leases.append(lease)
        return leases

    # -- the intent log -------------------------------------------------------------------------------------------
    def add_operation(self, at: datetime, operation: str, lease_id: int | None, reservation_id: int | None,
                      hosts: Iterable[str]) -> int:
        """Record an operation about to run on the hosts; returns its id (see `_V6`)."""
        with self.transaction():
            cur = self._conn.execute(
                "INSERT INTO operations (lease_id, operation, reservation_id, hosts, created_at) VALUES (?, ?, ?, ?, ?)",
                (lease_id, operation, reservation_id, _json(sorted(hosts)), _t(at)))
        return cur.lastrowid

    def finish_operation(self, operation_id: int, at: datetime, outcome: str, error: str | None = None) -> None:
        if outcome not in ("done", "failed", "abandoned"):
            raise StoreError(f"operation {operation_id}: outcome must be done, failed or abandoned (got {outcome!r})")
        with self.transaction():
            self._conn.execute("UPDATE operations SET finished_at = ?, outcome = ?, error = ? WHERE id = ?",
                               (_t(at), outcome, error, operation_id))

    def unfinished_operations(self) -> list[OperationRecord]:
        """Operations recorded as about to run that never ended (the process stopped meanwhile), oldest first."""
        rows = self._conn.execute("SELECT id, lease_id, operation, reservation_id, hosts, created_at FROM operations "
                                  "WHERE finished_at IS NULL ORDER BY id").fetchall()
        return [OperationRecord(i, l, o, r, tuple(json.loads(h)), _dt(c)) for i, l, o, r, h, c in rows]

    def operations(self, lease_id: int | None = None) -> list[OperationRecord]:
        where, params = ("WHERE lease_id = ?", (lease_id,)) if lease_id is not None else ("", ())
        rows = self._conn.execute(f"SELECT id, lease_id, operation, reservation_id, hosts, created_at, finished_at, "
                                  f"outcome, error FROM operations {where} ORDER BY id", params).fetchall()
        return [OperationRecord(i, l, o, r, tuple(json.loads(h)), _dt(c), _dt(f), out, e)
                for i, l, o, r, h, c, f, out, e in rows]

    # -- events ---------------------------------------------------------------------------------------------------
    def append_event(self, time: datetime, kind: str, lease_id: int | None = None, **detail: Any) -> int:
        """Append to the event log (planned, enacted, failed, driver-report, reconciled, ...); returns its id."""
        if not isinstance(kind, str) or not kind.strip():
            raise StoreError(f"event kind must be a non-empty string (got {kind!r})")
        try:
            text = _json(detail)
        except (TypeError, ValueError) as exc:
            raise StoreError(f"event {kind!r}: detail is not JSON data ({exc})") from None
        with self.transaction():
            cur = self._conn.execute("INSERT INTO events (time, lease_id, kind, detail) VALUES (?, ?, ?, ?)",
                                     (_t(time), lease_id, kind, text))
        return cur.lastrowid

    def events(self, lease_id: int | None = None, since: datetime | None = None,
               after_id: int | None = None) -> list[Event]:
        """Events in the order they were appended; `since` keeps those at or after a time, `after_id`
        those appended after the event with that id (for following the log)."""
        clauses, params = [], []
        if lease_id is not None:
            clauses.append("lease_id = ?")
            params.append(lease_id)
        if since is not None:
            clauses.append("time >= ?")
            params.append(_t(since))
        if after_id is not None:
            clauses.append("id > ?")
            params.append(after_id)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._conn.execute(f"SELECT id, time, kind, lease_id, detail FROM events {where} ORDER BY id",
                                  params).fetchall()
        return [Event(id=i, time=_dt(t), kind=k, lease_id=l, detail=json.loads(d)) for i, t, k, l, d in rows]


# -- rows: a lease as the store keeps it (also its form on the wire: orchestrator.state.codec) ------------------
def request_row(req: LeaseRequest) -> tuple:
    """The request's values in `_REQUEST_COLUMNS` order (JSON text for the JSON columns)."""
    return (
        req.name, req.user, req.type.value, int(req.preemptible), _json([_res(n) for n in req.nodes]),
        _secs(req.duration), _t(req.start), _t(req.submit_time),
        None if req.image is None else _json(_image_dict(req.image)),
        req.dirty_rate_mib_s, _secs(req.real_duration),
        None if req.guest is None else _json(req.guest.as_dict()),
    )


def _state_row(lease: Lease) -> tuple:
    return (
        lease.state.value, _secs(lease.accumulated), lease.reason, lease.suspensions, lease.migrations,
        lease.requeues, _t(lease.start_time), _t(lease.end_time),
    )


def lease_row(lease: Lease, workload_id: str | None = None) -> tuple:
    """The lease's values in `_LEASE_COLUMNS` order."""
    return (lease.id, workload_id, *request_row(lease.request), *_state_row(lease))


def plan_rows(lease: Lease) -> list[tuple]:
    """The lease's plan, one row per reservation in `_RR_COLUMNS` order, in plan order; refuses a plan that
    could not be read back (a part without an id, an id twice, a part of another lease)."""
    rows = []
    position = 0
    seen: set[int] = set()
    for vm in lease.reservations:
        for part in vm.all_parts():
            if not part.id:
                raise StoreError(f"lease {lease.id}: a {part.kind.value} reservation has no id "
                                 f"(it never went through the slot table)")
            if part.id in seen:
                raise StoreError(f"lease {lease.id}: reservation id {part.id} appears twice in its plan")
            if part.lease_id != lease.id:
                raise StoreError(f"lease {lease.id}: reservation {part.id} belongs to lease {part.lease_id}")
            seen.add(part.id)
            rows.append((part.id, lease.id, part.kind.value, _t(part.start), _t(part.end), part.state.value,
                         _json({h: _res(r) for h, r in part.resources.items()}),
                         _json({str(v): h for v, h in part.nodes.items()}),
                         _json({str(v): list(t) for v, t in part.transfers.items()}),
                         None if part is vm else vm.id, position, _t(part.premature_end),
                         int(part.continues), _json(part.extra)))
            position += 1
    return rows


def lease_from_rows(row: Sequence, history: Sequence[tuple[str, str]], plan: list[tuple],
                    dirty_rates: Mapping[int, float] | None = None) -> Lease:
    """A lease rebuilt from `lease_row`, its history as (time, state) texts and `plan_rows`."""
    lease = _lease_from_row(tuple(row))
    lease.history = [(_dt(at), LeaseState(state)) for at, state in history]
    lease.reservations = _plan_from_rows([tuple(r) for r in plan])
    lease.measured_dirty_rates = dict(dirty_rates or {})
    return lease


def history_rows(lease: Lease) -> list[tuple[str, str]]:
    return [(_t(at), state.value) for at, state in lease.history]


# -- rebuilding -----------------------------------------------------------------------------------------------
def _image_dict(image: VMImage) -> dict[str, Any]:
    found = {"disk": image.disk, "size_mib": image.size_mib, "kernel": image.kernel, "initrd": image.initrd,
             "cmdline": image.cmdline}
    # the catalogue's fields only when set, so leases stored before them compare equal
    found.update({k: v for k in ("name", "format", "login_user") if (v := getattr(image, k)) is not None})
    return found


def _lease_from_row(row: tuple) -> Lease:
    values = dict(zip(_LEASE_COLUMNS, row))
    image = values["image"]
    request = LeaseRequest(
        type=LeaseType(values["type"]),
        nodes=tuple(_unres(n) for n in json.loads(values["nodes"])),
        duration=_td(values["duration_s"]),
        submit_time=_dt(values["submit_time"]),
        start=_dt(values["start"]),
        preemptible=bool(values["preemptible"]),
        real_duration=_td(values["real_duration_s"]),
        image=None if image is None else VMImage(**json.loads(image)),
        user=values["user"],
        name=values["name"],
        dirty_rate_mib_s=values["dirty_rate"],
        guest=None if values["guest"] is None else GuestSetup.from_dict(json.loads(values["guest"])),
    )
    return Lease(
        id=values["id"], request=request, state=LeaseState(values["state"]),
        accumulated=_td(values["accumulated_s"]), start_time=_dt(values["start_time"]),
        end_time=_dt(values["end_time"]), reason=values["reason"], suspensions=values["suspensions"],
        requeues=values["requeues"], migrations=values["migrations"],
    )


def _plan_from_rows(rows: list[tuple]) -> list[Reservation]:
    """VM reservations in plan order, each with its pre (parts placed before it) and post (after it) parts."""
    vms: dict[int, tuple[Reservation, int]] = {}
    order: list[Reservation] = []
    parts: list[tuple[Reservation, int, int]] = []
    for row in rows:
        v = dict(zip(_RR_COLUMNS, row))
        rr = Reservation(
            lease_id=v["lease_id"], kind=ReservationKind(v["kind"]), start=_dt(v["start"]), end=_dt(v["end"]),
            resources={h: _unres(r) for h, r in json.loads(v["resources"]).items()},
            nodes={int(k): h for k, h in json.loads(v["nodes"]).items()},
            transfers={int(k): (t[0], t[1]) for k, t in json.loads(v["transfers"]).items()},
            state=ReservationState(v["state"]), id=v["id"], premature_end=_dt(v["premature_end"]),
            continues=bool(v["continues"]), extra=json.loads(v["extra"]),
        )
        if v["vm_id"] is None:
            vms[rr.id] = (rr, v["position"])
            order.append(rr)
        else:
            parts.append((rr, v["vm_id"], v["position"]))
    for rr, vm_id, position in parts:   # rows come in plan order, so pre and post keep their order
        if vm_id not in vms:
            raise ValueError(f"reservation {rr.id} belongs to VM reservation {vm_id}, which is missing")
        vm, vm_position = vms[vm_id]
        rr.vm = vm
        (vm.pre if position < vm_position else vm.post).append(rr)
    return order


def _sqlite_message(exc: sqlite3.Error) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
