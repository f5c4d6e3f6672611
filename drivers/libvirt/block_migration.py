"""A live migration between hosts that share no storage for a VM's disks (Nova's block migration,
libvirt's VIR_MIGRATE_NON_SHARED_INC): the VM's writable overlay is copied with the migration, on top of a
base image the destination holds already (`image add` gave every host a copy), and what the VM only reads
(its cloud-init seed) is copied before it.

Before the migration, the destination is given an empty overlay of the same size backed by the same base
(so QEMU mirrors only the overlay's own blocks into it) and a copy of the seed, at the same paths, so the
domain's XML holds on both hosts; after it, the source's copies go (libvirt leaves them), or on failure the
destination's.
"""

from __future__ import annotations

import logging
import posixpath
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from drivers.errors import DriverError, OperationFailed
from drivers.files import CHUNK_BYTES

from .connection import Connections
from .storage import Storage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalDisk:
    """A disk of a domain on storage the two hosts do not share."""

    path: str
    dev: str                 # its target device (vda), as VIR_MIGRATE_PARAM_MIGRATE_DISKS names it
    readonly: bool


def local_disks(domain_xml: str, shared: Callable[[str], bool]) -> list[LocalDisk]:
    """The domain's file-backed disks that `shared` (both hosts see the path) says are not shared."""
    disks = []
    for disk in ET.fromstring(domain_xml).findall("devices/disk"):
        source, target = disk.find("source"), disk.find("target")
        path = source.get("file") if source is not None else None
        if path and target is not None and not shared(path):
            disks.append(LocalDisk(path, target.get("dev", ""), disk.find("readonly") is not None))
    return disks


class BlockMigration:
    """Gives the destination what a block migration needs, and removes what is left afterwards; says how
    much a block migration of a VM would copy."""

    def __init__(self, connections: Connections, storage: Storage):
        self._connections = connections
        self._storage = storage

    def allocation(self, vm: str, host: str) -> int | None:
        """Bytes the writable disks of `vm` on `host`'s own storage hold (virDomainGetBlockInfo's allocation:
        what a block migration copies of an overlay), or None when it has none there."""
        cfg = self._connections.host_config(host)

        def read(conn: Any) -> int | None:
            dom = conn.lookupByName(vm)
            disks = [d for d in local_disks(dom.XMLDesc(0), cfg.is_shared) if not d.readonly]
            return sum(int(dom.blockInfo(d.path, 0)[1]) for d in disks) if disks else None

        return self._connections.call(host, f"disk allocation of {vm}", read, vm, question=True)

    def prepare(self, vm: str, src: str, dst: str, disks: list[LocalDisk]) -> list[str]:
        """Each writable disk as an empty overlay on `dst` (its base must be there), each read-only one
        copied; the paths made on `dst` (all removed again if one cannot be made)."""
        made: list[str] = []
        try:
            for disk in disks:
                if disk.readonly:
                    self._copy_volume(vm, src, dst, disk.path)
                else:
                    self._empty_overlay(vm, src, dst, disk.path)
                made.append(disk.path)
        except BaseException:
            self.remove(dst, made)
            raise
        return made

    def remove(self, host: str, paths: list[str]) -> None:
        """Delete the volumes at `paths` on `host` (what a block migration left behind); logged, not
        raised, when the host does not answer."""
        def delete(conn: Any) -> None:
            for path in paths:
                vol = self._volume(conn, path)
                if vol is not None:
                    vol.delete(0)

        if paths:
            try:
                self._connections.call(host, f"delete {', '.join(paths)}", delete)
            except DriverError as exc:
                log.warning("cannot delete %s on %s: %s", paths, host, exc)

    def _volume(self, conn: Any, path: str) -> Any | None:
        directory, name = posixpath.split(path)
        pool = self._storage.directory_pool(conn, directory)
        return None if pool is None else self._storage.lookup(pool, name)

    def _source_volume(self, conn: Any, vm: str, src: str, path: str) -> Any:
        vol = self._volume(conn, path)
        if vol is None:
            raise OperationFailed(f"migrate {vm}: its disk {path} is not a volume libvirt sees on {src}")
        return vol

    def _empty_overlay(self, vm: str, src: str, dst: str, path: str) -> None:
        def describe(conn: Any) -> tuple[int, str | None, str]:
            root = ET.fromstring(self._source_volume(conn, vm, src, path).XMLDesc(0))
            capacity = int(root.findtext("capacity") or 0)
            backing = root.findtext("backingStore/path")
            fmt = root.find("backingStore/format")
            return capacity, backing, fmt.get("type", "raw") if fmt is not None else "raw"

        capacity, backing, backing_format = self._connections.call(src, f"read the disk of {vm}", describe, vm)
        if backing is not None:
            self._storage.image_info(dst, backing)   # (OperationFailed naming what dst lacks: `image sync`)
        vol = ET.Element("volume")
        ET.SubElement(vol, "name").text = posixpath.basename(path)
        ET.SubElement(vol, "capacity", {"unit": "bytes"}).text = str(capacity)
        target = ET.SubElement(vol, "target")
        ET.SubElement(target, "format", {"type": "qcow2"})
        ET.SubElement(ET.SubElement(target, "permissions"), "mode").text = "0600"
        if backing is not None:
            store = ET.SubElement(vol, "backingStore")
            ET.SubElement(store, "path").text = backing
            ET.SubElement(store, "format", {"type": backing_format})

        def create(conn: Any) -> None:
            pool = self._storage.made_directory_pool(conn, posixpath.dirname(path))
            existing = self._storage.lookup(pool, posixpath.basename(path))
            if existing is not None:
                existing.delete(0)   # (left by an earlier attempt: the source's is the VM's disk)
            pool.createXML(ET.tostring(vol, encoding="unicode"), 0)

        self._connections.call(dst, f"make the disk of {vm}", create, vm)

    def _copy_volume(self, vm: str, src: str, dst: str, path: str) -> None:
        def read(conn: Any) -> bytes:
            vol = self._source_volume(conn, vm, src, path)
            chunks: list[bytes] = []
            stream = conn.newStream(0)
            vol.download(stream, 0, 0, 0)
            stream.recvAll(lambda _stream, data, _opaque: chunks.append(data), None)
            stream.finish()
            return b"".join(chunks)

        data = self._connections.call(src, f"read {path}", read, vm)

        def write(conn: Any) -> None:
            pool = self._storage.made_directory_pool(conn, posixpath.dirname(path))
            existing = self._storage.lookup(pool, posixpath.basename(path))
            if existing is not None:
                existing.delete(0)
            vol = ET.Element("volume")
            ET.SubElement(vol, "name").text = posixpath.basename(path)
            ET.SubElement(vol, "capacity", {"unit": "bytes"}).text = str(len(data))
            target = ET.SubElement(vol, "target")
            ET.SubElement(target, "format", {"type": "raw"})
            ET.SubElement(ET.SubElement(target, "permissions"), "mode").text = "0644"
            made = pool.createXML(ET.tostring(vol, encoding="unicode"), 0)
            stream = conn.newStream(0)
            made.upload(stream, 0, len(data), 0)
            for offset in range(0, len(data), CHUNK_BYTES):
                stream.send(data[offset:offset + CHUNK_BYTES])
            stream.finish()

        self._connections.call(dst, f"copy {path}", write, vm)
