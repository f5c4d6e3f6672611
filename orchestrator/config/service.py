"""[serve], [auth] and [client]: where the server listens, who may do what on it, and where the CLI sends
its commands."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from orchestrator.config.values import (
    read_integer,
    read_name,
    read_optional_path,
    read_timeout,
    set_field,
    value_kind,
)
from orchestrator.model.errors import ConfigError
from orchestrator.model.numbers import ascii_whole


@dataclass(frozen=True)
class AuthConfig:
    """Who may do what on the server: admins are the Unix users of `admin_group` (and root), and the
    holders of admin tokens."""

    admin_group: str = "leasewise-admin"

    def __post_init__(self) -> None:
        set_field(self, "admin_group", read_name("auth.admin_group", self.admin_group))


@dataclass(frozen=True)
class ServeConfig:
    """Where `leasewise serve` listens: a Unix socket (callers known by their peer credentials) and, when
    `listen` is set, HTTPS on TCP (callers present API tokens)."""

    socket: str = "/run/leasewise/api.sock"
    socket_group: str = "leasewise"          # the socket's group (mode socket_mode); "" keeps the server's own
    socket_mode: int = 0o660
    listen: str = ""                         # host:port for HTTPS, e.g. "0.0.0.0:8443"; "" = Unix socket only
    tls_cert: str | None = None              # PEM certificate (chain) for `listen`
    tls_key: str | None = None               # its PEM private key
    # what one client may cost (docs/security.md): each listener's connections (and one peer's: a Unix user,
    # an address), a request's time and size, a user's lease submissions (a bucket of submit_burst
    # refilled at submits_per_minute; 0: no limit)
    socket_max_connections: int = 1024
    listen_max_connections: int = 512
    peer_max_connections: int = 32
    header_timeout: timedelta = timedelta(seconds=10)     # TLS handshake and a request's headers
    body_timeout: timedelta = timedelta(seconds=30)       # a request's body, and a stalled reader of an answer
    keepalive_timeout: timedelta = timedelta(seconds=5)   # an idle connection between requests
    max_request_body: int = 1024 * 1024      # bytes
    submit_burst: int = 20
    submits_per_minute: int = 60
    # requests worked on at once (the rest wait their turn): under Python's one interpreter lock, more
    # threads make each request slower, the holder of the scheduler's lock among them
    request_threads: int = 8

    def __post_init__(self) -> None:
        p = "serve."
        for name, most in (("socket_max_connections", 65536), ("listen_max_connections", 65536),
                           ("peer_max_connections", 65536),
                           ("max_request_body", 1 << 30), ("submit_burst", 100_000), ("submits_per_minute", 100_000),
                           ("request_threads", 1024)):
            number = read_integer(p + name, getattr(self, name), minimum=0 if name == "submits_per_minute" else 1)
            if number > most:
                raise ConfigError(p + name, f"must be at most {most} (got {number})")
            set_field(self, name, number)
        for name in ("header_timeout", "body_timeout", "keepalive_timeout"):
            set_field(self, name, read_timeout(p + name, getattr(self, name)))
        set_field(self, "socket", read_optional_path(p + "socket", self.socket) or "")
        if not self.socket:
            raise ConfigError(p + "socket", "must be an absolute file path")
        if not isinstance(self.socket_group, str):
            raise ConfigError(p + "socket_group", f"must be a group name (got {value_kind(self.socket_group)})")
        mode = self.socket_mode
        if isinstance(mode, str):
            try:
                mode = int(mode, 8)
            except ValueError:
                raise ConfigError(p + "socket_mode", f"must be an octal mode such as \"0660\" (got {mode!r})") from None
        if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o777:
            raise ConfigError(p + "socket_mode", f"must be a mode from 0 to 0777 (got {value_kind(mode)})")
        set_field(self, "socket_mode", mode)
        if not isinstance(self.listen, str):
            raise ConfigError(p + "listen", f"must be host:port (got {value_kind(self.listen)})")
        if self.listen:
            host, _, port = self.listen.rpartition(":")
            port_number = ascii_whole(port)
            if not host or port_number is None or not 0 < port_number < 65536:
                raise ConfigError(p + "listen", f"must be host:port with a port from 1 to 65535 (got {self.listen!r})")
            if not self.tls_cert or not self.tls_key:
                raise ConfigError(p + "listen", "needs tls_cert and tls_key: callers on TCP present tokens, "
                                                "which must not cross the network in clear")
        for name in ("tls_cert", "tls_key"):
            set_field(self, name, read_optional_path(p + name, getattr(self, name)))


@dataclass(frozen=True)
class ClientConfig:
    """Where the CLI sends its commands: a server (`unix:/run/leasewise/api.sock` or `https://head:8443`),
    or none (the CLI works on its local store)."""

    server: str = ""
    ca: str | None = None                    # CA bundle that signed the server's certificate (https)
    token_file: str | None = None            # where the API token is (https); default $LEASEWISE_TOKEN

    def __post_init__(self) -> None:
        p = "client."
        if not isinstance(self.server, str) or (self.server and not self.server.startswith(("unix:", "https://", "http://"))):
            raise ConfigError(p + "server", f"must be unix:PATH or an https:// URL (got {value_kind(self.server)})")
        for name in ("ca", "token_file"):
            set_field(self, name, read_optional_path(p + name, getattr(self, name)))
