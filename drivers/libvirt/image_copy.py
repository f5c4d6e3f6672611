"""A base image copied to a host that does not share the storage it is on: uploaded through libvirt's
storage volume stream (virStorageVolUpload, over the same link as everything else, so any transport works),
then checksummed on the host.

The checksum is computed by the host itself (`sha256sum` over leasewise's own SSH) when the host has an
`ssh` setting, so only the digest crosses the network; without one the stored file is read back through
libvirt's download stream and hashed here. Either way what is compared is what the host stored, not what
was sent: a copy whose checksum differs is deleted.
"""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import shlex
import xml.etree.ElementTree as ET
from typing import Any

from drivers.base import ByteProgress
from drivers.errors import DriverError, HostUnreachable, OperationFailed
from drivers.files import CHUNK_BYTES

from .connection import Connections
from .ssh import SSHFailed, import_paramiko, open_ssh
from .storage import Storage

log = logging.getLogger(__name__)

_SHA256_HEX = frozenset("0123456789abcdef")


class ImageCopies:
    """`upload_image` and `image_checksum` of the libvirt driver."""

    def __init__(self, connections: Connections, storage: Storage, ssh_timeout_s: float):
        self._connections = connections
        self._storage = storage
        self._ssh_timeout_s = ssh_timeout_s

    def checksum(self, host: str, path: str) -> str | None:
        if not posixpath.isabs(path):
            raise OperationFailed(f"image {path!r}: not an absolute path")
        if self._connections.host_config(host).ssh:
            return self._checksum_over_ssh(host, path)
        return self._checksum_read_back(host, path)

    def _checksum_over_ssh(self, host: str, path: str) -> str | None:
        cfg = self._connections.host_config(host)
        try:
            client = open_ssh(cfg, self._ssh_timeout_s)
        except SSHFailed as exc:
            error = HostUnreachable if exc.unreachable else OperationFailed
            raise error(f"ssh to {host} ({cfg.ssh}): {exc.reason}") from None
        try:
            quoted = shlex.quote(path)
            # (no file: an empty answer, not an error; a directory or an unreadable file: an error)
            _, stdout, stderr = client.exec_command(f"test -e {quoted} || exit 0; sha256sum -- {quoted}")
            out = stdout.read().decode(errors="replace")
            status = stdout.channel.recv_exit_status()
            err = stderr.read().decode(errors="replace").strip()
        except (OSError, EOFError, import_paramiko().SSHException) as exc:
            raise HostUnreachable(f"ssh to {host}: {exc or type(exc).__name__}") from None
        finally:
            client.close()
        if status != 0:
            raise OperationFailed(f"checksum of {path} on {host}: {err or f'sha256sum exited {status}'}")
        if not out.strip():
            return None
        digest = out.split()[0].lower()
        if len(digest) != 64 or not set(digest) <= _SHA256_HEX:
            raise OperationFailed(f"checksum of {path} on {host}: sha256sum answered {out.strip()[:80]!r}")
        return digest

    def _checksum_read_back(self, host: str, path: str) -> str | None:
        def read(conn: Any) -> str | None:
            vol = self._volume(conn, host, path)
            if vol is None:
                return None
            digest = hashlib.sha256()
            stream = conn.newStream(0)
            vol.download(stream, 0, 0, 0)
            stream.recvAll(lambda _stream, data, _opaque: digest.update(data), None)
            stream.finish()
            return digest.hexdigest()

        return self._connections.call(host, f"read back {path}", read)

    def _volume(self, conn: Any, host: str, path: str) -> Any | None:
        directory, filename = posixpath.split(posixpath.normpath(path))
        pool = self._storage.directory_pool(conn, directory)
        return None if pool is None else self._storage.lookup(pool, filename)

    def upload(self, host: str, path: str, source: str, progress: ByteProgress | None = None) -> str:
        if not posixpath.isabs(path):
            raise OperationFailed(f"image {path!r}: not an absolute path")
        try:
            size = os.path.getsize(source)
        except OSError as exc:
            raise OperationFailed(f"image {source}: cannot be read here ({exc.strerror or exc})") from None
        directory, filename = posixpath.split(posixpath.normpath(path))
        sent = {"sha256": ""}

        def send(conn: Any) -> None:
            digest = hashlib.sha256()   # (a retried attempt starts over)
            pool = self._storage.made_directory_pool(conn, directory)
            existing = self._storage.lookup(pool, filename)
            if existing is not None:
                existing.delete(0)
            vol = pool.createXML(_raw_volume_xml(filename, size), 0)
            try:
                stream = conn.newStream(0)
                vol.upload(stream, 0, size, 0)
                done = 0
                with open(source, "rb") as handle:
                    while chunk := handle.read(CHUNK_BYTES):
                        stream.send(chunk)
                        digest.update(chunk)
                        done += len(chunk)
                        if progress is not None:
                            progress(done, size)
                stream.finish()
                sent["sha256"] = digest.hexdigest()
                pool.refresh(0)   # (libvirt reads the format from the bytes now there)
            except BaseException:
                _delete_quietly(vol)
                raise

        self._connections.call(host, f"copy {source} to {path}", send)
        try:
            stored = self.checksum(host, path)
        except DriverError:
            self._delete(host, path)
            raise
        if stored != sent["sha256"]:
            self._delete(host, path)
            raise OperationFailed(f"copy of {source} to {path} on {host}: the host's checksum "
                                  f"{stored or '(no file)'} is not the source's {sent['sha256']}; "
                                  "the copy was deleted")
        return stored

    def _delete(self, host: str, path: str) -> None:
        def delete(conn: Any) -> None:
            vol = self._volume(conn, host, path)
            if vol is not None:
                vol.delete(0)

        try:
            self._connections.call(host, f"delete {path}", delete)
        except DriverError as exc:
            log.warning("cannot delete the bad copy %s on %s: %s", path, host, exc)


def _raw_volume_xml(name: str, size: int) -> str:
    """A volume of `size` bytes for the upload to fill (readable by all: a base image is only ever read)."""
    vol = ET.Element("volume")
    ET.SubElement(vol, "name").text = name
    ET.SubElement(vol, "capacity", {"unit": "bytes"}).text = str(size)
    ET.SubElement(vol, "allocation", {"unit": "bytes"}).text = "0"   # (sparse: the upload writes it)
    target = ET.SubElement(vol, "target")
    ET.SubElement(target, "format", {"type": "raw"})
    ET.SubElement(ET.SubElement(target, "permissions"), "mode").text = "0644"
    return ET.tostring(vol, encoding="unicode")


def _delete_quietly(vol: Any) -> None:
    try:
        vol.delete(0)
    except Exception as exc:   # (the upload's own error is the one to report)
        log.warning("cannot delete a half-copied volume: %s", exc)
