"""Web sign-ins: a random session id in a cookie, everything else held by the server.

The cookie carries only the id (32 random bytes): never the API token the visitor signed in with, which the
server does not keep either. A session remembers who signed in, which token proved it (so a revoked or
expired token ends the session at its next request), when it ends (`LIFETIME` after sign-in, or when its
token expires, whichever comes first) and the CSRF token its forms carry. Sessions live in the server's
memory: a restart signs everyone out, as a token they still hold signs them in again.
"""

from __future__ import annotations

import hmac
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from orchestrator.service.identity import Caller

COOKIE = "leasewise_session"
#: the longest a sign-in lasts (a token valid for 90 days does not keep a browser signed in that long)
LIFETIME = timedelta(hours=12)
#: sessions kept at most; past it the one that ends first goes (a flood of sign-ins cannot exhaust memory)
MAX_SESSIONS = 10_000
_ID_BYTES = 32


@dataclass(frozen=True)
class Session:
    id: str
    caller: Caller
    expires: datetime
    csrf: str                     # what this session's forms carry back

    def csrf_matches(self, given: str | None) -> bool:
        return isinstance(given, str) and hmac.compare_digest(given.encode(), self.csrf.encode())


class Sessions:
    """The server's sessions (thread-safe: pages are served from a thread pool)."""

    def __init__(self, now: Callable[[], datetime], lifetime: timedelta = LIFETIME, limit: int = MAX_SESSIONS):
        self._now = now
        self.lifetime = lifetime
        self.limit = limit
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}

    def open(self, caller: Caller) -> Session:
        """A new session for `caller`, ending with its token when that expires first."""
        now = self._now()
        expires = now + self.lifetime
        if caller.token_expires is not None:
            expires = min(expires, caller.token_expires)
        session = Session(secrets.token_urlsafe(_ID_BYTES), caller, expires, secrets.token_urlsafe(_ID_BYTES))
        with self._lock:
            self._prune(now)
            while len(self._sessions) >= self.limit:
                del self._sessions[min(self._sessions.values(), key=lambda s: s.expires).id]
            self._sessions[session.id] = session
        return session

    def find(self, session_id: str | None) -> Session | None:
        """The live session with this id (None: unknown, or ended)."""
        if not session_id:
            return None
        with self._lock:
            session = self._sessions.get(session_id)
            if session is not None and session.expires <= self._now():
                del self._sessions[session_id]
                return None
        return session

    def close(self, session_id: str | None) -> None:
        with self._lock:
            self._sessions.pop(session_id or "", None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def _prune(self, now: datetime) -> None:
        for session_id in [s.id for s in self._sessions.values() if s.expires <= now]:
            del self._sessions[session_id]
