"""Who is calling: a Unix user (known from the socket's peer credentials) or an API token's holder.

libvirt's way: on the local Unix socket the kernel says which user is at the other end (SO_PEERCRED), so
there is no password; on TCP a caller presents a token. Admins are root, the members of
`[auth] admin_group`, and the holders of admin tokens.
"""

from __future__ import annotations

import os
import pwd
import socket
import struct
from dataclasses import dataclass
from datetime import datetime

from orchestrator.model.errors import LeasewiseError
from orchestrator.state.groups import unix_groups


class NotAllowed(LeasewiseError):
    """The caller may not do this (exit code 4)."""

    exit_code = 4


class Refused(LeasewiseError):
    """Well-formed, but the scheduler says no (exit code 3): an extension that does not fit, a placement
    no host meets, a host change that would strand a lease."""

    exit_code = 3


class NotAuthenticated(NotAllowed):
    """The caller could not be identified (no peer credentials, no valid token)."""


@dataclass(frozen=True)
class Caller:
    user: str
    groups: frozenset[str] = frozenset()
    admin: bool = False
    via: str = "local"            # "unix" (peer credentials), "token", "local" (the CLI on its own store)
    token_id: int | None = None   # the token a "token" caller presented, and when it expires (None: never)
    token_expires: datetime | None = None

    def may_act_for(self, owner: str) -> bool:
        return self.admin or self.user == owner


def caller_for_uid(uid: int, admin_group: str) -> Caller:
    """The Unix user with this uid, as a caller (root and `admin_group`'s members are admins)."""
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        raise NotAuthenticated(f"uid {uid} has no user name on the server") from None
    groups = unix_groups(user)
    return Caller(user, groups, admin=uid == 0 or admin_group in groups, via="unix")


def caller_for_user(user: str, admin_group: str, *, admin: bool = False, via: str = "token",
                    token_id: int | None = None, token_expires: datetime | None = None) -> Caller:
    groups = unix_groups(user)
    return Caller(user, groups, admin=admin or admin_group in groups, via=via, token_id=token_id,
                  token_expires=token_expires)


def local_caller(admin_group: str) -> Caller:
    """The CLI working on its own store: whoever can write the store is trusted with it (an admin)."""
    uid = os.getuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    return Caller(user, unix_groups(user), admin=True, via="local")


_PEERCRED = struct.Struct("3i")   # struct ucred: pid, uid, gid


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a connected Unix socket."""
    data = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    return _PEERCRED.unpack(data)


def token_checker(store, admin_group: str, now=None):
    """Authenticates an API token against the store (its salted hash): the token's holder as a caller."""
    from datetime import timezone

    def check(text: str) -> Caller:
        from orchestrator.state.tokens import InvalidToken, authenticate

        try:
            record = authenticate(store, text, (now or (lambda: datetime.now(timezone.utc)))())
        except InvalidToken as exc:
            raise NotAuthenticated(str(exc)) from None
        return caller_for_user(record.user, admin_group, admin=record.admin, via="token", token_id=record.id,
                               token_expires=record.expires_at)

    return check
