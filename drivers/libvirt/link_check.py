"""`host check`'s look at the libvirt link itself: which transport it uses, whether it works, and, when it
does not, exactly what is missing (the SSH key, the host key, the user's group, the remote helper, a
certificate, a port). Made from the head node with the link's own parameters (the user, address, key,
known_hosts file or certificates libvirt will use), not with leasewise's own SSH setting.

- ssh (`qemu+ssh`, `qemu+libssh2`, `qemu+libssh`): the host's SSH key is checked against the link's
  known_hosts file (the URI's or the inventory's for libssh2/libssh; ~/.ssh/known_hosts for qemu+ssh, which
  runs the OpenSSH client), then the link's user logs in with the link's key and says whether a remote
  helper (virt-ssh-helper, else nc) is there and whether it may use libvirtd's socket.
- tls: the CA, the client certificate and key are read (present, the certificate signed by that CA and
  valid now), then a TLS handshake with libvirtd: its certificate must name the host, and it must accept
  ours (libvirtd sends one confirmation byte once it has checked the client's certificate).
- tcp: only whether libvirtd answers; there is nothing to authenticate.
"""

from __future__ import annotations

import datetime as dt
import getpass
import os
import socket
import ssl
from collections.abc import Mapping
from typing import Any

from drivers.base import CheckItem
from drivers.inventory import HostConfig

from .ssh import import_paramiko
from .transport import SYSTEM_SOCKET, Link, known_hosts_file, link_uri, parse_link

#: what the link's user runs on the host: which helper it has, and whether it may use libvirtd's socket
_PROBE = r"""
if command -v virt-ssh-helper >/dev/null 2>&1; then echo helper=virt-ssh-helper;
elif command -v nc >/dev/null 2>&1; then echo helper=nc; else echo helper=; fi
for s in "$SOCK" /var/run/libvirt/virtqemud-sock; do
  if [ -S "$s" ]; then
    if [ -r "$s" ] && [ -w "$s" ]; then a=rw; else a=denied; fi
    echo "socket=$s $a $(stat -c '%U:%G %a' "$s")"; break
  fi
done
echo "groups=$(id -Gn)"
"""


def link_checks(cfg: HostConfig, timeout_s: float) -> tuple[CheckItem, CheckItem]:
    """The "transport" and "host key" rows of `cfg`'s libvirt link."""
    link = parse_link(link_uri(cfg))
    if link.host is None:
        return (CheckItem("transport", "SKIP", f"{link.describe()}: no network transport"),
                CheckItem("host key", "SKIP", "local link: no SSH"))
    if link.over_ssh:
        return _ssh_link(cfg, link, timeout_s)
    no_ssh = CheckItem("host key", "SKIP", f"{link.transport} link: no SSH host key")
    if link.transport == "tls":
        return _tls_link(link, timeout_s), no_ssh
    if link.transport == "tcp":
        return _tcp_link(link, timeout_s), no_ssh
    return CheckItem("transport", "SKIP", f"{link.describe()}: not checked (transport {link.transport})"), no_ssh


# -- ssh -------------------------------------------------------------------------------------------------------
def _ssh_link(cfg: HostConfig, link: Link, timeout_s: float) -> tuple[CheckItem, CheckItem]:
    paramiko = import_paramiko()
    where = link.describe()
    known = known_hosts_file(cfg)
    try:
        sock = socket.create_connection((link.host, link.port or 22), timeout=timeout_s)
    except OSError as exc:
        return (CheckItem("transport", "FAIL", f"{where}: port: sshd does not answer ({exc.strerror or exc})"),
                CheckItem("host key", "FAIL", "not checked: sshd does not answer"))
    transport = paramiko.Transport(sock)
    try:
        transport.start_client(timeout=timeout_s)
        server_key = transport.get_remote_server_key()
        host_key = _host_key_item(paramiko, cfg, link, known, server_key)
        if host_key.status != "PASS":
            return CheckItem("transport", "FAIL", f"{where}: host key: not pinned (see the host key row)"), host_key
        user = link.user or getpass.getuser()
        why = _authenticate(paramiko, transport, user, link)
        if why is not None:
            return CheckItem("transport", "FAIL", f"{where}: key: {why}"), host_key
        return _remote_side(transport, link, where, user, timeout_s), host_key
    except (paramiko.SSHException, OSError, EOFError) as exc:
        return (CheckItem("transport", "FAIL", f"{where}: {exc or type(exc).__name__}"),
                CheckItem("host key", "FAIL", "not checked: no SSH session"))
    finally:
        transport.close()


def _host_key_item(paramiko: Any, cfg: HostConfig, link: Link, known: str, server_key: Any) -> CheckItem:
    """Whether the key the host's sshd shows is the one the link's known_hosts file pins."""
    shown = f"{server_key.get_name()} {server_key.fingerprint}"
    note = ""
    if link.transport == "ssh" and cfg.known_hosts:
        note = (f" (qemu+ssh runs the OpenSSH client, which reads only this file: the inventory's known_hosts "
                f"{cfg.known_hosts} pins leasewise's own SSH; qemu+libssh2 would pin the link with it too)")
    try:
        keys = paramiko.HostKeys(known)
    except FileNotFoundError:
        return CheckItem("host key", "FAIL", f"host key: {known} does not exist; the host shows {shown}{note}")
    except OSError as exc:
        return CheckItem("host key", "FAIL", f"host key: {known}: {exc.strerror or exc}{note}")
    name = link.host if link.port in (None, 22) else f"[{link.host}]:{link.port}"
    pinned = keys.lookup(name) or {}
    stored = pinned.get(server_key.get_name())
    if stored is None:
        return CheckItem("host key", "FAIL", f"host key: {name} is not in {known} (the host shows {shown}){note}")
    if stored != server_key:
        return CheckItem("host key", "FAIL", f"host key: {name}'s key differs from {known}'s: the host shows "
                                             f"{shown}, the file pins {stored.fingerprint}{note}")
    return CheckItem("host key", "PASS", f"{shown} of {name}, pinned in {known}{note}")


def _authenticate(paramiko: Any, transport: Any, user: str, link: Link) -> str | None:
    """Log in as the link's user with the link's key; why not, or None."""
    keyfile = link.params.get("keyfile")
    if keyfile:
        try:
            key = paramiko.PKey.from_path(os.path.expanduser(keyfile))
        except FileNotFoundError:
            return f"{keyfile} does not exist"
        except (OSError, paramiko.SSHException, ValueError) as exc:
            return f"{keyfile} cannot be read as a private key ({exc})"
        keys = [key]
        named = keyfile
    else:   # (the client's defaults: the agent's keys, then ~/.ssh/id_*)
        keys = list(paramiko.Agent().get_keys())
        for name in ("id_ed25519", "id_ecdsa", "id_rsa"):
            path = os.path.expanduser(f"~/.ssh/{name}")
            if os.path.exists(path):
                try:
                    keys.append(paramiko.PKey.from_path(path))
                except (OSError, paramiko.SSHException, ValueError):
                    continue
        named = "the agent's and ~/.ssh's keys"
        if not keys:
            return "no key to log in with (no keyfile= in the URI, no ssh_key, no agent, no ~/.ssh/id_*)"
    for key in keys:
        try:
            transport.auth_publickey(user, key)
            return None
        except paramiko.AuthenticationException:
            continue
    return f"{user}@{link.host} does not accept {named} (is it in {user}'s authorized_keys there?)"


def _remote_side(transport: Any, link: Link, where: str, user: str, timeout_s: float) -> CheckItem:
    """The link's user on the host: a remote helper there, and libvirtd's socket usable by it."""
    socket_path = link.params.get("socket") or SYSTEM_SOCKET
    channel = transport.open_session(timeout=timeout_s)
    try:
        channel.settimeout(timeout_s)
        channel.exec_command(f"SOCK='{socket_path}'; export SOCK; {_PROBE}")
        out = b""
        while True:
            chunk = channel.recv(4096)
            if not chunk:
                break
            out += chunk
    finally:
        channel.close()
    facts = dict(line.split("=", 1) for line in out.decode(errors="replace").splitlines() if "=" in line)
    helper = facts.get("helper", "")
    if not helper:
        return CheckItem("transport", "FAIL", f"{where}: helper: neither virt-ssh-helper nor nc is on {user}'s PATH "
                                              "there (install libvirt-daemon-system, or netcat-openbsd)")
    sock = facts.get("socket", "")
    if not sock:
        return CheckItem("transport", "FAIL", f"{where}: libvirtd: no socket at {socket_path} (is libvirtd running?)")
    path, access, *owner = sock.split()
    if access != "rw":
        group = owner[0].split(":")[1] if owner else "?"
        return CheckItem("transport", "FAIL", f"{where}: group: {user} may not use {path} ({' '.join(owner)}); "
                                              f"add {user} to group {group} there (usermod -aG {group} {user}); "
                                              f"{user}'s groups: {facts.get('groups', '?')}")
    return CheckItem("transport", "PASS", f"{where}: key accepted, {helper}, {path} usable "
                                          f"({' '.join(owner)}; {user} in {facts.get('groups', '?')})")


# -- tls -------------------------------------------------------------------------------------------------------
def _tls_link(link: Link, timeout_s: float) -> CheckItem:
    from cryptography import x509

    where = link.describe()
    ca, cert, key = link.pki_files
    for path, what in ((ca, "CA certificate"), (cert, "client certificate"), (key, "client key")):
        if not os.path.isfile(path):
            return CheckItem("transport", "FAIL", f"{where}: certificate: the {what} {path} is missing")
        if not os.access(path, os.R_OK):
            return CheckItem("transport", "FAIL", f"{where}: certificate: the {what} {path} cannot be read")
    try:
        with open(ca, "rb") as handle:
            ca_cert = x509.load_pem_x509_certificate(handle.read())
        with open(cert, "rb") as handle:
            client = x509.load_pem_x509_certificate(handle.read())
    except ValueError as exc:
        return CheckItem("transport", "FAIL", f"{where}: certificate: not a PEM certificate ({exc})")
    try:
        client.verify_directly_issued_by(ca_cert)
    except Exception:   # (ValueError, TypeError or InvalidSignature: not this CA's)
        return CheckItem("transport", "FAIL", f"{where}: certificate: {cert} ({client.subject.rfc4514_string()}) is "
                                              f"not signed by the CA {ca} ({ca_cert.subject.rfc4514_string()})")
    now = dt.datetime.now(dt.timezone.utc)
    start, end = client.not_valid_before_utc, client.not_valid_after_utc
    if not start <= now <= end:
        return CheckItem("transport", "FAIL", f"{where}: certificate: {cert} is valid only {start:%Y-%m-%d} to "
                                              f"{end:%Y-%m-%d}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(ca)
    context.load_cert_chain(cert, key)
    try:
        with socket.create_connection((link.host, link.port or 16514), timeout=timeout_s) as raw:
            with context.wrap_socket(raw, server_hostname=link.host) as tls:
                confirmed = tls.recv(1)
                server = tls.getpeercert() or {}
    except ssl.SSLCertVerificationError as exc:
        return CheckItem("transport", "FAIL", f"{where}: certificate: libvirtd's certificate is not one this CA "
                                              f"signed for {link.host} ({exc.verify_message})")
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError) as exc:
        return CheckItem("transport", "FAIL", f"{where}: certificate: libvirtd refused our client certificate "
                                              f"{cert} ({exc})")
    except OSError as exc:
        return CheckItem("transport", "FAIL", f"{where}: port: libvirtd does not answer on TLS ({exc.strerror or exc})")
    if confirmed != b"\x01":
        return CheckItem("transport", "FAIL", f"{where}: certificate: libvirtd refused our client certificate {cert}")
    subject = _common_name(server)
    return CheckItem("transport", "PASS", f"{where}: CA {ca}, client {client.subject.rfc4514_string()} "
                                          f"(until {end:%Y-%m-%d}), server CN={subject} verified")


# -- tcp -------------------------------------------------------------------------------------------------------
def _tcp_link(link: Link, timeout_s: float) -> CheckItem:
    where = link.describe()
    try:
        socket.create_connection((link.host, link.port or 16509), timeout=timeout_s).close()
    except OSError as exc:
        return CheckItem("transport", "FAIL", f"{where}: port: libvirtd does not answer ({exc.strerror or exc})")
    return CheckItem("transport", "PASS", f"{where}: no authentication, no encryption (anyone who reaches this "
                                          "port manages the host: a lab's transport)")


def _common_name(peer_cert: Mapping[str, Any]) -> str:
    """The commonName in a certificate's subject as `SSLSocket.getpeercert` gives it (a tuple of relative
    names, each a tuple of (name, value) pairs), or "?"."""
    for relative_name in peer_cert.get("subject", ()):
        for pair in relative_name:
            if pair[0] == "commonName":
                return str(pair[1])
    return "?"
