"""Reading a workload file: the bytes, gunzipped when they are gzip; one error line naming the file."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from orchestrator.model.errors import WorkloadError


def read_workload_file(path: Path) -> bytes:
    """The file's bytes, decompressed when it is gzip (traces are published as .swf.gz)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise WorkloadError(str(path), f"cannot read the workload file ({exc.strerror or exc})") from None
    return decompressed(raw, str(path))


def decompressed(raw: bytes, source: str) -> bytes:
    """`raw` gunzipped when it is gzip, else as it is (a sweep ships files' bytes as they are on disk)."""
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise WorkloadError(source, f"not a valid gzip file ({exc})") from None
    return raw
