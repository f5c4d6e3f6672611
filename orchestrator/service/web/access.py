"""Who is looking at a page, and whether a form they sent may act for them.

Three ways in, the API's identities and rights in each:

* **a session** (HTTPS): `POST /login` with an API token, checked by the server's token check, opens a
  session (`sessions.py`); its cookie is HttpOnly, Secure, SameSite=Strict. At each request the token it
  was opened with is looked at again: revoked or expired, the session ends.
* **a bearer token** in `Authorization: Bearer TOKEN`, checked at each request as the API checks it (for
  scripts; such a request carries no cookie, so its forms need no CSRF token).
* **the Unix socket**, forwarded by its user (`ssh -L 8080:/run/leasewise/api.sock head`): the kernel's
  peer credentials name the caller, as for the API, and no sign-in is asked. The browser still gets a
  session, opened at its first page, so that its forms carry a CSRF token: the forwarded port is reachable
  by any web page the user opens, which could otherwise post forms to it in the user's name. Pages on the
  socket answer only to a Host of localhost, 127.0.0.1 or [::1] (a site that rebinds its own name to
  127.0.0.1 is refused), and a session is good only while the same user calls through the socket.

Every form (`POST`) must also come from the page's own origin when the browser says where it comes from
(`Origin`), and a session's forms must carry its CSRF token.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from fastapi import Request

from orchestrator.service.api import PEER_KEY, TokenCheck
from orchestrator.service.identity import Caller, NotAllowed, NotAuthenticated, caller_for_uid
from orchestrator.service.operations import LeaseService
from orchestrator.service.web.sessions import COOKIE, Session, Sessions

#: the Host a page on the Unix socket answers to (the forwarding user's own machine)
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


class FormRefused(NotAllowed):
    """A form that may not act: from another origin, or without its session's CSRF token."""


@dataclass(frozen=True)
class Visitor:
    caller: Caller
    via: str                       # "session", "bearer" or "unix"
    session: Session | None = None  # what the page's forms are tied to (None: a bearer token)
    new_session: bool = False      # opened by this request: its cookie is to be set

    @property
    def signs_out(self) -> bool:
        """Whether signing out means anything (on the socket the kernel says who calls, each time)."""
        return self.via == "session"


class Doorkeeper:
    def __init__(self, service: LeaseService, admin_group: str, check_token: TokenCheck | None, sessions: Sessions):
        self.service = service
        self.admin_group = admin_group
        self.check_token = check_token
        self.sessions = sessions

    def visitor(self, request: Request) -> Visitor:
        """Who calls (`NotAuthenticated` when no one is signed in, with the reason when a session ended)."""
        peer = request.scope.get(PEER_KEY)
        if peer is not None:
            return self._on_socket(request, caller_for_uid(peer[1], self.admin_group))
        bearer = _bearer(request)
        if bearer is not None:
            if self.check_token is None:
                raise NotAuthenticated("this server takes no tokens")
            return Visitor(self.check_token(bearer), "bearer")
        session = self.sessions.find(request.cookies.get(COOKIE))
        if session is None:
            raise NotAuthenticated("sign in with an API token")
        token = session.caller.token_id
        if token is not None:
            state = self.service.token_state(token)
            if state != "active":
                self.sessions.close(session.id)
                raise NotAuthenticated(f"signed out: token {token} {'has expired' if state == 'expired' else 'was ' + state}")
        return Visitor(session.caller, "session", session)

    @staticmethod
    def same_origin(request: Request) -> None:
        """Refuse a form the browser says comes from another site (its `Origin`, sent with every POST)."""
        origin = request.headers.get("origin")
        if origin is not None and urlsplit(origin).netloc.lower() != request.headers.get("host", "").lower():
            raise FormRefused(f"a form from {origin} may not act here")

    def acting(self, request: Request, form: dict[str, str]) -> Visitor:
        """Who a form acts for: the visitor, once the form is shown to come from their own page."""
        self.same_origin(request)
        visitor = self.visitor(request)
        if visitor.session is not None and (visitor.new_session or not visitor.session.csrf_matches(form.get("csrf"))):
            raise FormRefused("the form is not this session's (no or wrong CSRF token): reload the page and send it again")
        return visitor

    def sign_in(self, token: str) -> Session:
        """A session for the holder of this API token (the token check's own line when it is refused)."""
        if self.check_token is None:
            raise NotAuthenticated("this server takes no tokens")
        return self.sessions.open(self.check_token(token))

    def _on_socket(self, request: Request, caller: Caller) -> Visitor:
        host = _host_name(request.headers.get("host", ""))
        if host not in LOCAL_HOSTS:
            raise NotAllowed(f"the pages on the server's Unix socket answer as localhost only (asked as {host or 'nothing'}): "
                             "open http://localhost:PORT/ through your ssh -L tunnel")
        session = self.sessions.find(request.cookies.get(COOKIE))
        if session is not None and session.caller.via == "unix" and session.caller.user == caller.user:
            return Visitor(caller, "unix", session)
        return Visitor(caller, "unix", self.sessions.open(caller), new_session=True)


def _bearer(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _host_name(host: str) -> str:
    """The name of a Host header, without its port (`[::1]:8080` -> `::1`)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host
