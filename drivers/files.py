"""Files, safely: writing one whole or not at all (a reader, or a process that starts after a crash, sees
the old content or the new one, never a mix: the simulated driver's state file and a sweep's results), and
reading one a user named (`read_user_file`: a regular file, of a capped size, or one line saying why not).
Here, at the bottom of the layers, so the drivers' inventory and every reader of the orchestrator share it."""

from __future__ import annotations

import hashlib
import os
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path


#: how much of a file is read at a time when it is hashed or copied
CHUNK_BYTES = 1024 * 1024


def file_sha256(path: str | os.PathLike[str], progress: Callable[[int, int], None] | None = None) -> str:
    """The SHA-256 (hex) of the file at `path` on this machine (`progress(read, total)` told as it goes)."""
    digest = hashlib.sha256()
    total = os.path.getsize(path)
    done = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
            done += len(chunk)
            if progress is not None:
                progress(done, total)
    return digest.hexdigest()


def write_whole(path: Path, text: str) -> None:
    """`text` into a temporary file beside `path`, flushed to disk, then renamed over `path`."""
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
        _sync_directory(path.parent)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _sync_directory(directory: Path) -> None:
    """Make a rename durable (POSIX); best effort where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class UserFileError(ValueError):
    """A file someone named cannot be read as one: `problem` says why, in a few words ("no such file",
    "is a FIFO, not a regular file", "is larger than 1 MiB")."""

    def __init__(self, path: object, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def size_text(count: int) -> str:
    """A byte count as people write a cap: 1 MiB, 64 KiB, 300 bytes."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= factor and count % factor == 0:
            return f"{count // factor} {unit}"
    return f"{count} bytes"


def read_user_file(path: str | os.PathLike[str], limit: int, *, stdin: bool = False) -> bytes:
    """The bytes of a file a user named (a configuration, a lease file, a key, a workload...), read safely:
    it must be a regular file (a FIFO is not waited on, `/dev/zero` not read forever) of at most `limit`
    bytes, which is all that is ever read of it. `-` is standard input where `stdin` allows it (read up to
    the cap too). Anything else is one `UserFileError`. The one way every file input is read."""
    if stdin and str(path) == "-":
        data = sys.stdin.buffer.read(limit + 1)
        if len(data) > limit:
            raise UserFileError(path, f"is larger than {size_text(limit)}")
        return data
    try:
        # (O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UserFileError(path, "no such file") from None
    except IsADirectoryError:
        raise UserFileError(path, "is a directory, not a file") from None
    except OSError as exc:
        raise UserFileError(path, f"cannot be read ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a file")
            raise UserFileError(path, f"is {kind}, not a regular file")
        if info.st_size > limit:
            raise UserFileError(path, f"is larger than {size_text(limit)}")
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:   # (it grew while read)
            raise UserFileError(path, f"is larger than {size_text(limit)}")
        return b"".join(chunks)
    except OSError as exc:
        raise UserFileError(path, f"cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
