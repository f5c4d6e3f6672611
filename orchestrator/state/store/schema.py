"""The schema of the state database, as migrations.

`MIGRATIONS[i]` moves a database from version i to i + 1 (PRAGMA user_version). Opening an older database
migrates it forward in one transaction; a database newer than this code, or another program's file (PRAGMA
application_id), is refused.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence

from orchestrator.state.store.errors import StoreError

#: PRAGMA application_id of a leasewise state database ("LWST"), so another program's file is refused
APPLICATION_ID = 0x4C575354

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
    # lease submissions' idempotency keys: a retried submission is answered with the lease it made
    """CREATE TABLE submissions (
        user TEXT NOT NULL,
        key TEXT NOT NULL,
        fingerprint TEXT NOT NULL,                        -- sha256 of the submission as sent
        lease_id INTEGER NOT NULL REFERENCES leases (id) ON DELETE CASCADE,
        answer TEXT NOT NULL,                             -- JSON: the answer the first attempt got
        made_at TEXT NOT NULL,
        PRIMARY KEY (user, key)
    ) WITHOUT ROWID""",
    "CREATE INDEX submissions_made_at ON submissions (made_at)",
)

_V10 = (
    # how the other hosts' libvirtd reach a host for a peer-to-peer migration (the inventory's peer_uri)
    "ALTER TABLE hosts ADD COLUMN peer_uri TEXT",
)

_V11 = (
    # where leases may run: each host's properties (JSON object of short names, e.g. {"gpu": "a100"}), and
    # a lease's placement (JSON: its constraints on them, spread or pack, exclusive; NULL: none asked for)
    "ALTER TABLE hosts ADD COLUMN properties TEXT NOT NULL DEFAULT '{}'",
    "ALTER TABLE leases ADD COLUMN placement TEXT",
)

_V12 = (
    # hosts without shared storage: the SHA-256 of each file of an image copied to the hosts' own storage
    # (JSON [[path, sha256], ...]; [] for an image on shared storage), and which hosts hold a copied image
    "ALTER TABLE images ADD COLUMN checksums TEXT NOT NULL DEFAULT '[]'",
    """CREATE TABLE image_hosts (
        image TEXT NOT NULL REFERENCES images (name) ON DELETE CASCADE,
        host TEXT NOT NULL REFERENCES hosts (name) ON DELETE CASCADE,
        how TEXT NOT NULL CHECK (how IN ('copied', 'shared')),   -- copied to it, or read on shared storage
        at TEXT NOT NULL,
        PRIMARY KEY (image, host)
    ) WITHOUT ROWID""",
)

_V13 = (
    # a count of the hosts table's changes, kept by triggers whoever writes it: a connection reads the hosts
    # again only when the count moved (every submission is checked against every host)
    "CREATE TABLE hosts_changes (id INTEGER PRIMARY KEY CHECK (id = 1), count INTEGER NOT NULL)",
    "INSERT INTO hosts_changes VALUES (1, 0)",
    *(f"CREATE TRIGGER hosts_{name} AFTER {what} ON hosts BEGIN UPDATE hosts_changes SET count = count + 1; END"
      for name, what in (("added", "INSERT"), ("changed", "UPDATE"), ("removed", "DELETE"))),
)

_V14 = (
    # memory images copied host to host: the key and known_hosts file (paths on the host) each host copies with
    "ALTER TABLE hosts ADD COLUMN peer_ssh_key TEXT",
    "ALTER TABLE hosts ADD COLUMN peer_known_hosts TEXT",
    # what a running VM's overlay on its host's own storage holds (its allocation), which a block migration
    # copies: measured with its dirty rate, used by the planner in place of live_migration_disk_mib
    """CREATE TABLE disk_allocations (
        lease_id INTEGER NOT NULL REFERENCES leases(id) ON DELETE CASCADE,
        vnode INTEGER NOT NULL,
        measured_at TEXT NOT NULL,
        mib REAL NOT NULL CHECK (mib >= 0),
        PRIMARY KEY (lease_id, vnode)
    )""",
)

#: MIGRATIONS[i] takes a database from schema version i to i + 1. Append only; never edit a released one.
#: Each is a list of SQL statements or a function of the connection; all run inside one transaction
#: (foreign_keys cannot be switched inside it: a migration that rebuilds a table must keep references valid).
MIGRATIONS: list[Migration] = [_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10, _V11, _V12, _V13, _V14]
SCHEMA_VERSION = len(MIGRATIONS)


def apply_migrations(conn: sqlite3.Connection, upto: int = SCHEMA_VERSION) -> int:
    """Bring the database on `conn` (autocommit mode) to version `upto`; returns the version it had.

    Runs in one BEGIN IMMEDIATE transaction, reading the version again once the write lock is held, so two
    processes opening an old database at once migrate it once."""
    current = check_version(conn)
    if current >= upto:   # the usual case: no write lock needed just to open
        return current
    conn.execute("BEGIN IMMEDIATE")
    try:
        current = check_version(conn)
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


def check_version(conn: sqlite3.Connection) -> int:
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

