"""What a disk image file on this machine is (format and virtual size), read from its header: what the
simulated hosts, which see this machine's files, read there, and what `image add` checks before it copies a
file to hosts that share no storage with this machine."""

from __future__ import annotations

import os

from drivers.base import ImageInfo
from drivers.errors import OperationFailed

QCOW2_MAGIC = b"QFI\xfb"


def probe_image(path: str) -> ImageInfo:
    """Format and virtual size of a disk image file on this machine (qcow2 by its header, else raw): what
    the simulated hosts, which see this machine's files, read there."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(32)
            size = os.fstat(handle.fileno()).st_size
    except FileNotFoundError:
        raise OperationFailed(f"image {path}: no such file") from None
    except IsADirectoryError:
        raise OperationFailed(f"image {path}: is a directory") from None
    except OSError as exc:
        raise OperationFailed(f"image {path}: cannot be read ({exc.strerror or exc})") from None
    if header[:4] == QCOW2_MAGIC and len(header) >= 32:
        return ImageInfo(path, "qcow2", int.from_bytes(header[24:32], "big"))
    return ImageInfo(path, "raw", size)
