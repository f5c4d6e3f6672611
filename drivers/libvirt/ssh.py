"""SSH to a host (paramiko), for what libvirt cannot do: copy save images between hosts, and let the host
check look at the image directory and the host's clock.

Host keys come from the host's `known_hosts` file (else the user's) under RejectPolicy: an unknown key is
refused, never trusted on first use. The key and known_hosts paths may start with `~`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from drivers.errors import DriverUnavailable, HostUnreachable, OperationFailed
from drivers.inventory import HostConfig, split_ssh_target


class SSHFailed(Exception):
    """Why an SSH connection could not be made, in words for an operator. `unreachable` when the network,
    not the keys or the credentials, is at fault (so trying again may help)."""

    def __init__(self, reason: str, *, unreachable: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.unreachable = unreachable


def import_paramiko() -> Any:
    try:
        import paramiko
    except ImportError:
        raise DriverUnavailable("moving save images needs paramiko: pip install paramiko") from None
    return paramiko


def open_ssh(cfg: HostConfig, timeout_s: float) -> Any:
    """A connected `paramiko.SSHClient` to `cfg.ssh` (the caller closes it); `SSHFailed` says why not."""
    paramiko = import_paramiko()
    try:
        user, hostname, port = split_ssh_target(cfg.ssh or "")
    except ValueError:
        raise SSHFailed(f"{cfg.ssh!r} is not user@host[:port]") from None
    client = paramiko.SSHClient()
    try:
        if cfg.known_hosts:
            client.load_host_keys(os.path.expanduser(cfg.known_hosts))
        else:
            client.load_system_host_keys()
    except OSError as exc:
        client.close()
        raise SSHFailed(f"known_hosts {cfg.known_hosts}: {exc.strerror or exc}") from None
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        client.connect(
            hostname, port=port, username=user,
            key_filename=os.path.expanduser(cfg.ssh_key) if cfg.ssh_key else None,
            timeout=timeout_s, banner_timeout=timeout_s, auth_timeout=timeout_s,
            allow_agent=cfg.ssh_key is None, look_for_keys=cfg.ssh_key is None,
        )
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise SSHFailed(f"host key mismatch ({exc})") from None
    except paramiko.AuthenticationException as exc:
        client.close()
        raise SSHFailed(f"authentication failed ({exc})") from None
    except paramiko.SSHException as exc:  # RejectPolicy lands here for a host missing from known_hosts
        client.close()
        raise SSHFailed(str(exc) or type(exc).__name__) from None
    except OSError as exc:
        client.close()
        raise SSHFailed(str(exc) or type(exc).__name__, unreachable=True) from None
    return client


@contextmanager
def sftp_session(cfg: HostConfig, timeout_s: float, needed_for: str) -> Iterator[Any]:
    """An SFTP session to `cfg`'s ssh target, closed on leaving; failures are driver errors naming the host.

    `needed_for` says in an error what the session was for when the host has no ssh setting.
    """
    if not cfg.ssh:
        raise OperationFailed(f"host {cfg.name} has no ssh setting in the inventory (needed to {needed_for})")
    try:
        client = open_ssh(cfg, timeout_s)
    except SSHFailed as exc:
        error = HostUnreachable if exc.unreachable else OperationFailed
        raise error(f"ssh to {cfg.name} ({cfg.ssh}): {exc.reason}") from None
    try:
        sftp = client.open_sftp()
        try:
            yield sftp
        finally:
            sftp.close()
    finally:
        client.close()
