"""A VM's memory as a file: save (suspend) and restore (resume) through libvirt, and the save image copied
between hosts (or removed) when the hosts do not share the storage it is on. A VM whose disks (its overlay,
its seed) are on storage the two hosts do not share has them copied with it, so it can be restored there.

A copy goes host to host when the source has a key to copy with (`peer_ssh_key`: host_to_host.py), so a
large image does not cross this machine's link twice; else, or when the source cannot reach the destination,
it is relayed through this machine over SFTP. Either way every file copied is checksummed on the destination
host against the source's.

Save and restore check the domain's state first, so a retry after a lost reply does not fail on work the
first attempt did. A copy is written under a temporary name and renamed, so a host never sees half an
image under the real name.
"""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import socket
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

from drivers.base import OperationReport
from drivers.errors import DriverError, HostUnreachable, OperationFailed, VMAlreadyExists
from drivers.inventory import HostConfig

from .block_migration import LocalDisk, local_disks
from .connection import Connections
from .host_to_host import can_push, push
from .lifecycle import Lifecycle
from .ssh import sftp_session

log = logging.getLogger(__name__)

COPY_CHUNK_BYTES = 1024 * 1024


class StateTransfer:
    """suspend, resume, move_state and remove_state of the libvirt driver."""

    def __init__(self, connections: Connections, lifecycle: Lifecycle, ssh_timeout_s: float,
                 checksum: Callable[[str, str], str | None]):
        """`checksum(host, path)`: the SHA-256 of a file as the host computes it (None: no such file)."""
        self._checksum = checksum
        self._connections = connections
        self._lifecycle = lifecycle
        self._ssh_timeout_s = ssh_timeout_s

    # -- save and restore ------------------------------------------------------------------------

    def suspend(self, vm: str, state_path: str, bypass_cache: bool = False) -> OperationReport:
        lv = self._connections.libvirt
        host = self._lifecycle.find(vm)
        attempted = False

        def save(conn: Any) -> None:
            nonlocal attempted
            dom = conn.lookupByName(vm)
            if not dom.isActive():
                state, reason = dom.state()
                if attempted and state == lv.VIR_DOMAIN_SHUTOFF and reason == lv.VIR_DOMAIN_SHUTOFF_SAVED:
                    return  # the earlier attempt saved it; only the reply was lost
                raise OperationFailed(f"suspend {vm} on {host}: VM is not running")
            attempted = True
            if bypass_cache:
                dom.saveFlags(state_path, None, lv.VIR_DOMAIN_SAVE_BYPASS_CACHE)
            else:
                dom.save(state_path)

        began = time.perf_counter()
        self._connections.call(host, f"save {vm} to {state_path}", save, vm)
        seconds = time.perf_counter() - began
        return OperationReport("suspend", vm, host, seconds, self._file_size(host, state_path))

    def resume(self, vm: str, state_path: str, host: str) -> OperationReport:
        lv = self._connections.libvirt
        call = self._connections.call
        self._connections.host_config(host)
        running, _ = self._lifecycle.where_active(vm)
        if running is not None:
            raise VMAlreadyExists(f"VM {vm!r} is already running on {running}")

        def image_name(conn: Any) -> str | None:
            return ET.fromstring(conn.saveImageGetXMLDesc(state_path, 0)).findtext("name")

        name = call(host, f"read save image {state_path}", image_name)
        if name != vm:
            raise OperationFailed(f"resume {vm} on {host}: {state_path} holds VM {name!r}")
        attempted = False

        def restore(conn: Any) -> None:
            nonlocal attempted
            try:
                if conn.lookupByName(vm).isActive():
                    if attempted:
                        return  # the earlier attempt restored it; only the reply was lost
                    raise VMAlreadyExists(f"VM {vm!r} is already running on {host}")
            except lv.libvirtError as exc:
                if not self._connections.is_no_domain(exc):
                    raise
            attempted = True
            conn.restore(state_path)

        began = time.perf_counter()
        call(host, f"restore {vm} from {state_path}", restore, vm)
        seconds = time.perf_counter() - began

        def persist(conn: Any) -> None:
            # Restored on another host the domain is transient there; define it so stop and a daemon
            # restart find it like any other.
            dom = conn.lookupByName(vm)
            if not dom.isPersistent():
                conn.defineXML(dom.XMLDesc(lv.VIR_DOMAIN_XML_INACTIVE | lv.VIR_DOMAIN_XML_SECURE))

        call(host, f"define restored {vm}", persist, vm)
        self._lifecycle.undefine_stale(vm, running_on=host)
        return OperationReport("resume", vm, host, seconds, self._file_size(host, state_path))

    def _file_size(self, host: str, path: str) -> int:
        """Size of a save image, for calibration: 0 when it cannot be seen from here."""
        cfg = self._connections.host_config(host)
        try:
            if not cfg.is_remote:
                return os.stat(path).st_size if os.path.exists(path) else 0
            if cfg.ssh:
                with sftp_session(cfg, self._ssh_timeout_s, "copy save images") as sftp:
                    return int(sftp.stat(path).st_size or 0)
        except (OSError, DriverError) as exc:
            log.info("cannot read the size of %s on %s: %s", path, host, exc)
        return 0

    # -- between hosts ---------------------------------------------------------------------------

    def move_state(self, state_path: str, src_host: str, dst_host: str) -> OperationReport:
        src = self._connections.host_config(src_host)
        dst = self._connections.host_config(dst_host)
        if src_host == dst_host or (src.is_shared(state_path) and dst.is_shared(state_path)
                                    and src.shares_vm_disks_with(dst)):
            return OperationReport("move_state", "", dst_host, 0.0, 0, route="shared")
        began = time.perf_counter()
        retrying = self._connections.retry.retrying(
            lambda exc: isinstance(exc, HostUnreachable),
            self._connections.clock,
            before_sleep=lambda state: log.warning(
                "copying %s %s -> %s failed (%s); retrying", state_path, src_host, dst_host,
                state.outcome.exception() if state.outcome else None,
            ),
        )
        copies: list[tuple[int, str]] = []
        if not (src.is_shared(state_path) and dst.is_shared(state_path)):
            copies.append(retrying(lambda: self._copy(src, dst, state_path)))
        if not src.shares_vm_disks_with(dst):   # (its overlay and seed go with it)
            for disk in self._unshared_disks(src, dst, state_path):
                copies.append(retrying(lambda path=disk.path: self._copy(src, dst, path)))
        copied = sum(size for size, _ in copies)
        routes = {route for _, route in copies}
        route = "relay" if "relay" in routes else "direct" if routes else "shared"
        return OperationReport("move_state", "", dst_host, time.perf_counter() - began, copied, route=route)

    def _unshared_disks(self, src: HostConfig, dst: HostConfig, state_path: str) -> list[LocalDisk]:
        """The disks of the VM saved at `state_path` on `src` that `dst` does not see (they go with it)."""
        xml = self._connections.call(src.name, f"read save image {state_path}",
                                     lambda conn: conn.saveImageGetXMLDesc(state_path, 0))
        return local_disks(xml, lambda path: src.is_shared(path) and dst.is_shared(path))

    def _copy(self, src: HostConfig, dst: HostConfig, path: str) -> tuple[int, str]:
        """Copy `path` from src to dst: (bytes, "direct") host to host, else (bytes, "relay") through here."""
        if can_push(src, dst):
            partial = f"{path}.part-{uuid.uuid4().hex[:8]}"
            try:
                size = push(src, dst, path, partial, self._ssh_timeout_s)
                if size is not None:
                    self._check_and_rename(src, dst, path, partial, self._checksum(src.name, path))
                    return size, "direct"
            except BaseException:
                self._remove_partial(dst, partial)   # (what the source may have written before it failed)
                raise
            log.warning("relaying %s %s -> %s through this machine instead", path, src.name, dst.name)
            self._remove_partial(dst, partial)
        return self._relay(src, dst, path), "relay"

    def _remove_partial(self, dst: HostConfig, partial: str) -> None:
        """Best effort: a copy that went wrong leaves no temporary file (one that stays is only logged)."""
        try:
            with sftp_session(dst, self._ssh_timeout_s, "copy save images") as dst_sftp:
                _remove_quietly(dst_sftp, partial)
        except DriverError as exc:
            log.warning("could not remove %s on %s: %s", partial, dst.name, exc)

    def _check_and_rename(self, src: HostConfig, dst: HostConfig, path: str, partial: str,
                          expected: str | None) -> None:
        """Give the copy `partial` on dst its real name if its checksum there is `expected`; else remove it."""
        stored = self._checksum(dst.name, partial)
        with sftp_session(dst, self._ssh_timeout_s, "copy save images") as dst_sftp:
            if stored is None or stored != expected:
                _remove_quietly(dst_sftp, partial)
                raise OperationFailed(f"move_state {path} {src.name} -> {dst.name}: the copy's checksum on "
                                      f"{dst.name} ({stored}) is not the source's ({expected})")
            try:
                dst_sftp.posix_rename(partial, path)
            except (OSError, EOFError) as exc:
                _remove_quietly(dst_sftp, partial)
                raise OperationFailed(f"move_state {path} {src.name} -> {dst.name}: {exc}") from None

    def _relay(self, src: HostConfig, dst: HostConfig, path: str) -> int:
        """Stream `path` from src to dst through this machine; written under a temporary name, checksummed on
        dst (when it has ssh) against what was read, then renamed."""
        partial = f"{path}.part-{uuid.uuid4().hex[:8]}"
        digest = hashlib.sha256()
        timeout = self._ssh_timeout_s
        with sftp_session(src, timeout, "copy save images") as src_sftp, \
                sftp_session(dst, timeout, "copy save images") as dst_sftp:
            try:
                size = int(src_sftp.stat(path).st_size or 0)
                _make_directories(dst_sftp, posixpath.dirname(path))   # (a disk's: new to this host, maybe)
                with src_sftp.open(path, "rb") as reader, dst_sftp.open(partial, "wb") as writer:
                    reader.prefetch(size)
                    writer.set_pipelined(True)
                    copied = 0
                    while chunk := reader.read(COPY_CHUNK_BYTES):
                        writer.write(chunk)
                        digest.update(chunk)
                        copied += len(chunk)
                if copied == size:
                    stored = self._checksum(dst.name, partial)
                    if stored != digest.hexdigest():
                        raise OperationFailed(f"move_state {path} {src.name} -> {dst.name}: the copy's checksum on "
                                              f"{dst.name} ({stored}) is not the source's ({digest.hexdigest()})")
                dst_sftp.posix_rename(partial, path)
            except FileNotFoundError:
                raise OperationFailed(f"move_state: no save image at {path} on {src.name}") from None
            except OperationFailed:
                _remove_quietly(dst_sftp, partial)
                raise
            except (OSError, EOFError) as exc:
                _remove_quietly(dst_sftp, partial)
                if isinstance(exc, (socket.timeout, ConnectionError, EOFError)):
                    raise HostUnreachable(f"move_state {path} {src.name} -> {dst.name}: {exc}") from None
                raise OperationFailed(f"move_state {path} {src.name} -> {dst.name}: {exc}") from None
        if copied != size:
            raise OperationFailed(f"move_state {path}: copied {copied} of {size} bytes")
        return copied

    def remove_state(self, state_path: str, host: str) -> None:
        """Delete a save image on `host`: here when the host's files are this machine's (or on storage this
        machine sees too), else over SFTP. Nothing to do when it is not there."""
        cfg = self._connections.host_config(host)
        local = not cfg.is_remote or (cfg.is_shared(state_path) and os.path.exists(state_path))
        if not local and not cfg.ssh:
            raise OperationFailed(f"left {state_path} on {host} (no ssh setting to remove it)")
        try:
            if local:
                os.unlink(state_path)
            else:
                with sftp_session(cfg, self._ssh_timeout_s, "remove save images") as sftp:
                    sftp.remove(state_path)
        except FileNotFoundError:
            return
        except (OSError, DriverError) as exc:
            error = HostUnreachable if isinstance(exc, HostUnreachable) else OperationFailed
            raise error(f"could not remove {state_path} on {host}: {exc}") from exc


def _remove_quietly(sftp: Any, path: str) -> None:
    try:
        sftp.remove(path)
    except (OSError, EOFError):
        pass


def _make_directories(sftp: Any, directory: str) -> None:
    """`mkdir -p directory` over SFTP."""
    missing = []
    while directory not in ("", "/"):
        try:
            sftp.stat(directory)
            break
        except FileNotFoundError:
            missing.append(directory)
            directory = posixpath.dirname(directory)
    for path in reversed(missing):
        sftp.mkdir(path, 0o755)
