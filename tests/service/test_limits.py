"""What a hostile client can cost `leasewise serve`: a real server process, with the open-file limit
systemd gives a service by default (1,024), on a Unix socket and on HTTPS.

A client holding more TCP connections than the process may open files leaves the socket's users served;
a client sending half its headers, or half its body, is cut off at its deadline; a body over the cap is
refused before it is read; the log stays small whatever the clients do; a user submitting too fast is told
when to try again (HTTP 429, exit 75)."""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import resource
import select
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.service.models import submission_of
from orchestrator.service.client import Client, RemoteError
from orchestrator.service.limits import LINGER_S, RateLimited, SubmissionRate
from tests.service.conftest import GROUP, as_user, make_store, self_signed_certificate, start_server
from tests.support.load import wait_until_serving

ROOT = Path(__file__).resolve().parents[2]
#: the server's deadlines here (short, so the tests are): headers, body, keep-alive
HEADER_S, BODY_S, KEEPALIVE_S = 3.0, 3.0, 2.0
LISTEN_CAP = 512   # [serve] listen_max_connections, its default
LOG_BOUND = 100_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Alone:
    """`leasewise serve` in a process of its own, allowed 1,024 open files."""

    process: subprocess.Popen
    socket: Path
    port: int
    cert: str
    log: Path

    @property
    def url(self) -> str:
        return f"unix:{self.socket}"

    def log_size(self) -> int:
        return self.log.stat().st_size

    def log_since(self, offset: int) -> str:
        with self.log.open("rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")

    def tls(self) -> ssl.SSLSocket:
        context = ssl.create_default_context(cafile=self.cert)
        return context.wrap_socket(socket.create_connection(("127.0.0.1", self.port), timeout=10),
                                   server_hostname="127.0.0.1")

    def unix(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(str(self.socket))
        return sock


def _serve(*options: str, files: tuple[int, int] = (1024, 1024)) -> list[str]:
    """`leasewise serve OPTIONS` allowed `files` open files (soft, hard): systemd's default soft limit, and
    by default a hard limit as low."""
    return [sys.executable, "-c", f"import resource; resource.setrlimit(resource.RLIMIT_NOFILE, {files}); "
                                  "from orchestrator.cli import main; main()", "serve", *options]


@pytest.fixture(scope="module")
def alone(tmp_path_factory, unix_users) -> Iterator[Alone]:
    work = tmp_path_factory.mktemp("alone")
    cert, key = self_signed_certificate(work)
    store = make_store(work / "state.sqlite")
    rundir = Path(tempfile.mkdtemp(prefix="leasewise-test-limits-"))
    rundir.chmod(0o755)
    sock, port = rundir / "api.sock", _free_port()
    config = work / "serve.toml"
    config.write_text(f'[daemon]\ndriver = "simulated"\npoll_interval = "1s"\n'
                      f'[auth]\nadmin_group = "lwtest-admin"\n'
                      f'[serve]\nsocket = "{sock}"\nsocket_group = "{GROUP}"\nlisten = "127.0.0.1:{port}"\n'
                      f'tls_cert = "{cert}"\ntls_key = "{key}"\nheader_timeout = {HEADER_S}\n'
                      f'body_timeout = {BODY_S}\nkeepalive_timeout = {KEEPALIVE_S}\n'
                      # (caps that fit 1,024 files; one address may fill the TCP listener here, as many
                      # addresses could)
                      f'socket_max_connections = 256\npeer_max_connections = 2048\n')
    log = work / "serve.log"
    with log.open("w") as out:
        process = subprocess.Popen(_serve("--state", str(store), "--config", str(config), "--log-level", "info"),
                                   cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    served = Alone(process, sock, port, str(cert), log)
    try:
        wait_until_serving(served.url, process, log)
        _cli("lease", "list", "--server", served.url)   # (imports what a test user's child will need)
        yield served
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(rundir, ignore_errors=True)
    assert "Traceback" not in log.read_text(), log.read_text()[-5000:]


def _cli(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def _outcome(result) -> tuple[int, str]:
    """What a test user's child hands back of a CLI run (its result object does not cross the pipe)."""
    return result.exit_code, result.output


def _timed_lease_list(url: str) -> tuple[float, int, str]:
    began = time.monotonic()
    result = _cli("lease", "list", "--server", url)
    return time.monotonic() - began, result.exit_code, result.output


@pytest.fixture
def many_files() -> Iterator[None]:
    """This process may hold a few thousand connections."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, 8192), hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _connect_without_waiting(port: int, count: int, batch: int = 100) -> list[socket.socket]:
    """`count` TCP connections, begun `batch` at a time (no more than the server's backlog holds), each
    batch given up to 0.2 s to be made (past the backlog the kernel leaves them unanswered)."""
    made: list[socket.socket] = []
    while len(made) < count:
        started = []
        for _ in range(min(batch, count - len(made))):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
            started.append(sock)
        _connected(started, 0.2)
        made.extend(started)
    return made


def _connected(socks: list[socket.socket], within_s: float) -> list[socket.socket]:
    """Those of `socks` whose connection is made within `within_s` (select cannot watch fds past 1,024)."""
    poller = select.poll()
    by_fd = {sock.fileno(): sock for sock in socks}
    for fd in by_fd:
        poller.register(fd, select.POLLOUT)
    return [by_fd[fd] for fd, event in poller.poll(within_s * 1000) if event & select.POLLOUT]


def _closed_after(sock: socket.socket, limit_s: float) -> float | None:
    """Seconds until the server closes `sock` (what it sends is read and dropped), None if it has not
    within `limit_s`."""
    began = time.monotonic()
    sock.settimeout(0.2)
    while time.monotonic() - began < limit_s:
        try:
            if sock.recv(65536) == b"":
                return time.monotonic() - began
        except (TimeoutError, ssl.SSLWantReadError):
            continue
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            return time.monotonic() - began
    return None


# -- connections -----------------------------------------------------------------------------------------
def test_a_client_holding_1100_tcp_connections_leaves_the_sockets_users_served(alone, many_files):
    offset = alone.log_size()
    held: list[socket.socket] = []
    try:
        # half-sent requests over TLS first (accepted: the listener takes 512), then idle connections and
        # connections that begin a TLS handshake and stop
        for _ in range(50):
            tls = alone.tls()
            tls.sendall(b"GET /v1/whoami HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            held.append(tls)
        began = time.monotonic()
        raw = _connect_without_waiting(alone.port, 1050)
        held.extend(raw)
        for sock in _connected(raw[::2], 2.0):
            sock.send(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")   # the first bytes of a ClientHello
        full = f"https://127.0.0.1:{alone.port}: {LISTEN_CAP} connections open"
        while full not in alone.log_since(offset) and time.monotonic() - began < 10:
            time.sleep(0.1)
        assert full in alone.log_since(offset)
        url = alone.url
        for _ in range(3):   # (while the server drops the slow ones and takes the next: over 2 header timeouts)
            took, code, output = as_user("lwalice", lambda: _timed_lease_list(url))
            assert code == 0, output
            assert took < 2.0, took
            with Client(url) as root:
                assert root.whoami()["user"] == "root"
            time.sleep(HEADER_S * 0.6)
        open_files = len(os.listdir(f"/proc/{alone.process.pid}/fd"))
        assert open_files <= 1024
    finally:
        for sock in held:
            sock.close()
    grown = alone.log_since(offset)
    assert len(grown.encode()) < LOG_BOUND, len(grown)
    assert "Traceback" not in grown, grown[-3000:]


def test_a_slow_client_is_cut_off_at_its_deadline(alone):
    # half a request's headers, a byte at a time, on the socket and over TLS
    for connect in (alone.unix, alone.tls):
        sock = connect()
        sock.sendall(b"GET /v1/whoami HTTP/1.1\r\nHost: leasewise\r\nX-Slow: ")
        began = time.monotonic()
        cut = None
        while time.monotonic() - began < HEADER_S + 5:
            try:
                sock.sendall(b"a")
            except OSError:
                cut = time.monotonic() - began
                break
            if _closed_after(sock, 0.3) is not None:
                cut = time.monotonic() - began
                break
        sock.close()
        assert cut is not None and HEADER_S - 0.5 <= cut <= HEADER_S + 2, (connect, cut)
    # a connection that sends nothing, and one idle after an answer (keep-alive)
    idle = alone.unix()
    assert HEADER_S - 0.5 <= (_closed_after(idle, HEADER_S + 5) or 99) <= HEADER_S + 2
    idle.close()
    kept = alone.unix()
    kept.sendall(b"GET /v1/health HTTP/1.1\r\nHost: leasewise\r\n\r\n")
    answer = kept.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200")
    assert KEEPALIVE_S - 0.5 <= (_closed_after(kept, KEEPALIVE_S + 5) or 99) <= KEEPALIVE_S + 2
    kept.close()
    # half a body: 408 after the body timeout, one line
    sock = alone.unix()
    sock.sendall(b"POST /v1/leases HTTP/1.1\r\nHost: leasewise\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100\r\n\r\n{\"request\":")
    began = time.monotonic()
    status, body = _response(sock)
    assert status == 408 and BODY_S - 0.5 <= time.monotonic() - began <= BODY_S + 2
    assert body["error"]["code"] == 75 and "body_timeout" in body["error"]["message"]
    sock.close()


def test_a_client_that_stops_reading_its_answers_is_dropped(alone):
    # many requests at once (pipelined), none of the answers read: the server writes what the buffers
    # take, waits the body timeout, and drops the connection
    sock = alone.unix()
    with Client(alone.url) as client:
        one = len(json.dumps(client.get("/openapi.json")))
    sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: leasewise\r\n\r\n" * 2000)
    time.sleep(BODY_S + 1.5)
    received, ended = 0, None
    sock.settimeout(2)
    try:
        while True:
            chunk = sock.recv(1 << 20)
            if not chunk:
                ended = "closed"
                break
            received += len(chunk)
    except ConnectionResetError:
        ended = "reset"
    except TimeoutError:
        ended = None
    sock.close()
    assert ended is not None and received < 200 * one, (ended, received, one)


def _response(sock: socket.socket) -> tuple[int, dict]:
    """The status and JSON body of the answer on `sock`, read as far as its `Content-Length` (the server
    closes the connection after it, at once or after a lingering close)."""
    sock.settimeout(10)
    data = b""
    while True:
        head, found, body = data.partition(b"\r\n\r\n")
        if found:
            length = re.search(rb"(?im)^content-length: *(\d+)", head)
            if length and len(body) >= int(length.group(1)):
                return int(head.split()[1]), json.loads(body[:int(length.group(1))])
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            head, _, body = data.partition(b"\r\n\r\n")
            return int(head.split()[1]), json.loads(body)
        data += chunk


def test_a_body_over_the_cap_is_refused_before_it_is_read(alone):
    cap = 1024 * 1024
    # a declared length over the cap: 413 at once, with only the headers and 64 KiB of the body sent
    sock = alone.unix()
    sock.sendall(b"POST /v1/leases HTTP/1.1\r\nHost: leasewise\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 104857600\r\n\r\n" + b" " * 65536)
    began = time.monotonic()
    status, body = _response(sock)
    assert status == 413 and time.monotonic() - began < 1.0
    assert body["error"] == {"code": 2, "message": "request body: larger than the 1 MiB the server takes "
                                                   "([serve] max_request_body); nothing was done"}
    assert (_closed_after(sock, LINGER_S + 5) or 99) <= LINGER_S + 1   # (the rest never came: a lingering close)
    sock.close()
    # no length (chunked): refused once the cap has passed, long before the client has sent its 100 MiB
    sock = alone.unix()
    sock.sendall(b"POST /v1/leases HTTP/1.1\r\nHost: leasewise\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"10000\r\n" + b" " * 65536 + b"\r\n"
    sent = 0
    sock.setblocking(False)
    poller = select.poll()
    poller.register(sock, select.POLLIN | select.POLLOUT)
    while sent < 100 * cap:
        events = dict(poller.poll(5000)).get(sock.fileno(), 0)
        if events & select.POLLIN:
            break
        assert events & select.POLLOUT, "the server neither reads nor answers"
        try:
            sent += sock.send(chunk)   # (a whole chunk goes or, with the buffers full, the select waits)
        except BlockingIOError:
            continue
    sock.setblocking(True)
    status, body = _response(sock)
    assert status == 413 and sent < 4 * cap, sent
    sock.close()
    # the client says so in one line, exit 2
    with Client(alone.url) as client:
        with pytest.raises(RemoteError) as caught:
            client.post("/v1/leases", {"request": ["x" * (2 * cap)]})
        assert caught.value.exit_code == 2 and "larger than the 1 MiB" in str(caught.value)
        assert client.whoami()["user"] == "root"   # (and the next request is answered)


def test_a_refused_body_sent_whole_still_gets_its_answer(alone):
    """A client that sends its whole body before it reads (as most do) gets the 413: the server reads the
    rest and drops it before it closes (a TCP connection closed with data unread is reset, and the reset
    can destroy an answer in flight; on a loaded machine it did, over TLS)."""
    body = b" " * (8 << 20)
    for _ in range(3):
        sock = alone.tls()
        sock.sendall(b"POST /v1/leases HTTP/1.1\r\nHost: leasewise\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)   # (reset here without it)
        status, answer = _response(sock)
        assert status == 413 and "max_request_body" in answer["error"]["message"]
        assert sock.recv(1) == b""   # (then the server closes, cleanly)
        sock.close()


def test_malformed_requests_by_the_thousand_log_one_line(alone):
    offset = alone.log_size()
    for _ in range(300):
        sock = alone.unix()
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        sock.recv(4096)
        sock.close()
    grown = alone.log_since(offset)
    assert grown.count("Invalid HTTP request") == 1, grown
    assert len(grown.encode()) < 2000


def test_running_out_of_files_is_one_line_without_a_traceback(alone, many_files):
    pid = alone.process.pid
    offset = alone.log_size()
    in_use = len(os.listdir(f"/proc/{pid}/fd"))
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (in_use + 20, 1024))
    held: list[socket.socket] = []
    try:
        held = _connect_without_waiting(alone.port, 200)
        time.sleep(3)   # (the listener tries again every half second)
    finally:
        for sock in held:
            sock.close()
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (1024, 1024))
    grown = alone.log_since(offset)
    lines = [line for line in grown.splitlines() if "out of file descriptors" in line]
    assert len(lines) == 1 and f"https://127.0.0.1:{alone.port}" in lines[0], grown
    assert "Traceback" not in grown and len(grown.encode()) < 5000, grown
    # and the socket answers again
    deadline = time.monotonic() + HEADER_S + 5
    while True:
        try:
            with Client(alone.url, timeout=5) as client:
                assert client.whoami()["user"] == "root"
            break
        except RemoteError:
            assert time.monotonic() < deadline
            time.sleep(0.5)


# -- submissions ------------------------------------------------------------------------------------------
def _request(user: str):
    return submission_of({"cpus": 1, "memory": 256, "duration": "10m", "user": user})


def test_a_user_submitting_too_fast_is_told_when_to_try_again(tmp_path, unix_users):
    served = start_server(tmp_path, config={"serve": {"submit_burst": 2, "submits_per_minute": 1}})
    try:
        url = served.url

        def submit_three() -> list:
            outcomes = []
            with Client(url) as client:
                for _ in range(3):
                    try:
                        outcomes.append(client.submit(_request("lwalice"))["state"])
                    except RemoteError as exc:
                        outcomes.append((exc.exit_code, str(exc)))
            return outcomes

        submit = ("lease", "submit", "--cpus", "1", "--memory", "256", "--duration", "5m", "--server", url)
        assert _cli(*submit).exit_code == 0   # (root: imports what the test users' children will need)
        first, second, third = as_user("lwalice", submit_three)
        assert first != "rejected" and second != "rejected"
        told = r"lwalice: too many lease submissions \(the server takes 2 at once, then 1 a minute\); nothing was " \
               r"done, try again in (\d+) s"
        said = re.fullmatch(told, third[1])
        assert third[0] == 75 and said and 40 <= int(said[1]) <= 60, third
        # the CLI: one line, exit 75
        code, output = as_user("lwalice", lambda: _outcome(_cli(*submit)))
        assert code == 75, output
        [line] = output.strip().splitlines()
        said = re.fullmatch("error: " + told, line)
        assert said and 40 <= int(said[1]) <= 60, line
        # raw HTTP: 429 with Retry-After
        def raw() -> tuple[int, str | None, dict]:
            with httpx.Client(transport=httpx.HTTPTransport(uds=str(served.socket)), base_url="http://x") as http:
                response = http.post("/v1/leases", json={"cpus": 1, "memory": 256, "duration": "5m"})
                return response.status_code, response.headers.get("retry-after"), response.json()
        status, retry_after, body = as_user("lwalice", raw)
        assert status == 429 and 40 <= int(retry_after) <= 60 and body["error"]["code"] == 75, (status, body)
        # another user has a bucket of their own, and an admin none
        assert as_user("lwbob", lambda: Client(url).submit(_request("lwbob")))["state"] != "rejected"
        with Client(url) as root:
            for _ in range(4):
                assert root.submit(_request("root"))["state"] != "rejected"
    finally:
        served.stop()


def test_one_peer_gets_its_share_of_a_listener_and_no_more(tmp_path, unix_users):
    cert, key = self_signed_certificate(tmp_path)
    port = _free_port()
    served = start_server(tmp_path, config={"serve": {"listen": f"127.0.0.1:{port}", "tls_cert": str(cert),
                                                      "tls_key": str(key), "peer_max_connections": 5}})
    url, path = served.url, str(served.socket)

    def hold_six() -> list[bool]:
        """As a user: six idle connections to the socket, held a while; which of them the server closed."""
        held = []
        for _ in range(6):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(path)
            held.append(sock)
        closed = [_closed_after(sock, 0.5) is not None for sock in held]
        time.sleep(3)
        for sock in held:
            sock.close()
        return closed

    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            holding = pool.submit(as_user, "lwalice", hold_six)
            time.sleep(1.5)
            # alice has no room left; bob has his own
            with pytest.raises(RemoteError) as caught:
                as_user("lwalice", lambda: Client(url, timeout=5).whoami())
            assert caught.value.exit_code == 75
            assert as_user("lwbob", lambda: Client(url).whoami())["user"] == "lwbob"
            assert holding.result(timeout=30) == [False] * 5 + [True]
        assert as_user("lwalice", lambda: Client(url).whoami())["user"] == "lwalice"   # (room again)
        # on TCP an address is a peer, every loopback address the same one
        context = ssl.create_default_context(cafile=str(cert))
        held = []
        for source in ["127.0.0.1"] * 3 + ["127.0.0.2"] * 2:
            raw = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
            held.append(context.wrap_socket(raw, server_hostname="127.0.0.1"))
        with pytest.raises((ssl.SSLError, ConnectionError)):
            raw = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=("127.0.0.3", 0))
            context.wrap_socket(raw, server_hostname="127.0.0.1").recv(1)
        for sock in held:
            sock.close()
        time.sleep(0.3)
        with context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5),
                                 server_hostname="127.0.0.1") as again:
            again.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert again.recv(65536).startswith(b"HTTP/1.1 200")
    finally:
        served.stop()


def test_caps_that_do_not_fit_the_open_file_limit_are_refused_or_make_room(tmp_path):
    store = make_store(tmp_path / "state.sqlite")
    rundir = Path(tempfile.mkdtemp(prefix="leasewise-test-files-"))
    config = tmp_path / "serve.toml"
    config.write_text(f'[daemon]\ndriver = "simulated"\n[serve]\nsocket = "{rundir}/api.sock"\nsocket_group = ""\n'
                      'socket_max_connections = 2000\n')
    options = ("--state", str(store), "--config", str(config), "--log-level", "warning")
    try:
        # systemd's default soft limit with a hard limit as low: one line naming the cap, exit 2
        refused = subprocess.run(_serve(*options), cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.strip().splitlines() == [
            "error: serve.socket_max_connections: 2000 connections and 256 other files need 2256 open files, and this "
            "process may open 1024 (systemd: LimitNOFILE); lower the caps or raise the limit"]
        # a hard limit that allows it: the soft limit is raised as far as needed
        server = subprocess.Popen(_serve(*options, files=(1024, 4096)), cwd=ROOT, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while not (rundir / "api.sock").exists():
                assert server.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
            assert resource.prlimit(server.pid, resource.RLIMIT_NOFILE) == (2256, 4096)
        finally:
            server.terminate()
            server.wait(timeout=60)
    finally:
        shutil.rmtree(rundir, ignore_errors=True)


def test_an_answer_without_the_apis_error_body_still_has_its_exit_code(tmp_path):
    """A proxy's own answer (no JSON error): 'too many requests' and 'unavailable' are exit 75 with the wait
    the server asked for, anything else exit 2."""
    import http.server
    import threading

    class Proxy(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status = int(self.path.rsplit("/", 1)[1])
            self.send_response(status)
            if status == 429:
                self.send_header("Retry-After", "7")
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"no")

        def log_message(self, *args) -> None:
            pass

    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{proxy.server_address[1]}"
    try:
        with Client(url) as client:
            for status, code, said in ((429, 75, "HTTP 429: try again in 7 s"), (503, 75, "HTTP 503"),
                                       (500, 2, "HTTP 500"), (404, 2, "HTTP 404")):
                with pytest.raises(RemoteError) as caught:
                    client.get(f"/status/{status}")
                assert (caught.value.exit_code, str(caught.value)) == (code, f"server {url}: {said}")
    finally:
        proxy.shutdown()


def test_a_users_bucket_refills_at_its_rate_and_holds_no_more_than_its_burst():
    now = [1000.0]
    rate = SubmissionRate(burst=3, per_minute=6, clock=lambda: now[0])
    for _ in range(3):
        rate.take("alice")
    with pytest.raises(RateLimited) as caught:
        rate.take("alice")
    assert caught.value.retry_after_s == 10 and caught.value.exit_code == 75
    rate.take("bob")                      # (a bucket of his own)
    now[0] += 9.5
    with pytest.raises(RateLimited) as caught:
        rate.take("alice")
    assert caught.value.retry_after_s == 1
    now[0] += 0.5
    rate.take("alice")                    # one submission each 10 s
    now[0] += 3600
    for _ in range(3):                    # an hour idle refills the bucket, and no more than it holds
        rate.take("alice")
    with pytest.raises(RateLimited):
        rate.take("alice")
    unlimited = SubmissionRate(burst=1, per_minute=0, clock=lambda: now[0])
    for _ in range(100):
        unlimited.take("alice")


@pytest.mark.parametrize("threads", [2, 6])
def test_the_server_works_on_request_threads_requests_at_once(tmp_path, unix_users, threads):
    """Twelve requests at once: at most `request_threads` are worked on together, the others wait their turn
    and are answered all the same (the route here is made slow: 0.2 s inside the use case)."""
    served = start_server(tmp_path, config={"serve": {"request_threads": threads, "peer_max_connections": 64}})
    try:
        service = served.server.service
        inside, most, lock = [0], [0], threading.Lock()
        real_now = service.now

        def slow_now():
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(0.2)
            with lock:
                inside[0] -= 1
            return real_now()

        service.now = slow_now

        def health(_: int) -> int:
            with httpx.Client(transport=httpx.HTTPTransport(uds=str(served.socket)), base_url="http://x",
                              timeout=30) as http:
                return http.get("/v1/health").status_code

        began = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            assert list(pool.map(health, range(12))) == [200] * 12
        took = time.monotonic() - began
        assert most[0] == threads
        assert took >= 0.2 * 12 / threads - 0.05
    finally:
        served.stop()
