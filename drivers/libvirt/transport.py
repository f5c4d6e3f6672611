"""How a libvirt link reaches a host: its transport (ssh, tls, tcp, a local socket), the URI leasewise opens
(`link_uri`), the URI a peer host's libvirtd opens for a peer-to-peer migration (`peer_uri`), and what an
operator must fix when a link fails (`what_is_missing`, from libvirt's own error text).

libvirt's `qemu+ssh://` transport runs the OpenSSH client, which checks host keys against the ~/.ssh/
known_hosts of the user running leasewise and ignores a `known_hosts=` URI parameter; `qemu+libssh2://` and
`qemu+libssh://` honour it. So for those two the inventory's `known_hosts` (and `ssh_key`) are the link's
too: `link_uri` adds them as `known_hosts=` and `keyfile=` (with `sshauth=privkey`) unless the URI names its
own. For `qemu+ssh://`
only `keyfile=` can be added; its host key is whatever ~/.ssh/known_hosts says (`host check` says so).

A peer's URI is opened by the source host's libvirtd, on the source host: file names in it (a key, a
known_hosts file, a TLS pkipath) are the source host's. The inventory's `peer_uri` says it; without one it
is the host's `uri` as written (nothing of the head node's own files is added to it).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from drivers.inventory import HostConfig

#: libvirt's transports that run over SSH (the OpenSSH client, libssh2, libssh)
SSH_TRANSPORTS = ("ssh", "libssh2", "libssh")
#: the transports whose URI takes a known_hosts= parameter libvirt honours
PINNING_TRANSPORTS = ("libssh2", "libssh")
DEFAULT_PORTS = {"ssh": 22, "libssh2": 22, "libssh": 22, "tls": 16514, "tcp": 16509}
#: where libvirt's TLS client looks without a pkipath (root; another user: ~/.pki/libvirt)
DEFAULT_CA = "/etc/pki/CA/cacert.pem"
DEFAULT_CLIENT_CERT = "/etc/pki/libvirt/clientcert.pem"
DEFAULT_CLIENT_KEY = "/etc/pki/libvirt/private/clientkey.pem"
#: the socket a remote helper (virt-ssh-helper or nc) connects to for qemu:///system
SYSTEM_SOCKET = "/var/run/libvirt/libvirt-sock"


@dataclass(frozen=True)
class Link:
    """A libvirt URI taken apart: its transport and where it goes."""

    uri: str
    driver: str                       # qemu, test, ...
    transport: str                    # ssh | libssh2 | libssh | tls | tcp | unix | local
    user: str | None
    host: str | None
    port: int | None
    params: dict[str, str]

    @property
    def over_ssh(self) -> bool:
        return self.transport in SSH_TRANSPORTS

    @property
    def address(self) -> str:
        """host:port the link connects to (empty for a local one)."""
        if self.host is None:
            return ""
        return f"{self.host}:{self.port}" if self.port is not None else self.host

    def describe(self) -> str:
        """`ssh (libssh2) leasewise@10.77.0.11:22`, `tls 10.77.0.11:16514`, `local (qemu:///system)`."""
        if self.host is None:
            return f"local ({self.uri})"
        who = f"{self.user}@" if self.user else ""
        if self.over_ssh:
            client = {"ssh": "OpenSSH", "libssh2": "libssh2", "libssh": "libssh"}[self.transport]
            return f"ssh ({client}) {who}{self.address}"
        return f"{self.transport} {who}{self.address}"

    @property
    def pki_files(self) -> tuple[str, str, str]:
        """(CA, client certificate, client key) the TLS client reads, with this URI's pkipath if any."""
        pki = self.params.get("pkipath")
        if pki:
            return (os.path.join(pki, "cacert.pem"), os.path.join(pki, "clientcert.pem"),
                    os.path.join(pki, "clientkey.pem"))
        return DEFAULT_CA, DEFAULT_CLIENT_CERT, DEFAULT_CLIENT_KEY


def parse_link(uri: str) -> Link:
    parts = urlsplit(uri)
    driver, _, transport = parts.scheme.partition("+")
    host = parts.hostname
    if not transport:
        transport = "tls" if host else "local"   # (libvirt: a remote URI without a transport is TLS)
    port = parts.port if host else None
    if host and port is None:
        port = DEFAULT_PORTS.get(transport)
    return Link(uri=uri, driver=driver, transport=transport, user=parts.username, host=host, port=port,
                params=dict(parse_qsl(parts.query, keep_blank_values=True)))


def link_uri(cfg: HostConfig) -> str:
    """The URI leasewise opens for `cfg`: its `uri`, with the inventory's `ssh_key` (and, where libvirt
    honours it, `known_hosts`) added for an SSH transport unless the URI names its own."""
    link = parse_link(cfg.uri)
    if not link.over_ssh:
        return cfg.uri
    extra: dict[str, str] = {}
    if cfg.ssh_key and "keyfile" not in link.params:
        extra["keyfile"] = os.path.expanduser(cfg.ssh_key)
        if link.transport in PINNING_TRANSPORTS and "sshauth" not in link.params:
            extra["sshauth"] = "privkey"   # (that key, never a prompt for a password)
    if cfg.known_hosts and link.transport in PINNING_TRANSPORTS and "known_hosts" not in link.params:
        extra["known_hosts"] = os.path.expanduser(cfg.known_hosts)
    if not extra:
        return cfg.uri
    parts = urlsplit(cfg.uri)
    query = urlencode([*parse_qsl(parts.query, keep_blank_values=True), *extra.items()], safe="/~")
    return urlunsplit(parts._replace(query=query))


def peer_uri(cfg: HostConfig) -> str:
    """The URI another host's libvirtd opens to reach `cfg` (a peer-to-peer migration's destination)."""
    return cfg.peer_uri or cfg.uri


def known_hosts_file(cfg: HostConfig) -> str:
    """The known_hosts file the SSH link to `cfg` checks the host key against."""
    link = parse_link(link_uri(cfg))
    if link.transport in PINNING_TRANSPORTS:
        return os.path.expanduser(link.params.get("known_hosts") or "~/.ssh/known_hosts")
    return os.path.expanduser("~/.ssh/known_hosts")   # the OpenSSH client's (qemu+ssh)


# -- what a failed link lacks -------------------------------------------------------------------------------

#: (pattern in libvirt's error, what is missing), the first match wins
_MISSING: tuple[tuple[str, str], ...] = (
    (r"host key verification failed|ssh host key .* was not accepted|differs from stored identity",
     "host key: the host's SSH key is not the one in known_hosts"),
    (r"username/publickey combination invalid|permission denied \(publickey|authentication with private key .*"
     r"has failed|no auth method succeeded|all authentication methods failed",
     "key: the SSH key is not accepted (not in the user's authorized_keys, or unreadable)"),
    (r"remote command terminated with non-zero code: 127|virt-ssh-helper: not found|nc: not found",
     "helper: neither virt-ssh-helper nor nc runs there (install libvirt-daemon-system or netcat-openbsd)"),
    (r"remote command terminated with non-zero code|failed to connect socket to .*libvirt-sock.*permission denied",
     "group: the remote helper cannot use libvirtd's socket (is the SSH user in the host's libvirt group?)"),
    (r"cannot read ca certificate", "certificate: the CA certificate is missing"),
    (r"cannot read certificate|cannot read private key|our own certificate .* failed validation",
     "certificate: this side's client certificate or key is missing or not signed by the CA"),
    (r"unable to read tls confirmation|certificate .* not trusted|failed to verify peer's certificate|"
     r"owner does not match the hostname|tls handshake failed",
     "certificate: the two sides do not trust each other's certificates (client certificate missing or from "
     "another CA, or a server certificate that does not name the host)"),
    (r"connection refused|no route to host|network is unreachable|timed out|unable to connect to server",
     "port: nothing answers at the address (libvirtd or sshd not listening, or a firewall)"),
)


def what_is_missing(error: str) -> str | None:
    """What an operator must fix for a link that failed with libvirt's `error`, or None if unrecognised."""
    text = error.lower()
    for pattern, missing in _MISSING:
        if re.search(pattern, text):
            return missing
    return None
