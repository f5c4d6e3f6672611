"""A VM's volumes on its host, through libvirt storage: its disk overlay, its cloud-init seed, and what a
host sees of a base image.

Everything goes through libvirt's storage API (a `dir` pool on the host's disk directory), so it works on
a remote host without SSH, and qemu-img runs on the host itself. The overlay is a qcow2 volume whose
`<backingStore>` is the base image: the base is only ever read. Pools are refreshed before each lookup,
because on shared storage another host may have created or deleted a volume meanwhile.
"""

from __future__ import annotations

import hashlib
import logging
import posixpath
import xml.etree.ElementTree as ET
from typing import Any

from drivers.base import DiskSpec, ImageInfo
from drivers.cloudinit import overlay_volume_name, seed_volume_name
from drivers.errors import DriverError, OperationFailed

from .connection import Connections

log = logging.getLogger(__name__)

VM_POOL = "leasewise-vms"
IMAGE_POOL_PREFIX = "leasewise-img-"
_UPLOAD_CHUNK = 256 * 1024


def pool_xml(name: str, directory: str) -> str:
    pool = ET.Element("pool", {"type": "dir"})
    ET.SubElement(pool, "name").text = name
    target = ET.SubElement(pool, "target")
    ET.SubElement(target, "path").text = directory
    return ET.tostring(pool, encoding="unicode")


def _volume(name: str, capacity: int, fmt: str, mode: str) -> ET.Element:
    vol = ET.Element("volume")
    ET.SubElement(vol, "name").text = name
    ET.SubElement(vol, "capacity", {"unit": "bytes"}).text = str(int(capacity))
    target = ET.SubElement(vol, "target")
    ET.SubElement(target, "format", {"type": fmt})
    ET.SubElement(ET.SubElement(target, "permissions"), "mode").text = mode
    return vol


def overlay_xml(vm: str, disk: DiskSpec, capacity: int) -> str:
    """A qcow2 volume of `capacity` bytes backed by the (read-only) base image; only its owner reads it."""
    vol = _volume(overlay_volume_name(vm), capacity, "qcow2", "0600")
    backing = ET.SubElement(vol, "backingStore")
    ET.SubElement(backing, "path").text = disk.base
    ET.SubElement(backing, "format", {"type": disk.base_format})
    return ET.tostring(vol, encoding="unicode")


def seed_xml(vm: str, size: int) -> str:
    """A raw volume for the seed ISO (readable by all: it holds public keys and the person's user-data)."""
    return ET.tostring(_volume(seed_volume_name(vm), size, "raw", "0644"), encoding="unicode")


def _directory_pool_name(directory: str) -> str:
    return IMAGE_POOL_PREFIX + hashlib.sha1(directory.encode()).hexdigest()[:12]


def _pool_over(conn: Any, directory: str) -> Any | None:
    """A pool the host has over `directory` already, or None."""
    wanted = posixpath.normpath(directory)
    for pool in conn.listAllStoragePools(0):
        path = ET.fromstring(pool.XMLDesc(0)).findtext("target/path")
        if path is not None and posixpath.normpath(path) == wanted:
            return pool
    return None


class Storage:
    """Creates, inspects and deletes the volumes of VMs on the hosts of `connections`."""

    def __init__(self, connections: Connections):
        self._connections = connections

    # -- pools -------------------------------------------------------------------------------------

    def _is_missing(self, exc: BaseException, code_name: str) -> bool:
        lv = self._connections.libvirt
        return isinstance(exc, lv.libvirtError) and exc.get_error_code() == getattr(lv, code_name, None)

    def _pool(self, conn: Any, name: str, directory: str, build: bool) -> Any:
        """The active, freshly refreshed `dir` pool `name` over `directory` (defined on first use; its
        directory made when `build`, also for a pool defined earlier without it)."""
        lv = self._connections.libvirt
        try:
            pool = conn.storagePoolLookupByName(name)
        except lv.libvirtError as exc:
            if not self._is_missing(exc, "VIR_ERR_NO_STORAGE_POOL"):
                raise
            pool = _pool_over(conn, directory)   # (the host's own pool there: libvirt allows one per directory)
        if pool is None:
            pool = conn.storagePoolDefineXML(pool_xml(name, directory), 0)
            if build:
                pool.build(0)   # mkdir -p the directory (owned by the host, not by us)
            pool.setAutostart(1)
        if not pool.isActive():
            if build:
                pool.build(0)   # (idempotent: the directory may be gone since the pool was defined)
            pool.create(0)
        pool.refresh(0)
        return pool

    def vm_pool(self, conn: Any, host: str) -> Any:
        return self._pool(conn, VM_POOL, self._connections.host_config(host).vm_disk_dir, build=True)

    def directory_pool(self, conn: Any, directory: str) -> Any | None:
        """The pool over a base image's `directory`, or None when the directory is missing."""
        try:
            return self._pool(conn, _directory_pool_name(directory), directory, build=False)
        except self._connections.libvirt.libvirtError:
            return None

    def made_directory_pool(self, conn: Any, directory: str) -> Any:
        """The pool over `directory`, the directory made when missing (a libvirt error when it cannot be)."""
        return self._pool(conn, _directory_pool_name(directory), directory, build=True)

    def lookup(self, pool: Any, name: str) -> Any | None:
        """The volume `name` of `pool`, or None."""
        return self._lookup(pool, name)

    def _lookup(self, pool: Any, name: str) -> Any | None:
        lv = self._connections.libvirt
        try:
            return pool.storageVolLookupByName(name)
        except lv.libvirtError as exc:
            if self._is_missing(exc, "VIR_ERR_NO_STORAGE_VOL"):
                return None
            raise

    # -- base images -------------------------------------------------------------------------------

    def image_info(self, host: str, path: str) -> ImageInfo:
        """Format and virtual size of the base image at `path`, as `host` sees it; `OperationFailed` naming
        what is wrong (its directory missing, the file missing, unreadable)."""
        if not posixpath.isabs(path):
            raise OperationFailed(f"image {path!r}: not an absolute path")
        directory, filename = posixpath.split(posixpath.normpath(path))
        pool_name = _directory_pool_name(directory)

        def read(conn: Any) -> ImageInfo:
            lv = self._connections.libvirt
            try:
                pool = self._pool(conn, pool_name, directory, build=False)
            except lv.libvirtError as exc:
                raise OperationFailed(f"image {path}: its directory cannot be read on {host} "
                                      f"({exc.get_error_message() or exc})") from None
            vol = self._lookup(pool, filename)
            if vol is None:
                raise OperationFailed(f"image {path}: no such file on {host}")
            root = ET.fromstring(vol.XMLDesc(0))
            fmt = root.find("target/format")
            _, capacity, _ = vol.info()
            # (a volume without a format is read as raw, as libvirt's directory pools do)
            return ImageInfo(path=path, format=(fmt.get("type") if fmt is not None else None) or "raw",
                             virtual_size=int(capacity))

        return self._connections.call(host, f"read image {path}", read)

    # -- a VM's volumes ----------------------------------------------------------------------------

    def create_overlay(self, host: str, vm: str, disk: DiskSpec) -> str:
        """The VM's overlay on `host` (its path). An overlay left from an earlier start is replaced, unless
        the disk is kept (`keep`), where it is the disk the lease asked to keep and is used again."""
        base = self.image_info(host, disk.base)
        if base.format != disk.base_format:
            raise OperationFailed(f"image {disk.base}: {host} reads it as {base.format}, "
                                  f"not {disk.base_format}")
        size = disk.size_bytes if disk.size_bytes is not None else base.virtual_size
        if size < base.virtual_size:
            raise OperationFailed(f"disk_size: {size} bytes is smaller than the image ({base.virtual_size} bytes)")

        def create(conn: Any) -> str:
            pool = self.vm_pool(conn, host)
            existing = self._lookup(pool, overlay_volume_name(vm))
            if existing is not None:
                if disk.keep:
                    return existing.path()
                log.info("replacing the overlay %s left on %s", existing.path(), host)
                existing.delete(0)
            return pool.createXML(overlay_xml(vm, disk, size), 0).path()

        return self._connections.call(host, f"create the disk of {vm}", create, vm)

    def upload_seed(self, host: str, vm: str, data: bytes) -> str:
        """Write the cloud-init seed `data` as the VM's seed volume on `host` (its path)."""

        def upload(conn: Any) -> str:
            pool = self.vm_pool(conn, host)
            existing = self._lookup(pool, seed_volume_name(vm))
            if existing is not None:
                existing.delete(0)
            vol = pool.createXML(seed_xml(vm, len(data)), 0)
            try:
                stream = conn.newStream(0)
                vol.upload(stream, 0, len(data), 0)
                for offset in range(0, len(data), _UPLOAD_CHUNK):
                    stream.send(data[offset:offset + _UPLOAD_CHUNK])
                stream.finish()
            except BaseException:
                vol.delete(0)
                raise
            return vol.path()

        return self._connections.call(host, f"write the seed of {vm}", upload, vm)

    def remove_vm_volumes(self, host: str, vm: str, keep_disk: bool = False) -> list[str]:
        """Delete the VM's seed and (unless `keep_disk`) its overlay on `host`; the paths deleted."""
        names = [seed_volume_name(vm)] + ([] if keep_disk else [overlay_volume_name(vm)])

        def remove(conn: Any) -> list[str]:
            pool = self.vm_pool(conn, host)
            deleted = []
            for name in names:
                vol = self._lookup(pool, name)
                if vol is not None:
                    path = vol.path()
                    vol.delete(0)
                    deleted.append(path)
            return deleted

        return self._connections.call(host, f"delete the volumes of {vm}", remove, vm)

    def volume_paths(self, host: str, vm: str) -> dict[str, str]:
        """{"disk": path, "seed": path} for the volumes of `vm` that exist on `host`."""

        def find(conn: Any) -> dict[str, str]:
            pool = self.vm_pool(conn, host)
            found = {}
            for key, name in (("disk", overlay_volume_name(vm)), ("seed", seed_volume_name(vm))):
                vol = self._lookup(pool, name)
                if vol is not None:
                    found[key] = vol.path()
            return found

        try:
            return self._connections.call(host, f"find the volumes of {vm}", find, vm)
        except DriverError as exc:
            log.warning("cannot list the volumes of %s on %s: %s", vm, host, exc)
            return {}
