"""Base images on hosts without shared storage: each host that does not see an image's files on storage
it shares is given its own copy (the same path), through the driver's link to it, and the copy's
checksum is compared on the host with the one the catalogue keeps.

`image add` places a new image (a host holding a different file at that path is refused: it may be the
backing file of VMs running there); `image sync` copies it to hosts that lack it or hold a wrong copy. Each
host's outcome is its own: one host that cannot be reached does not undo the copies the others made.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from drivers.base import Driver
from drivers.errors import DriverError
from drivers.files import file_sha256
from drivers.inventory import HostConfig
from orchestrator.model.errors import InvalidRequest

#: (host, file, bytes sent, bytes in all) of a copy under way
CopyProgress = Callable[[str, str, int, int], None]

#: what became of one host: it reads the files on storage it shares, held identical copies already, was
#: given copies now, or failed (why in `detail`)
Outcome = Literal["shared", "held", "copied", "failed"]


@dataclass(frozen=True)
class HostCopy:
    host: str
    outcome: Outcome
    detail: str = ""

    @property
    def holds(self) -> bool:
        return self.outcome != "failed"

    @property
    def how(self) -> str:
        """How the store records a host that holds it: "shared" or "copied"."""
        return "shared" if self.outcome == "shared" else "copied"


def copy_json(copy: HostCopy) -> dict[str, str]:
    """A host's outcome as `image add` and `image sync` answer it."""
    return {"host": copy.host, "outcome": copy.outcome, "detail": copy.detail}


def local_checksums(files: tuple[str, ...]) -> dict[str, str] | None:
    """path -> SHA-256 of each of `files` on this machine, or None when one is not a file here (the image
    is then on storage the hosts share, and nothing can be copied from here)."""
    if not all(os.path.isfile(f) for f in files):
        return None
    return {f: file_sha256(f) for f in files}


def needs_copies(config: HostConfig, files: tuple[str, ...]) -> bool:
    """Whether `config`'s host has some of `files` outside the storage it shares."""
    return not all(config.is_shared(f) for f in files)


def place_on_host(driver: Driver, config: HostConfig, checksums: Mapping[str, str], *, overwrite: bool,
                  progress: CopyProgress | None = None) -> HostCopy:
    """Make `config`'s host hold every file of `checksums` (path -> SHA-256) outside its shared storage:
    left alone where it holds the same file, copied where it has none (or, with `overwrite`, a different
    one); refused (`InvalidRequest`) when it holds a different one and not `overwrite`."""
    host = config.name
    if not needs_copies(config, tuple(checksums)):
        return HostCopy(host, "shared")
    copied = False
    try:
        for path, wanted in checksums.items():
            if config.is_shared(path):
                continue
            found = driver.image_checksum(host, path)
            if found == wanted:
                continue
            if found is not None and not overwrite:
                raise InvalidRequest("PATH", f"{host} holds a different file at {path} (sha256 {found[:16]}...); "
                                             "remove it there, or use another path")
            told = (lambda sent, total, p=path: progress(host, p, sent, total)) if progress else None
            driver.upload_image(host, path, path, told)
            copied = True
    except DriverError as exc:
        return HostCopy(host, "failed", str(exc))
    return HostCopy(host, "copied" if copied else "held")
