"""[serve], [auth] and [client]: where the server listens, who may do what on it, and where the CLI sends
its commands."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.config.values import read_name, read_optional_path, set_field, value_kind
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

    def __post_init__(self) -> None:
        p = "serve."
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
            number = ascii_whole(port)
            if not host or number is None or not 0 < number < 65536:
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
