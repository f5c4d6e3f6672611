"""API tokens as the store keeps them: only a salt and a slow salted hash of each secret."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from orchestrator.model.timeutil import as_utc, iso
from orchestrator.state.store.connection import StoreConnection
from orchestrator.state.store.errors import StoreError
from orchestrator.state.store.rows import decode_time, encode_time


@dataclass(frozen=True)
class TokenRecord:
    """An API token as the store keeps it: whose, what it may do, its life; the secret only as a salted
    hash (`salt`, `hash`: never shown, left out of `repr` and `public()`)."""

    id: int
    user: str
    admin: bool
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None
    note: str
    salt: bytes = field(repr=False)
    hash: bytes = field(repr=False)

    def public(self) -> dict[str, Any]:
        """Everything but the salt and the hash, as JSON data."""
        return {"id": self.id, "user": self.user, "admin": self.admin, "created_at": iso(self.created_at),
                "expires_at": iso(self.expires_at), "revoked_at": iso(self.revoked_at),
                "last_used_at": iso(self.last_used_at), "note": self.note}


_TOKEN_COLUMNS = ("id", "user", "admin", "created_at", "expires_at", "revoked_at", "last_used_at", "note", "salt",
                  "hash")


class TokenRepository(StoreConnection):
    """The tokens table (`orchestrator.state.tokens` makes, checks and revokes tokens over it)."""

    def add_token(self, user: str, *, salt: bytes, hash: bytes, created_at: datetime, admin: bool = False,
                  expires_at: datetime | None = None, note: str = "") -> TokenRecord:
        """Store a new token's hash; its id comes back in the record (`orchestrator.state.tokens` makes it)."""
        if not isinstance(user, str) or not user:
            raise StoreError(f"a token needs a user (got {user!r})")
        created = as_utc(created_at, "created_at")
        expires = None if expires_at is None else as_utc(expires_at, "expires_at")
        with self.transaction():
            cur = self._conn.execute(
                "INSERT INTO tokens (user, admin, salt, hash, created_at, expires_at, note) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (user, int(bool(admin)), bytes(salt), bytes(hash), encode_time(created), encode_time(expires),
                 note))
        return self.existing_token(self._inserted_id(cur))

    def existing_token(self, token_id: int) -> TokenRecord:
        """The token with this id, which must exist (a `StoreError` otherwise)."""
        record = self.token(token_id)
        if record is None:
            raise StoreError(f"no token with id {token_id}")
        return record

    def token(self, token_id: int) -> TokenRecord | None:
        row = self._conn.execute(f"SELECT {', '.join(_TOKEN_COLUMNS)} FROM tokens WHERE id = ?",
                                 (token_id,)).fetchone()
        return None if row is None else self._token(row)

    def tokens(self, user: str | None = None) -> list[TokenRecord]:
        """Every token (or `user`'s), by id, revoked and expired ones included."""
        where, params = ("WHERE user = ?", (user,)) if user is not None else ("", ())
        rows = self._conn.execute(f"SELECT {', '.join(_TOKEN_COLUMNS)} FROM tokens {where} ORDER BY id",
                                  params).fetchall()
        return [self._token(row) for row in rows]

    def revoke_token(self, token_id: int, at: datetime) -> TokenRecord:
        """Revoke a token from `at` on; one revoked already keeps its first revocation time."""
        with self.transaction():
            if self._conn.execute("UPDATE tokens SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?",
                                  (encode_time(as_utc(at, "at")), token_id)).rowcount == 0:
                raise StoreError(f"no token with id {token_id}")
            return self.existing_token(token_id)

    def touch_token(self, token_id: int, at: datetime) -> None:
        """Record that the token was just used."""
        with self.transaction():
            if self._conn.execute("UPDATE tokens SET last_used_at = ? WHERE id = ?",
                                  (encode_time(as_utc(at, "at")), token_id)).rowcount == 0:
                raise StoreError(f"no token with id {token_id}")

    @staticmethod
    def _token(row: tuple) -> TokenRecord:
        v = dict(zip(_TOKEN_COLUMNS, row))
        return TokenRecord(id=v["id"], user=v["user"], admin=bool(v["admin"]),
                           created_at=decode_time(v["created_at"]), expires_at=decode_time(v["expires_at"]),
                           revoked_at=decode_time(v["revoked_at"]), last_used_at=decode_time(v["last_used_at"]),
                           note=v["note"], salt=bytes(v["salt"]), hash=bytes(v["hash"]))
