"""Reading a workload file: the bytes, gunzipped when they are gzip; one error line naming the file.

The file is read as every file a user names is (`read_user_file`: a regular file, capped), and a gzip one
is unpacked as a stream, refused as soon as it unpacks past `MAX_UNPACKED` or past `MAX_RATIO` times its
packed size (a small bomb that unpacks to gigabytes is refused in the first megabytes, not after them).
"""

from __future__ import annotations

import zlib
from pathlib import Path

from drivers.files import UserFileError, read_user_file, size_text
from orchestrator.model.errors import WorkloadError

#: the largest workload file read, and the most it may unpack to (the largest archive traces unpack to
#: a few hundred MiB), and by how much it may grow (traces pack about 10:1; a run of zeros 1000:1)
MAX_PACKED = 512 << 20
MAX_UNPACKED = 2 << 30
MAX_RATIO = 200
_CHUNK = 1 << 20


def read_workload_file(path: Path) -> bytes:
    """The file's bytes, decompressed when it is gzip (traces are published as .swf.gz)."""
    try:
        raw = read_user_file(path, MAX_PACKED)
    except UserFileError as exc:
        raise WorkloadError(str(path), f"cannot read the workload file ({exc.problem})") from None
    return decompressed(raw, str(path))


def decompressed(raw: bytes, source: str) -> bytes:
    """`raw` gunzipped when it is gzip, else as it is (a sweep ships files' bytes as they are on disk)."""
    if raw[:2] != b"\x1f\x8b":
        return raw
    limit = min(MAX_UNPACKED, max(MAX_RATIO * len(raw), _CHUNK))
    out: list[bytes] = []
    size = 0
    data = raw
    try:
        while data:   # (a gzip file may hold several members, one after the other)
            member = zlib.decompressobj(16 + zlib.MAX_WBITS)
            pending = data
            while pending:
                chunk = member.decompress(pending, _CHUNK)
                size += len(chunk)
                if size > limit:
                    raise WorkloadError(source, f"unpacks to more than {size_text(limit)}: a gzip file may unpack "
                                                f"to {MAX_RATIO} times its size ({len(raw)} bytes), and to "
                                                f"{size_text(MAX_UNPACKED)} at most")
                out.append(chunk)
                pending = member.unconsumed_tail
                if member.eof:
                    break
            if not member.eof:
                raise WorkloadError(source, "not a valid gzip file (it ends before its data does)")
            data = member.unused_data
    except zlib.error as exc:
        raise WorkloadError(source, f"not a valid gzip file ({exc})") from None
    return b"".join(out)
