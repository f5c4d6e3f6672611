"""A real `leasewise serve` on a temporary Unix socket, and real Unix users to call it as.

The server runs in a thread of the test process (its daemon on the wall clock, simulated hosts). Users
are made with useradd for the session and removed after; calls "as" a user run in a forked child that
has dropped root for that user's uid, gid and groups, so the server sees that user in the socket's peer
credentials, as it would for a person's shell. Making users needs root: the tests that call as them
(every test using `unix_users`, `running` or a server of their own with users) are skipped, saying so,
when not run as root (CI runs them as root).

Several test sessions may run at once on one machine: each holds a shared lock on `USERS_LOCK` while it
uses the users, and the last one to finish removes them.
"""

from __future__ import annotations

import fcntl
import os
import pickle
import pwd
import shutil
import tempfile
import subprocess
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from drivers.inventory import HostConfig
from orchestrator.config import Config, config_from_dict
from orchestrator.service.client import Client
from orchestrator.service.server import Server
from orchestrator.state.store import Store

GROUP = "lwtest"            # may connect to the socket
ADMINS = "lwtest-admin"     # [auth] admin_group
USERS = {"lwalice": [GROUP], "lwbob": [GROUP], "lwcarol": [], "lwadm": [GROUP, ADMINS]}
#: held (shared) by each test session that uses the users
USERS_LOCK = Path("/run/lock" if Path("/run/lock").is_dir() else tempfile.gettempdir()) / "leasewise-test-users.lock"
#: why the tests that call as the users are skipped when not root
NEEDS_ROOT = "needs root: makes Unix users and groups (useradd, groupadd) and calls the server as them"


def _make(database: str, name: str, *argv: str) -> None:
    """`name` in `database` (passwd, group), made with `argv` unless there (another session may make it
    at the same moment)."""
    def there() -> bool:
        return subprocess.run(["getent", database, name], capture_output=True).returncode == 0

    if not there():
        made = subprocess.run(argv, capture_output=True, text=True)
        if made.returncode != 0 and not there():
            raise RuntimeError(f"{' '.join(argv)}: {made.stderr.strip()}")


@pytest.fixture(scope="session")
def unix_users() -> Iterator[dict[str, int]]:
    """name -> uid of the test's users (created, then removed)."""
    if os.geteuid() != 0:
        pytest.skip(NEEDS_ROOT)
    lock = USERS_LOCK.open("a")
    fcntl.flock(lock, fcntl.LOCK_SH)
    for group in (GROUP, ADMINS):
        _make("group", group, "groupadd", group)
    for user, groups in USERS.items():
        _make("passwd", user, "useradd", "-M", "-N", "-s", "/usr/sbin/nologin",
              *(["-G", ",".join(groups)] if groups else []), user)
    try:
        yield {u: pwd.getpwnam(u).pw_uid for u in USERS}
    finally:
        try:   # the last session out removes them (whichever made them); the others leave them be
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass
        else:
            for user in USERS:
                subprocess.run(["userdel", user], capture_output=True)
            for group in (GROUP, ADMINS):
                subprocess.run(["groupdel", group], capture_output=True)
        lock.close()


def as_user(user: str, call: Callable[[], Any], timeout: float = 60.0) -> Any:
    """`call()` run in a child process that is `user` (uid, gid, supplementary groups); its result, or
    the exception it raised, comes back through a pipe."""
    entry = pwd.getpwnam(user)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: become the user, call, report, exit without running the parent's cleanups
        os.close(read)
        try:
            os.setgroups(os.getgrouplist(user, entry.pw_gid))
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)
            outcome = ("ok", call())
        except BaseException as exc:   # noqa: BLE001 - handed back to the test
            outcome = ("error", exc if _picklable(exc) else RuntimeError(traceback.format_exc()))
        with os.fdopen(write, "wb") as out:
            pickle.dump(outcome, out)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as inp:
        data = inp.read()
    os.waitpid(pid, 0)
    kind, value = pickle.loads(data)
    if kind == "error":
        raise value
    return value


def _picklable(value: object) -> bool:
    try:
        pickle.loads(pickle.dumps(value))
        return True
    except Exception:
        return False


class Running:
    def __init__(self, server: Server, thread: threading.Thread, socket: Path, store_path: Path, config: Config):
        self.server = server
        self.thread = thread
        self.socket = socket
        self.store_path = store_path
        self.config = config

    @property
    def url(self) -> str:
        return f"unix:{self.socket}"

    def client(self, **kwargs: Any) -> Client:
        return Client(self.url, **kwargs)

    def stop(self) -> None:
        self.server.stop()
        self.thread.join(timeout=60)
        shutil.rmtree(self.socket.parent, ignore_errors=True)
        assert not self.thread.is_alive(), "the server did not stop"


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (openssl), for a server's HTTPS listener."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


def make_store(path: Path, hosts: int = 2, vcpus: int = 8, memory: int = 16384) -> Path:
    with Store.open(path) as store:
        for i in range(1, hosts + 1):
            store.add_host(HostConfig(name=f"h{i}", uri="test:///default"), vcpus, memory)
    return path


def start_server(tmp_path: Path, *, hosts: int = 2, config: dict | None = None, **server_kwargs: Any) -> Running:
    store_path = make_store(tmp_path / "state.sqlite", hosts)
    # (pytest's own directory is root's alone: the socket goes where the test's users can reach it)
    rundir = Path(tempfile.mkdtemp(prefix="leasewise-test-run-"))
    rundir.chmod(0o755)
    socket = rundir / "api.sock"
    data = {"daemon": {"driver": "simulated", "poll_interval": "1s"},
            "serve": {"socket": str(socket), "socket_group": GROUP},
            "auth": {"admin_group": ADMINS}}
    for table, values in (config or {}).items():
        data.setdefault(table, {}).update(values)
    cfg = config_from_dict(data)
    server = Server(cfg, store_path, **server_kwargs)
    thread = threading.Thread(target=server.serve, name="test-server")
    thread.start()
    if not server.started.wait(30):
        raise AssertionError("the server did not start")
    for _ in range(200):
        if socket.exists():
            break
        time.sleep(0.05)
    running = Running(server, thread, socket, store_path, cfg)
    # a first call here imports what a call needs: a child that has become a test user cannot read
    # this interpreter's files (they are root's)
    with running.client() as client:
        client.whoami()
        try:
            client.lease(1)
        except Exception:
            pass
    return running


@pytest.fixture
def running(tmp_path, unix_users) -> Iterator[Running]:
    served = start_server(tmp_path)
    try:
        yield served
    finally:
        served.stop()


def free_port() -> int:
    """A TCP port on loopback that nothing listens on (now)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """(certificate, key) for 127.0.0.1, made with openssl, valid for a day."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key
