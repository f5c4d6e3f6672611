"""A real `leasewise serve` for the web pages: HTTPS on loopback (a self-signed certificate made with openssl)
and its Unix socket, simulated hosts, and tokens made by real Unix users through the socket, as a person
makes theirs with `leasewise token create`."""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest

from orchestrator.service.client import Client
from orchestrator.service.identity import token_checker
from tests.service.conftest import ADMINS, Running, as_user, free_port, self_signed_certificate, start_server

HOSTS = 3


class WebSite:
    """The server, where its pages are, and how to sign in to them."""

    def __init__(self, running: Running, https: str, cert: str):
        self.running = running
        self.https = https
        self.cert = cert
        self.clients: list[httpx.Client | Client] = []

    def close(self) -> None:
        """Close the clients' connections (the server waits for open ones when it stops), then the server."""
        for client in self.clients:
            client.close()
        self.running.stop()

    @property
    def socket_url(self) -> str:
        return self.running.url

    def token(self, user: str, *, admin: bool = False, expires: timedelta | None = timedelta(days=1)) -> dict:
        """A token made by `user` on the socket (an admin token: made by an admin for them)."""
        url = self.socket_url
        maker = "lwadm" if admin else user
        return as_user(maker, lambda: Client(url).token_create(user, admin, expires, "web test"))

    def browser(self, **kwargs) -> httpx.Client:
        """An HTTP client that keeps cookies as a browser does, trusting the server's certificate."""
        client = httpx.Client(base_url=self.https, verify=ssl.create_default_context(cafile=self.cert),
                              follow_redirects=False, timeout=60, **kwargs)
        self.clients.append(client)
        return client

    def signed_in(self, token: str) -> httpx.Client:
        client = self.browser()
        answer = client.post("/login", data={"token": token, "next": "/calendar"})
        assert answer.status_code == 303, answer.text
        return client

    def api(self, token: str) -> Client:
        client = Client(self.https, token=token, ca=self.cert)
        self.clients.append(client)
        return client


def open_site(tmp_path, **serve) -> WebSite:
    """A server on HTTPS loopback and its socket; `serve` adds keys of its `[serve]` table."""
    cert, key = self_signed_certificate(tmp_path)
    port = free_port()
    running = start_server(tmp_path, hosts=HOSTS,
                           config={"serve": {"listen": f"127.0.0.1:{port}", "tls_cert": str(cert), "tls_key": str(key),
                                             **serve}},
                           token_check=lambda store: token_checker(store, ADMINS))
    return WebSite(running, f"https://127.0.0.1:{port}", str(cert))


@pytest.fixture
def site(tmp_path, unix_users) -> Iterator[WebSite]:
    served = open_site(tmp_path)
    try:
        yield served
    finally:
        served.close()


def csrf_of(html: str) -> str:
    """The CSRF token a page's forms carry."""
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "the page has no form with a CSRF token"
    return found.group(1)


def error_of(html: str) -> str:
    """The error line a page shows (unescaped)."""
    import html as markup

    found = re.search(r"<strong>error:</strong> ([^<]*)", html)
    assert found, "the page shows no error"
    return markup.unescape(found.group(1)).strip()
