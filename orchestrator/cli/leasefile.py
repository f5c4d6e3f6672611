"""Lease requests from a YAML lease file or from `leasewise lease submit` flags.

Both become the API's `LeaseSubmission` (`orchestrator.service.models`), which the service checks as it
checks every client's (`LeaseService.submit`: the API's, the web form's), so a file and the equivalent
flags give the same request and the same errors: each names the key (`nodes`, `start`, ...) or the flag
(`--nodes`, `--start`, ...) it is about, as one `InvalidRequest` line. What is the CLI's own: public keys
and cloud-config are files on the user's machine (`GuestFiles`, read with `read_user_file`), relative to the
lease file, and the keys default to `~/.ssh/id_*.pub`. Nothing here touches the store.

A lease file is one YAML mapping, read with `yaml.safe_load` (no tags, no objects), e.g.::

    nodes: 2
    cpus: 2
    memory: 4096          # MiB per node
    duration: 2h          # 90, 90s, 15m, 2h, 1h30m, 01:30:00
    start: 2026-05-04T14:00:00Z   # omit: best-effort; "now": immediate; a time: advance reservation
    preemptible: false
    image: debian12       # a catalogued image (leasewise image add), or a path; or kernel / initrd / cmdline
    disk_size: 20G        # grow each VM's own disk (an overlay of the image) to this size
    ssh_key: [~/.ssh/id_ed25519.pub]   # default: the submitter's ~/.ssh/id_*.pub
    user_data: init.yaml  # a #cloud-config file, passed to cloud-init as it is
    hostname_prefix: web  # VM n calls itself web-n (default: its VM name, lw-ID-n)
    network: true         # one NIC on the hosts' network (false: none)
    keep_disks: false     # keep the VMs' disks when the lease ends
    user: alice
    name: experiment-7
    dirty_rate: 20        # MiB/s, for live-migration predictions
    where: [gpu=a100, "!old"]   # only hosts whose properties meet all of these (KEY=VALUE, KEY!=VALUE, KEY, !KEY)
    spread: true          # each VM on a different host (or pack: true, as few hosts as possible)

`type` (advance-reservation | best-effort | immediate, or AR | BE | IM) is optional: it is inferred from
`start` and, when given, must agree with it. Unknown keys are refused by name.
"""

from __future__ import annotations

import getpass
import glob
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from drivers.cloudinit import DuplicateKey, NoDuplicateKeysLoader
from drivers.files import UserFileError, read_user_file
from orchestrator.model.errors import InvalidRequest, shown
from orchestrator.model.lease_fields import (
    GUEST_KEYS,
    KEYS,
    MAX_INLINE_KEYS,
    MAX_KEY_BYTES,
    MAX_USER_DATA_BYTES,
    Fields,
    flag_label,
)
from orchestrator.service.models import LeaseSubmission, submission_of

__all__ = ["GUEST_KEYS", "KEYS", "MAX_USER_DATA_BYTES", "GuestFiles", "current_user", "flag_label", "load_lease_file",
           "submission_from_fields"]

MAX_FILE_BYTES = 1 << 20


def submission_from_fields(values: Mapping[str, Any], *, label: Callable[[str], str] = str,
                           where: str | None = None, base_dir: Path | None = None) -> LeaseSubmission:
    """The API's submission from a lease file's keys or `lease submit`'s flags, the keys and cloud-config
    read from the user's files (relative to `base_dir`); checked as the service checks it, errors naming
    `label(key)` (and `where`, the lease file)."""
    f = Fields(values, label, where)
    given = {k: v for k, v in values.items() if v is not None}
    guest = [k for k in GUEST_KEYS if k in given]
    if guest and "image" not in given:   # (said before any file is read for it)
        raise f.error(guest[0], f"needs an image with a disk ({label('image')})")
    files = GuestFiles(base_dir)
    if "ssh_key" in given or "image" in given:   # (the default keys go to a lease with an image: it has a disk)
        given["ssh_key"] = list(files.ssh_keys(f)) or None
    if "user_data" in given:
        given["user_data"] = files.user_data(f)
    return submission_of(given, label, where)


class GuestFiles:
    """Keys and cloud-config read from files on the user's machine (`ssh_key`: a file or a list of them,
    default `~/.ssh/id_*.pub`; `user_data`: a #cloud-config file), relative to `base_dir` when given: the
    texts the service then checks."""

    def __init__(self, base_dir: Path | None = None):
        self.base_dir = base_dir

    def ssh_keys(self, f: Fields) -> tuple[str, ...]:
        key_files = f.get("ssh_key")
        if isinstance(key_files, str):
            key_files = [key_files]
        if key_files is not None and (not isinstance(key_files, (list, tuple)) or not key_files
                                      or not all(isinstance(k, str) and k.strip() for k in key_files)):
            raise f.error("ssh_key", f"must be a public key file or a list of them (got {shown(key_files)})")
        if key_files is None:
            key_files = sorted(glob.glob(os.path.expanduser("~/.ssh/id_*.pub")))
        if len(key_files) > MAX_INLINE_KEYS:
            raise f.error("ssh_key", f"at most {MAX_INLINE_KEYS} keys (got {len(key_files)})")
        return tuple(_read_key(f, _resolve(path, self.base_dir)) for path in key_files)

    def user_data(self, f: Fields) -> str:
        source = f.get("user_data")
        if not isinstance(source, str) or not source.strip():
            raise f.error("user_data", f"must be a #cloud-config file (got {shown(source)})")
        return _read_small(f, "user_data", _resolve(source, self.base_dir), MAX_USER_DATA_BYTES)


def _resolve(path: str, base_dir: Path | None) -> Path:
    """A file named in a lease file is relative to that file; on the command line, to where it runs."""
    expanded = Path(os.path.expanduser(path))
    return expanded if expanded.is_absolute() or base_dir is None else base_dir / expanded


def _read_small(f: Fields, key: str, path: Path, limit: int) -> str:
    """A small text file of the user's (`read_user_file`: a regular file, at most `limit` bytes, UTF-8)."""
    try:
        return read_user_file(path, limit).decode("utf-8")
    except UserFileError as exc:
        raise f.error(key, f"{path}: {exc.problem}") from None
    except UnicodeDecodeError:
        raise f.error(key, f"{path}: is not UTF-8 text") from None


def _read_key(f: Fields, path: Path) -> str:
    """A public key file's line (the service checks the key itself)."""
    text = _read_small(f, "ssh_key", path, MAX_KEY_BYTES)
    if "PRIVATE KEY" in text:
        raise f.error("ssh_key", f"{path}: this is a private key; give the public one (the .pub file next to it)")
    return text.strip()


def current_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):   # no passwd entry and no $USER (some containers)
        return ""


class _LeaseFileLoader(NoDuplicateKeysLoader):
    """Safe YAML, no key twice, and times left as text: `parse_time`, the one reader of times, reads them
    (PyYAML's own reader raises ValueError on `2026-13-45T99:00:00Z` and makes dates of `2026-05-04`)."""


_LeaseFileLoader.add_constructor("tag:yaml.org,2002:timestamp", _LeaseFileLoader.construct_yaml_str)


def load_lease_file(path: str | Path) -> LeaseSubmission:
    """Read a YAML lease file (safe_load only) into the API's submission; errors name the file and key."""
    where = str(path)
    try:
        raw = read_user_file(Path(path), MAX_FILE_BYTES)
    except UserFileError as exc:
        raise InvalidRequest("file", exc.problem, where=where) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InvalidRequest(f"line {line}", "not valid UTF-8", where=where) from None
    try:
        data = yaml.load(text, Loader=_LeaseFileLoader)
    except DuplicateKey as exc:
        raise InvalidRequest(shown(exc.key) if not isinstance(exc.key, str) else exc.key,
                             f"is given twice (lines {exc.first_line} and {exc.line}): give each key once",
                             where=where) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        field = f"line {mark.line + 1}" if mark is not None else "yaml"
        raise InvalidRequest(field, f"not valid YAML ({problem})", where=where) from None
    except RecursionError:   # (a document nested thousands deep: no lease file is)
        raise InvalidRequest("file", "is nested too deeply to be a lease file", where=where) from None
    if data is None:
        raise InvalidRequest("file", "is empty (a lease file is a YAML mapping: nodes, cpus, memory, duration, ...)",
                             where=where)
    if not isinstance(data, Mapping):
        raise InvalidRequest("file", f"must be a YAML mapping of keys ({', '.join(KEYS)}), not {shown(data)}",
                             where=where)
    bad_keys = [k for k in data if not isinstance(k, str)]
    if bad_keys:
        raise InvalidRequest(shown(bad_keys[0]), "unknown key (keys are names such as nodes, cpus, memory)",
                             where=where)
    return submission_from_fields(data, where=where, base_dir=Path(path).parent)
