"""A catalogued base image: a disk on the hosts' shared storage, or copied to each host's own storage, that
leases name instead of a path.

The catalogue is what `leasewise image add` records; a lease that names an image gets a `VMImage` made
from it, so the lease keeps what it booted even if the catalogue changes later.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from datetime import datetime

from orchestrator.model.errors import InvalidRequest
from orchestrator.model.lease import VMImage

IMAGE_FORMATS = ("qcow2", "raw")
OS_KINDS = ("linux", "other")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")


@dataclass(frozen=True, slots=True)
class CatalogImage:
    """One base image: where it is, how to read it, how to boot it, and who logs in."""

    name: str
    path: str
    format: str = "qcow2"
    login_user: str = "debian"
    os: str = "linux"
    kernel: str | None = None           # direct kernel boot (an image without a boot loader)
    initrd: str | None = None
    cmdline: str | None = None
    size_bytes: int = 0                 # the disk's virtual size: an overlay is at least this big
    added_at: datetime | None = None
    added_by: str = ""
    #: (path, SHA-256) of each file copied to the hosts' own storage; empty for an image on shared storage
    checksums: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise InvalidRequest("name", f"{self.name!r} is not an image name (letters, digits, '.', '_', '-')")
        for key in ("path", "kernel", "initrd"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, str) or not posixpath.isabs(value)):
                raise InvalidRequest(key, f"must be an absolute path (got {value!r})")
        if self.format not in IMAGE_FORMATS:
            raise InvalidRequest("format", f"must be one of {', '.join(IMAGE_FORMATS)} (got {self.format!r})")
        if self.os not in OS_KINDS:
            raise InvalidRequest("os", f"must be one of {', '.join(OS_KINDS)} (got {self.os!r})")
        if not _USER.fullmatch(self.login_user or ""):
            raise InvalidRequest("login_user", f"{self.login_user!r} is not a user name")
        if self.kernel is None and (self.initrd is not None or self.cmdline is not None):
            raise InvalidRequest("kernel", "initrd and cmdline need a kernel (direct kernel boot)")
        if isinstance(self.size_bytes, bool) or not isinstance(self.size_bytes, int) or self.size_bytes < 0:
            raise InvalidRequest("size", f"must be a whole number of bytes (got {self.size_bytes!r})")

    @property
    def copied(self) -> bool:
        """Whether hosts hold copies of their own (so a lease is planned only on the hosts holding it)."""
        return bool(self.checksums)

    @property
    def files(self) -> tuple[str, ...]:
        """The files a host needs to boot it: the disk, and a kernel and initrd for direct kernel boot."""
        return tuple(f for f in (self.path, self.kernel, self.initrd) if f is not None)

    def vm_image(self) -> VMImage:
        """What a lease naming this image boots."""
        return VMImage(disk=self.path, size_mib=self.size_bytes / 2**20, kernel=self.kernel, initrd=self.initrd,
                       cmdline=self.cmdline, name=self.name, format=self.format, login_user=self.login_user)
