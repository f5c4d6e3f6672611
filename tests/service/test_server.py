"""`leasewise serve` on a real Unix socket: who the caller is (peer credentials of real Unix users), who
may do what, and the CLI giving the same answers through the server as on its own store."""

from __future__ import annotations

import gc
import threading
import json
import ssl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.service.models import submission_of
from orchestrator.model.timeutil import UTC
from orchestrator.model.errors import InvalidRequest
from orchestrator.service.client import Client, RemoteError, socket_tls_context
from orchestrator.state.store import Store
from tests.service.conftest import ADMINS, as_user, start_server

from datetime import datetime


def _request(user: str, **extra):
    fields = {"cpus": 1, "memory": 512, "duration": "30m", "user": user, **extra}
    return submission_of(fields)


def _submit_as(running, user: str, **extra) -> dict:
    url = running.url
    request = _request(user, **extra)
    return as_user(user, lambda: Client(url).submit(request))


def test_the_socket_says_who_calls(running, unix_users):
    url = running.url
    alice = as_user("lwalice", lambda: Client(url).whoami())
    assert alice["user"] == "lwalice" and alice["admin"] is False and alice["via"] == "unix"
    admin = as_user("lwadm", lambda: Client(url).whoami())
    assert admin["user"] == "lwadm" and admin["admin"] is True and ADMINS in admin["groups"]
    assert Client(url).whoami()["admin"] is True   # root


def test_the_sockets_client_loads_no_certificate_authorities():
    """The Unix socket speaks plain HTTP: its transport's TLS context stays a verifying one (should TLS ever
    be spoken there, every certificate is refused) and loads no CA bundle, which costs each client made about
    20 ms of CPU (a CLI command's, or a load test's clients all at once)."""
    context = socket_tls_context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] == 0


def test_a_user_outside_the_sockets_group_cannot_connect(running, unix_users):
    mode = running.socket.stat().st_mode & 0o777
    assert mode == 0o660
    url = running.url
    with pytest.raises(RemoteError) as caught:
        as_user("lwcarol", lambda: Client(url).whoami())
    assert caught.value.exit_code == 4 and "permission denied" in str(caught.value)


def test_leases_belong_to_who_submitted_them(running, unix_users):
    url = running.url
    answer = _submit_as(running, "lwalice")
    lease_id = answer["id"]
    assert answer["state"] in ("scheduled", "active")
    # anyone may list (everyone's: a list is the caller's own by default) and show
    assert lease_id not in as_user("lwbob", lambda: [l.id for l in Client(url).leases()])
    listed = as_user("lwbob", lambda: [l.id for l in Client(url).leases(everyone=True)])
    assert lease_id in listed
    assert as_user("lwalice", lambda: [l.id for l in Client(url).leases()]) == [lease_id]
    shown = as_user("lwbob", lambda: Client(url).lease(lease_id, vms=False)[0].request.user)
    assert shown == "lwalice"
    # only the owner (or an admin) may cancel, extend, reach its VMs
    for call in (lambda: Client(url).cancel(lease_id), lambda: Client(url).extend(lease_id, "10m"),
                 lambda: Client(url).access(lease_id, None)):
        with pytest.raises(RemoteError) as caught:
            as_user("lwbob", call)
        assert caught.value.exit_code == 4
        assert str(caught.value).startswith(f"lease {lease_id} belongs to lwalice")
    with Store.open(running.store_path) as store:
        lease = store.lease(lease_id)
        assert not lease.is_final and lease.request.duration == timedelta(minutes=30)   # nothing changed
    extended = as_user("lwalice", lambda: Client(url).extend(lease_id, "10m"))
    assert extended["duration_s"] == 40 * 60
    done = as_user("lwadm", lambda: Client(url).cancel(lease_id))
    assert done["id"] == lease_id
    with Store.open(running.store_path) as store:
        assert store.lease(lease_id).state.value == "cancelled"


def test_a_user_may_not_submit_for_another_or_boot_a_path(running, unix_users):
    with pytest.raises(RemoteError) as caught:
        url = running.url
        request = _request("lwbob")
        as_user("lwalice", lambda: Client(url).submit(request))
    assert caught.value.exit_code == 4 and "lwalice may not submit leases for lwbob" in str(caught.value)
    with pytest.raises(RemoteError) as caught:
        request = _request("lwalice", kernel="/boot/vmlinuz")
        as_user("lwalice", lambda: Client(url).submit(request))
    assert caught.value.exit_code == 4 and "catalogued images" in str(caught.value)
    with pytest.raises(RemoteError) as caught:
        as_user("lwalice", lambda: Client(url).image_remove("debian12"))
    assert caught.value.exit_code == 4 and "for admins" in str(caught.value)
    with Store.open(running.store_path) as store:
        assert store.leases() == []   # nothing was written


def test_bad_input_through_the_api_is_one_line_and_exit_2(running):
    client = running.client()
    with pytest.raises(InvalidRequest) as caught:
        client.post("/v1/leases", {"cpus": 1, "memory": 512, "duration": "99:99:99"})
    assert caught.value.exit_code == 2 and str(caught.value).startswith("duration: '99:99:99' is not a duration")
    with pytest.raises(InvalidRequest) as caught:   # (the old positional form is gone)
        client.post("/v1/leases", {"request": ["x"]})
    assert caught.value.exit_code == 2 and str(caught.value).startswith("cpus: is required")
    with pytest.raises(RemoteError) as caught:
        client.extend(99, "10m")
    assert caught.value.exit_code == 2 and "no lease with id 99" in str(caught.value)
    with pytest.raises(RemoteError) as caught:
        client.drain("nosuch", None)
    assert caught.value.exit_code == 2 and "no host named 'nosuch'" in str(caught.value)
    schema = client.get("/openapi.json")
    assert "/v1/leases" in schema["paths"]


def test_the_lease_list_comes_a_page_at_a_time(running):
    """`GET /v1/leases` gives a page of the caller's leases by id and the id to ask for the next one after;
    the client pages through them all; a page size out of bounds is exit 2, naming `limit`."""
    import getpass

    client = running.client()
    ids = [client.submit(_request(getpass.getuser()))["id"] for _ in range(5)]
    first, following = client.lease_page(limit=2)
    assert [lease.id for lease in first] == ids[:2] and following == ids[1]
    second, following = client.lease_page(after=following, limit=2)
    assert [lease.id for lease in second] == ids[2:4] and following == ids[3]
    last, following = client.lease_page(after=following, limit=2)
    assert [lease.id for lease in last] == ids[4:] and following is None
    assert [lease.id for lease in client.leases()] == ids
    page = client.get("/v1/leases", limit=2, all="true")
    assert [record["id"] for record in page["leases"]] == ids[:2] and page["next"] == ids[1]
    for limit in (0, 1001):
        with pytest.raises(RemoteError) as caught:
            client.get("/v1/leases", limit=limit)
        assert caught.value.exit_code == 2 and caught.value.args[0].startswith("limit:")


def test_the_daemon_in_the_server_starts_and_ends_leases(running):
    client = running.client()
    answer = client.submit(_request("root", duration="20s", start="now"))
    lease_id = answer["id"]
    deadline = time.monotonic() + 90
    state = None
    while time.monotonic() < deadline:
        state = client.lease(lease_id, vms=False)[0].state.value
        if state == "done":
            break
        time.sleep(0.5)
    assert state == "done"
    # the plan says done when its shutdown begins; the shutdown itself runs off the lock and is written after
    operations: set[str] = set()
    while time.monotonic() < deadline and not {"start_vms", "stop_vms", "release"} <= operations:
        time.sleep(0.5)
        with Store.open(running.store_path) as store:
            operations = {o.operation for o in store.operations(lease_id) if o.outcome == "done"}
    assert {"start_vms", "stop_vms", "release"} <= operations
    with Store.open(running.store_path) as store:
        assert store.unfinished_operations() == []


def _cli(*args: str, env: dict | None = None):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", **(env or {})})


def test_the_cli_answers_the_same_through_the_server(running):
    client = running.client()
    later = (datetime.now(UTC) + timedelta(hours=3)).replace(microsecond=0).isoformat()
    client.submit(_request("root", name="one", start=later))   # (advance reservations: nothing moves meanwhile)
    client.submit(_request("root", name="two", nodes=2, start=later))
    local = _cli("lease", "list", "--state", str(running.store_path))
    remote = _cli("lease", "list", "--server", running.url)
    assert local.exit_code == remote.exit_code == 0, (local.output, remote.output)
    assert local.output == remote.output
    local = _cli("lease", "show", "1", "--json", "--state", str(running.store_path))
    remote = _cli("lease", "show", "1", "--json", env={"LEASEWISE_SERVER": running.url})
    assert local.exit_code == remote.exit_code == 0
    left, right = json.loads(local.output), json.loads(remote.output)
    left.pop("vms"), right.pop("vms")
    assert left == right
    local = _cli("host", "list", "--state", str(running.store_path))
    remote = _cli("host", "list", "--server", running.url)
    assert local.exit_code == remote.exit_code == 0 and local.output == remote.output and "h2" in local.output
    for command in (("plan", "--json"), ("plan",), ("report",), ("image", "list")):
        local = _cli(*command, "--state", str(running.store_path))
        remote = _cli(*command, "--server", running.url)
        assert local.exit_code == remote.exit_code == 0, (command, local.output, remote.output)
        if command == ("plan", "--json"):   # (its "now" is each call's own)
            left, right = json.loads(local.output), json.loads(remote.output)
            left.pop("now"), right.pop("now")
            assert left == right and left["leases"], command
        else:
            assert local.output == remote.output, command
    missing = _cli("report", "--lease", "99", "--server", running.url)
    assert missing.exit_code == 2 and "--lease: no lease with id 99" in missing.output
    refused = _cli("lease", "cancel", "99", "--server", running.url)
    assert refused.exit_code == 2 and "no lease with id 99" in refused.output
    submitted = _cli("lease", "submit", "--cpus", "1", "--memory", "256", "--duration", "5m", "--server", running.url)
    assert submitted.exit_code == 0 and "accepted" in submitted.output


def test_a_server_that_is_not_there_is_exit_1_after_wait(tmp_path):
    """A refused connection is tried again for --wait seconds (a restart), then is a permanent error."""
    began = time.monotonic()
    result = _cli("lease", "list", "--server", f"unix:{tmp_path}/nothing.sock", "--wait", "1")
    assert result.exit_code == 1 and "no server answers there (tried for 1 s, --wait)" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert 1.0 <= time.monotonic() - began < 5


def test_a_server_host_that_does_not_resolve_is_exit_1_at_once():
    """An unknown host in --server is a permanent error: one line naming it, exit 1, not tried again for
    --wait seconds (`.invalid` never resolves: RFC 2606)."""
    began = time.monotonic()
    result = _cli("lease", "list", "--server", "https://no-such-host.invalid:8443", "--wait", "30")
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines() == [
        "error: server https://no-such-host.invalid:8443: unknown host (the name does not resolve)"]
    assert time.monotonic() - began < 10   # (not the 30 s of --wait)


def test_run_refuses_a_store_the_server_enacts(running):
    result = _cli("run", "--until-idle", "--state", str(running.store_path))
    assert result.exit_code == 2 and "leasewise serve" in result.output and "enacts this store" in result.output


def test_a_server_alone_in_its_process_keeps_what_it_started_with_out_of_full_collections(tmp_path, unix_users):
    """`leasewise serve` freezes its startup objects (gc.freeze); a server made inside another program
    (these tests) leaves that program's collector alone."""
    gc.unfreeze()
    served = start_server(tmp_path / "plain")
    try:
        assert gc.get_freeze_count() == 0
    finally:
        served.stop()
    passes: list[int] = []   # (the collections since it was made: the first is the full one before the freeze)
    daemon_ran: list[bool] = []   # (at that full pass: the daemon's thread had started, and taken its first step)

    def collecting(phase, info):
        if phase == "start":
            passes.append(info["generation"])
            if len(passes) == 1:
                daemon_ran.append(any(t.name == "leasewise-daemon" for t in threading.enumerate()))

    gc.callbacks.append(collecting)
    try:
        served = start_server(tmp_path / "alone", freeze_gc=True)
    finally:
        gc.callbacks.remove(collecting)
    try:
        assert passes[:1] == [2] and gc.isenabled()
        assert daemon_ran == [True] and served.server.loop.first_step.is_set()
        frozen = gc.get_freeze_count()
        assert frozen > 10_000, frozen   # (the modules, the app, the scheduler as loaded)
        cluster = served.server.session._cluster
        assert cluster is not None and not any(o is cluster for o in gc.get_objects())   # (frozen: not walked)
    finally:
        served.stop()
        gc.unfreeze()


@contextmanager
def _answering(body: object) -> Iterator[str]:
    """A plain HTTP server on loopback (not leasewise's) answering every GET with `body` as JSON: its URL."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Wrong(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Wrong)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("body, says", [
    ({"leases": [{"id": 1, "state": "scheduled"}], "next": None}, "API's LeasePage (leases[0].history: is required)"),
    ({"leases": [], "next": "later"}, "API's LeasePage (next: "),
    ({"leases": "none", "next": None}, "API's LeasePage (leases: "),
])
def test_a_page_of_leases_that_is_not_the_apis_is_one_line_naming_the_field(body, says):
    """A page of leases is checked by rebuilding its leases (not read through its model first, which would
    check it twice): an answer that is not a page still fails as one line naming the model and the field."""
    with _answering(body) as url, pytest.raises(RemoteError) as caught, Client(url) as client:
        client.lease_page()
    assert caught.value.exit_code == 1
    message = str(caught.value)
    assert message.startswith(f"server {url}: its answer is not the {says}"), message
    assert "\n" not in message


def test_an_answer_that_is_not_the_apis_is_one_line_exit_1():
    """The client reads every answer through its model: a server (or a proxy) answering with something
    else is one line naming the model and the field, exit 1, not a traceback or a wrong table."""
    with _answering({"user": 7, "admin": True, "groups": [], "via": "unix"}) as url:
        with pytest.raises(RemoteError) as caught, Client(url) as client:
            client.whoami()
        result = _cli("whoami", "--server", url)
    assert caught.value.exit_code == 1
    assert str(caught.value).startswith(f"server {url}: its answer is not the "
                                        "API's Whoami (user: must be text (got 7))"), str(caught.value)
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1, result.output
