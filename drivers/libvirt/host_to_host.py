"""A file copied straight from one host to another: the source host's own ssh client pushes it to the
destination's `ssh` target, so the bytes never pass through this machine (which only starts the copy, over
leasewise's own SSH to the source, and checks the result).

The source logs in with its `peer_ssh_key` and checks the destination's host key against its
`peer_known_hosts` (a real cluster's admin sets both up, as for Nova's host-to-host copies: docs/cluster.md).
The copy is written under the caller's temporary name; checking and renaming it are the caller's.

`push` answers None when the source's ssh could not reach or log in to the destination (ssh's own exit code
255, also when the link dropped mid-copy): the caller removes whatever it may have written and relays the
file through this machine instead.
"""

from __future__ import annotations

import logging
import posixpath
import shlex

from drivers.errors import HostUnreachable, OperationFailed
from drivers.inventory import HostConfig, split_ssh_target

from .ssh import SSHFailed, import_paramiko, open_ssh

log = logging.getLogger(__name__)

#: ssh's exit code when it, not the remote command, failed (no route, refused, host key, key not accepted)
SSH_FAILED = 255
#: the source's exit code when the file to copy is not there
NO_FILE = 3
#: how often the source's ssh asks whether the destination is still there, and how many silent answers end it
ALIVE_INTERVAL_S = 5
ALIVE_COUNT = 3


def can_push(src: HostConfig, dst: HostConfig) -> bool:
    """Whether a copy from `src` to `dst` may go host to host: src has a key to copy with, dst an ssh target,
    and this machine reaches src over ssh (to start the copy)."""
    return bool(src.peer_ssh_key and src.ssh and dst.ssh)


def push_command(src: HostConfig, dst: HostConfig, path: str, partial: str, connect_timeout_s: float) -> str:
    """The shell command run on `src`: print the file's size, then send it to `dst`, written there as `partial`
    (its directory made if missing)."""
    user, address, port = split_ssh_target(dst.ssh or "")
    q = shlex.quote
    options = ["-F", "none", "-T", "-i", src.peer_ssh_key or "", "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
               "-o", "StrictHostKeyChecking=yes", "-o", f"ConnectTimeout={max(1, int(connect_timeout_s))}",
               "-o", f"ServerAliveInterval={ALIVE_INTERVAL_S}", "-o", f"ServerAliveCountMax={ALIVE_COUNT}",
               "-o", "LogLevel=ERROR", "-p", str(port)]
    if src.peer_known_hosts:
        options += ["-o", f"UserKnownHostsFile={src.peer_known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null"]
    if user:
        options += ["-l", user]
    remote = f"mkdir -p -- {q(posixpath.dirname(partial))} && cat > {q(partial)}"
    return (f"test -f {q(path)} || exit {NO_FILE}; stat -c %s -- {q(path)} || exit {NO_FILE}; "
            f"exec ssh {' '.join(q(o) for o in options)} {q(address)} {q(remote)} < {q(path)}")


def push(src: HostConfig, dst: HostConfig, path: str, partial: str, timeout_s: float) -> int | None:
    """Copy `path` on `src` to `partial` on `dst`, host to host; the bytes sent, or None when src's ssh could
    not reach dst (`partial` may be left half written). `HostUnreachable` when this machine loses src meanwhile."""
    try:
        client = open_ssh(src, timeout_s)
    except SSHFailed as exc:
        error = HostUnreachable if exc.unreachable else OperationFailed
        raise error(f"ssh to {src.name} ({src.ssh}): {exc.reason}") from None
    paramiko = import_paramiko()
    try:
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(ALIVE_INTERVAL_S)
        _, stdout, stderr = client.exec_command(push_command(src, dst, path, partial, timeout_s))
        out = stdout.read().decode(errors="replace")
        status = stdout.channel.recv_exit_status()
        err = stderr.read().decode(errors="replace").strip()
    except (OSError, EOFError, paramiko.SSHException) as exc:
        raise HostUnreachable(f"copy {path} {src.name} -> {dst.name}: ssh to {src.name}: "
                              f"{exc or type(exc).__name__}") from None
    finally:
        client.close()
    if status == NO_FILE:
        raise OperationFailed(f"move_state: no save image at {path} on {src.name}")
    if status == SSH_FAILED:
        log.warning("%s cannot copy to %s host to host (%s)", src.name, dst.name, err or "ssh failed")
        return None
    if status == -1:   # (the channel closed without a status: this machine lost the source)
        raise HostUnreachable(f"copy {path} {src.name} -> {dst.name}: the ssh session to {src.name} closed")
    if status != 0:
        raise OperationFailed(f"copy {path} {src.name} -> {dst.name}: {err or f'exit status {status}'}")
    try:
        return int(out.split()[0])
    except (IndexError, ValueError):
        raise OperationFailed(f"copy {path} {src.name} -> {dst.name}: {src.name} gave no size "
                              f"({out.strip()[:80]!r})") from None
