"""The connection to the state database and its integrity: opening it safely, and transactions.

One database file (`default_store_path()`, or whatever the caller passes) opened by each process with its
own connection (no module-level one). It runs in WAL mode, so readers never block the writer, with a
busy timeout, so two processes writing at once wait for each other instead of failing with "database is
locked" (past it: `StoreBusy`); the file is kept at mode 0600 because it names hosts, users and SSH key
paths.

Opening checks the file once per process (`PRAGMA quick_check`, see `_intact`): a corrupted store is one
error naming the file, never data shown as if nothing were wrong or a traceback half-way through.

Every write runs inside `transaction()` (BEGIN IMMEDIATE ... COMMIT, ROLLBACK on any exception): a crash
between two writes leaves the previous consistent state. Reads that span several queries run in one read
transaction (`snapshot()`), so they see one snapshot even while another process commits.

A commit is on disk before `transaction()` returns: SQLite runs with `synchronous = NORMAL` (no flush inside
COMMIT) and `sync()` flushes the log after it. A caller holding a lock of its own around its transactions
(the server) commits with `durable=False` and calls `sync()` once it has let go of that lock, before it
answers: the next writer goes on while this one waits for the disk, and one flush serves every commit made
meanwhile.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Self

from orchestrator.state.store.errors import StoreBusy, StoreCorrupt, StoreError
from orchestrator.state.store.schema import apply_migrations, check_version

log = logging.getLogger(__name__)

FILE_MODE = 0o600
DIR_MODE = 0o700
BUSY_TIMEOUT_S = 5.0
#: parameters per statement at most (SQLite's limit before 3.32; later versions allow more)
_MAX_PARAMETERS = 999


def _is_busy(exc: sqlite3.Error) -> bool:
    """SQLITE_BUSY / SQLITE_LOCKED, by code where Python gives it, else by SQLite's message."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    message = str(exc)
    return "database is locked" in message or "database is busy" in message or "database table is locked" in message


def _sqlite_message(exc: sqlite3.Error) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


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


SQLITE_HEADER = b"SQLite format 3\x00"


def _own_regular(fd: int, path: Path) -> os.stat_result:
    """The file open on `fd`, refused unless it is a regular file; a file that is not an SQLite database
    (and not empty: a new one) is refused before anything changes it."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        kind = ("a directory" if stat.S_ISDIR(info.st_mode) else "a FIFO" if stat.S_ISFIFO(info.st_mode)
                else "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else "not a file")
        raise StoreError(f"{path}: is {kind}, not a state database")
    if info.st_size > 0 and os.pread(fd, len(SQLITE_HEADER), 0) != SQLITE_HEADER:
        raise StoreError(f"{path}: is not an SQLite database (not a leasewise state database); nothing was changed")
    return info


def _tighten(fd: int, path: Path, info: os.stat_result) -> None:
    """Mode 0600 on a file this process's user owns (another's file is left as it is: it is theirs)."""
    mode = stat.S_IMODE(info.st_mode)
    if mode == FILE_MODE or info.st_uid != os.geteuid():
        return
    if mode & 0o077:
        log.warning("%s: mode was %o, set to 600", path, mode)
    os.fchmod(fd, FILE_MODE)


def _tighten_modes(path: Path, *, wal_only: bool = False) -> None:
    """Mode 0600 on the database and its WAL files (only the WAL files: `wal_only`), by path, never opening
    them (closing a descriptor would drop the POSIX locks SQLite holds in this process), and only on a
    regular file of this user's (`lstat`: a symbolic link there is left alone, not followed)."""
    wal = (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm"))
    for file in wal if wal_only else (path, *wal):
        try:
            info = os.lstat(file)
            if (stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid()
                    and stat.S_IMODE(info.st_mode) != FILE_MODE):
                os.chmod(file, FILE_MODE)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StoreError(f"{file}: cannot set mode 600 ({exc.strerror or exc})") from None


def _secure_file(path: Path) -> None:
    """Create `path` with mode 0600 before SQLite touches it; an existing one must be a regular file holding
    an SQLite database (or nothing) before anything is changed, and is tightened to 0600 when it is this
    user's (its WAL files too)."""
    if not path.parent.exists():
        os.makedirs(path.parent, mode=DIR_MODE, exist_ok=True)
    flags = os.O_RDWR | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except IsADirectoryError:
        raise StoreError(f"{path}: is a directory, not a state database") from None
    except OSError as exc:
        raise StoreError(f"{path}: cannot open the state database ({exc.strerror or exc})") from None
    try:
        _tighten(fd, path, _own_regular(fd, path))
    except OSError as exc:
        raise StoreError(f"{path}: cannot set mode 600 on the state database ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    _tighten_modes(path, wal_only=True)


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
    problem: str | None
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


# -- the connection ---------------------------------------------------------------------------------------
class StoreConnection:
    """One process's connection to the state database: opening, closing, transactions and snapshots. The
    repositories build on it, and `Store` is all of them over one connection."""

    def __init__(self, conn: sqlite3.Connection, path: Path):
        self._conn = conn
        self.path = path
        self._savepoints = 0
        self._commits = 0   # commits made through this connection
        self._synced = 0    # of which this many are known to be on disk
        self._sync_lock = threading.Lock()
        self._log_fd: int | None = None      # the write-ahead log, open once it is first flushed
        self._log_inode: int | None = None

    # -- opening -------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None, *, busy_timeout: float = BUSY_TIMEOUT_S,
             any_thread: bool = False, checked: bool = False) -> Self:
        """Open (creating it with mode 0600, and migrating it) the database at `path`, by default
        `default_store_path()`. Raises `StoreError` with a one-line message naming the file.

        `any_thread`: the connection may be used from several threads, one at a time (the caller holds
        a lock around each use: the server's single writer). `checked`: this process holds a connection
        that checked the file (`_intact`) and has written all that changed it since (the server's read
        connections): no check again, which reads every page while a request waits."""
        path = Path(path) if path is not None else default_store_path()
        _secure_file(path)
        try:
            conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=not any_thread)
        except sqlite3.Error as exc:
            raise StoreError(f"{path}: cannot open the state database ({exc})") from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            check_version(conn)   # before changing anything in a file that may not be ours
            if not checked:
                _intact(conn, path)
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"WAL journal mode is not available (got {mode}); is it on a network filesystem?")
            conn.execute("PRAGMA foreign_keys = ON")
            apply_migrations(conn)   # (flushed inside its COMMIT: the setting below is not made yet)
            conn.execute("PRAGMA synchronous = NORMAL")   # the log is flushed by `sync`, after each commit
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
        try:
            self.sync()   # (commits made with durable=False and not flushed by their caller)
        finally:
            self._close_log()
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def schema_version(self) -> int:
        return self._conn.execute("PRAGMA user_version").fetchone()[0]

    def set_autocheckpoint(self, pages: int) -> None:
        """The log size (pages) at which a commit on this connection checkpoints by itself (SQLite's
        `wal_autocheckpoint`; 1000 by default)."""
        self._conn.execute(f"PRAGMA wal_autocheckpoint = {int(pages)}")

    def data_version(self) -> int:
        """A number that changes when another connection commits to the database (PRAGMA data_version).

        Cheap (no I/O beyond the WAL index): the daemon compares it with the value it saw last to learn
        that a CLI command changed something. Commits made through this Store do not change it."""
        return self._conn.execute("PRAGMA data_version").fetchone()[0]

    # -- transactions ------------------------------------------------------------------------------------------
    @contextmanager
    def transaction(self, *, durable: bool = True) -> Iterator[Self]:
        """BEGIN IMMEDIATE ... COMMIT; ROLLBACK if the block raises. Nested use is a savepoint.

        `durable=False`: the commit is not flushed to disk yet; the caller calls `sync()` before it tells
        anyone that the write happened (see the module's docstring)."""
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
        changes = conn.total_changes
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
        if conn.total_changes != changes:   # (a transaction that wrote nothing has nothing to flush)
            self._commits += 1
            if durable:
                self.sync()

    def sync(self) -> None:
        """Every commit made so far through this connection on disk. Threads that ask while a flush is
        under way wait for it, and the first of them flushes once for all the commits made meanwhile."""
        wanted = self._commits
        if self._synced >= wanted:
            return
        with self._sync_lock:
            if self._synced >= wanted:   # (a flush that started after our commit covered it)
                return
            upto = self._commits
            self._flush_log()
            self._synced = upto

    def _flush_log(self) -> None:
        """The write-ahead log flushed to disk (what SQLite's `synchronous = FULL` does inside each COMMIT),
        and its directory when the log is a file not flushed before, as SQLite does for a log it creates.

        The log stays open between flushes: a flush must not need a new descriptor (a server out of them
        would fail its writes after committing them). It is the same file for as long as this connection
        is open (SQLite removes the log only when its last connection closes); its inode is checked all
        the same. Holding it open is safe: SQLite holds no POSIX lock on the log (its locks are on the
        database and the -shm file), so closing this descriptor drops none."""
        log_path = f"{self.path}-wal"
        try:
            try:
                on_disk = os.stat(log_path).st_ino
            except FileNotFoundError:   # checkpointed into the database and removed: flushed by SQLite then
                return
            if self._log_fd is None or on_disk != self._log_inode:
                self._close_log()
                self._log_fd = os.open(log_path, os.O_RDONLY | os.O_CLOEXEC)
                self._log_inode = os.fstat(self._log_fd).st_ino
                directory = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    os.fsync(directory)
                finally:
                    os.close(directory)
            os.fdatasync(self._log_fd)   # (as SQLite syncs its log on Linux: the data, and the size if it grew)
        except OSError as exc:
            raise StoreError(f"{log_path}: cannot flush the state database's log to disk ({exc.strerror})") from None

    def _close_log(self) -> None:
        if self._log_fd is not None:
            os.close(self._log_fd)
            self._log_fd = self._log_inode = None

    @contextmanager
    def statement(self) -> Iterator[Self]:
        """For a write of one statement: inside a transaction, no savepoint of its own (a statement that
        fails is undone by SQLite alone, and the transaction goes on), which spares the server's writer two
        more round trips into SQLite per write while every request waits for its lock; outside one, a
        transaction of its own (`transaction`)."""
        if self._conn.in_transaction:
            yield self
            return
        with self.transaction():
            yield self

    @contextmanager
    def snapshot(self) -> Iterator[Self]:
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

    @staticmethod
    def _one_statement(columns: tuple[str, ...], rows: Sequence[tuple]) -> bool:
        """Whether `_insert_rows` writes these rows in one statement (which needs no savepoint)."""
        return len(rows) * len(columns) <= _MAX_PARAMETERS

    @staticmethod
    def _inserted_id(cur: sqlite3.Cursor) -> int:
        """The id SQLite gave the row `cur` just inserted."""
        if cur.lastrowid is None:
            raise StoreError("SQLite gave the inserted row no id")
        return cur.lastrowid

    def _insert_rows(self, table: str, columns: tuple[str, ...], rows: Sequence[tuple]) -> None:
        """Rows into `table` with as few statements as SQLite's limit on parameters allows: each statement
        is a trip into SQLite that releases the GIL, and the server's writer makes them while every request
        waits for its lock (`executemany` makes one trip per row)."""
        width = len(columns)
        per_statement = max(1, _MAX_PARAMETERS // width)
        row_sql = f"({', '.join('?' * width)})"
        head = f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
        for at in range(0, len(rows), per_statement):
            chunk = rows[at:at + per_statement]
            self._conn.execute(head + ", ".join([row_sql] * len(chunk)), [v for row in chunk for v in row])

    def _insert_new(self, table: str, columns: tuple[str, ...], values: tuple, what: str) -> None:
        """One row into `table`; `StoreError` "WHAT already exists" when its key is taken."""
        with self.transaction():
            try:
                self._conn.execute(f"INSERT INTO {table} ({', '.join(columns)}) "
                                   f"VALUES ({', '.join('?' * len(columns))})", values)
            except sqlite3.IntegrityError:
                raise StoreError(f"{what} already exists") from None
