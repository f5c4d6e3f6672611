"""HTTPS with API tokens (a self-signed certificate made here), token expiry and revocation, and quotas
set and enforced through the server."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.service.models import submission_of
from orchestrator.service.client import Client, RemoteError
from tests.service.conftest import ADMINS, as_user, self_signed_certificate, start_server
from tests.support.times import MovableClock


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def tls_server(tmp_path, unix_users):
    cert, key = self_signed_certificate(tmp_path)
    port = _free_port()
    from orchestrator.service.identity import token_checker

    clock = MovableClock()   # (the server's: tokens are made and checked by it)
    running = start_server(tmp_path, config={"serve": {"listen": f"127.0.0.1:{port}", "tls_cert": str(cert),
                                                        "tls_key": str(key)}},
                           clock=clock, token_check=lambda store: token_checker(store, ADMINS, now=clock.now))
    running.https = f"https://127.0.0.1:{port}"
    running.cert = str(cert)
    running.clock = clock
    try:
        yield running
    finally:
        running.stop()


def _request(**fields):
    return submission_of({"cpus": 1, "memory": 512, "duration": "30m", **fields})   # (the caller's)


def test_a_token_made_on_the_socket_logs_in_over_https(tls_server, monkeypatch):
    url = tls_server.url
    made = as_user("lwalice", lambda: Client(url).token_create(None, False, timedelta(days=1), "laptop"))
    assert made["user"] == "lwalice" and made["token"].startswith("lw_")
    with Client(tls_server.https, token=made["token"], ca=tls_server.cert) as remote:
        me = remote.whoami()
        assert (me["user"], me["admin"], me["via"]) == ("lwalice", False, "token") and "lwtest" in me["groups"]
        answer = remote.submit(_request())
        assert answer["state"] in ("scheduled", "active")
    # no token, a wrong one: not allowed; an untrusted certificate: refused before anything is sent
    for token in (None, made["token"][:-4] + "AAAA", "nonsense"):
        with pytest.raises(RemoteError) as caught, Client(tls_server.https, token=token, ca=tls_server.cert) as remote:
            remote.whoami()
        assert caught.value.exit_code == 4
    with pytest.raises(RemoteError) as caught, Client(tls_server.https, token=made["token"]) as remote:
        remote.whoami()
    # (a certificate that fails verification: permanent, exit 1, naming the cause; never "try again")
    assert caught.value.exit_code == 1 and "certificate failed verification" in str(caught.value)
    # with no `ca`, the system's CAs: here the ones OpenSSL is told to trust instead of its default file
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_server.cert))
    with Client(tls_server.https, token=made["token"]) as remote:
        assert remote.whoami()["user"] == "lwalice"
    # the store keeps no token in clear
    import sqlite3

    with sqlite3.connect(tls_server.store_path) as db:
        dump = "\n".join(db.iterdump())
    assert made["token"] not in dump and made["token"].split("_", 2)[-1] not in dump   # (the secret may hold "_")


def test_tokens_expire_and_are_revoked(tls_server):
    url = tls_server.url
    short = as_user("lwbob", lambda: Client(url).token_create(None, False, timedelta(seconds=1), ""))
    long = as_user("lwbob", lambda: Client(url).token_create(None, False, timedelta(days=1), ""))
    with Client(tls_server.https, token=long["token"], ca=tls_server.cert) as remote:
        assert remote.whoami()["user"] == "lwbob"
    tls_server.clock.advance(timedelta(seconds=2))   # (the short token's second is over, the long one's day is not)
    with pytest.raises(RemoteError) as caught, Client(tls_server.https, token=short["token"], ca=tls_server.cert) as c:
        c.whoami()
    assert caught.value.exit_code == 4 and f"token {short['id']} has expired" in str(caught.value)
    # another user may not revoke bob's token; bob may
    with pytest.raises(RemoteError) as caught:
        as_user("lwalice", lambda: Client(url).token_revoke(long["id"]))
    assert caught.value.exit_code == 4
    as_user("lwbob", lambda: Client(url).token_revoke(long["id"]))
    with pytest.raises(RemoteError) as caught, Client(tls_server.https, token=long["token"], ca=tls_server.cert) as c:
        c.whoami()
    assert caught.value.exit_code == 4 and "was revoked" in str(caught.value)
    # a user makes no admin token and none for someone else
    for user, admin in (("lwalice", False), (None, True)):
        with pytest.raises(RemoteError) as caught:
            as_user("lwbob", lambda: Client(url).token_create(user, admin, None, ""))
        assert caught.value.exit_code == 4


def test_quotas_are_for_admins_and_hold_at_submit(tls_server):
    url = tls_server.url
    with pytest.raises(RemoteError) as caught:
        as_user("lwalice", lambda: Client(url).quota_set("lwalice", {"vcpus": 100}))
    assert caught.value.exit_code == 4
    as_user("lwadm", lambda: Client(url).quota_set("lwalice", {"vcpus": 3, "max_duration": timedelta(hours=1)}))
    first = _request(nodes=2)            # 2 vCPUs: within 3
    assert as_user("lwalice", lambda: Client(url).submit(first))["state"] in ("scheduled", "active")
    over = _request(nodes=2)             # 4 vCPUs: over
    with pytest.raises(RemoteError) as caught:
        as_user("lwalice", lambda: Client(url).submit(over))
    assert caught.value.exit_code == 3 and str(caught.value) == "lwalice would hold 4 vCPUs > 3"
    at_limit = _request()                # exactly 3
    assert as_user("lwalice", lambda: Client(url).submit(at_limit))["state"] in ("scheduled", "active")
    lease_id = as_user("lwalice", lambda: Client(url).leases())[0].id
    with pytest.raises(RemoteError) as caught:
        as_user("lwalice", lambda: Client(url).extend(lease_id, "1h"))
    assert caught.value.exit_code == 3 and "max duration" in str(caught.value)
    shown = as_user("lwalice", lambda: Client(url).quota_show("lwalice"))
    assert shown["holding"]["vcpus"] == 3
    with pytest.raises(RemoteError) as caught:
        as_user("lwalice", lambda: Client(url).quota_show("lwbob"))
    assert caught.value.exit_code == 4
    # the CLI through the server: the same line and exit code as on a local store
    result = CliRunner().invoke(app, ["quota", "list", "--server", url], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "lwalice" in result.output
