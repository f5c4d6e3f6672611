"""API tokens: made once, shown once, kept only as a salted slow hash, checked on every call of the API.

A token's text is `lw_<id>_<secret>`: the id finds the stored record in one lookup, the secret (32 random
bytes from `secrets`, URL-safe base64) is what proves the caller. The store keeps a random salt and the
scrypt hash of the secret, never the secret itself, so a copy of the store does not let anyone call the API.
scrypt is slow on purpose (about 16 MiB and tens of milliseconds per check); a wrong secret is found with
`hmac.compare_digest`, in constant time. Nothing is cached between calls: a revocation takes effect at once,
in every process.

These are plain functions of a `Store`, for the local `leasewise token` commands and the server alike.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import datetime, timedelta
from typing import Any

from orchestrator.model.errors import InvalidRequest, LeasewiseError
from orchestrator.model.quota import check_user
from orchestrator.model.timeutil import as_utc, end_of
from orchestrator.state.store import Store, StoreError, TokenRecord

PREFIX = "lw"
SECRET_BYTES = 32
SALT_BYTES = 16
#: scrypt's cost: n = 2**14, r = 8 (16 MiB, RFC 7914's interactive figure), p = 1
SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 32, "maxmem": 64 * 2**20}
#: `lw_<id>_<43 characters of URL-safe base64>`
_TEXT = re.compile(rf"{PREFIX}_([1-9][0-9]{{0,18}})_([A-Za-z0-9_-]{{43}})")
_MAX_ID = 2**63 - 1
MAX_NOTE = 200


class InvalidToken(LeasewiseError):
    """A token that does not let its bearer in; the message is one line (`token 7 has expired`)."""


def _digest(secret: str, salt: bytes) -> bytes:
    return hashlib.scrypt(secret.encode("ascii"), salt=salt, **SCRYPT)


def check_note(note: str, field: str = "note") -> str:
    """A token's note: one line of at most `MAX_NOTE` printable characters."""
    if not isinstance(note, str) or len(note) > MAX_NOTE or any(not c.isprintable() for c in note):
        raise InvalidRequest(field, f"must be one line of at most {MAX_NOTE} printable characters")
    return note


def create_token(store: Store, user: str, *, admin: bool = False, expires: timedelta | None, now: datetime,
                 note: str = "") -> tuple[str, TokenRecord]:
    """Make a token for `user` (an admin token with `admin`), valid until `now + expires` (None: until
    revoked). Returns the text, which nothing can show again, and the stored record."""
    check_user(user)
    check_note(note)
    now = as_utc(now, "now")
    if expires is not None and expires <= timedelta(0):
        raise InvalidRequest("expires", "must be a duration greater than zero, or never")
    expires_at = None if expires is None else end_of(now, expires, "expires")
    secret = secrets.token_urlsafe(SECRET_BYTES)
    salt = secrets.token_bytes(SALT_BYTES)
    record = store.add_token(user, admin=admin, salt=salt, hash=_digest(secret, salt), created_at=now,
                             expires_at=expires_at, note=note)
    return f"{PREFIX}_{record.id}_{secret}", record


def authenticate(store: Store, text: str, now: datetime) -> TokenRecord:
    """The token record `text` proves, after recording its use; `InvalidToken` otherwise: `not a leasewise
    token` (malformed), `unknown token` (no such id, or a wrong secret: the same answer, so an id cannot be
    probed), `token 7 was revoked`, `token 7 has expired` (from its expiry time on)."""
    match = _TEXT.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None or int(match.group(1)) > _MAX_ID:
        raise InvalidToken("not a leasewise token")
    token_id, secret = int(match.group(1)), match.group(2)
    record = store.token(token_id)
    if record is None:
        _digest(secret, secrets.token_bytes(SALT_BYTES))   # as long as a wrong secret takes
        raise InvalidToken("unknown token")
    if not hmac.compare_digest(_digest(secret, record.salt), record.hash):
        raise InvalidToken("unknown token")
    now = as_utc(now, "now")
    if record.revoked_at is not None:
        raise InvalidToken(f"token {record.id} was revoked")
    if record.expires_at is not None and now >= record.expires_at:
        raise InvalidToken(f"token {record.id} has expired")
    store.touch_token(record.id, now)
    return store.existing_token(record.id)


def revoke_token(store: Store, token_id: int, now: datetime) -> dict[str, Any]:
    """Revoke a token (again: no change); its record as JSON data, `already` saying whether it was."""
    before = store.token(token_id)
    if before is None:
        raise StoreError(f"no token with id {token_id}")
    record = store.revoke_token(token_id, as_utc(now, "now"))
    return {**record.public(), "already": before.revoked_at is not None}


def token_state(record: TokenRecord, now: datetime) -> str:
    """`revoked`, `expired` (from its expiry time on) or `active`, as `authenticate` would find it."""
    if record.revoked_at is not None:
        return "revoked"
    if record.expires_at is not None and as_utc(now, "now") >= record.expires_at:
        return "expired"
    return "active"


def list_tokens(store: Store, user: str | None = None, *, now: datetime) -> list[dict[str, Any]]:
    """Every token (or `user`'s) as JSON data with its state at `now`, never its hash."""
    return [{**record.public(), "state": token_state(record, now)} for record in store.tokens(user)]
