"""Lease requests from a YAML lease file or from `leasewise lease submit` flags.

Both go through `request_from_fields` (`orchestrator.model.lease_fields`, which the web form uses too), so a
file and the equivalent flags give the same `LeaseRequest` and the same errors: each names the key (`nodes`,
`start`, ...) or the flag (`--nodes`, `--start`, ...) it is about, as one `InvalidRequest` line. What is the
CLI's own: public keys and cloud-config are files on the user's machine (`GuestFiles`), relative to the lease
file, and the keys default to `~/.ssh/id_*.pub`. Nothing here touches the store.

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

`type` (advance-reservation | best-effort | immediate, or AR | BE | IM) is optional: it is inferred from
`start` and, when given, must agree with it. Unknown keys are refused by name.
"""

from __future__ import annotations

import getpass
import glob
import os
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from drivers.cloudinit import DuplicateKey, NoDuplicateKeysLoader, parse_user_data, read_ssh_public_key
from orchestrator.model import lease_fields
from orchestrator.model.errors import InvalidRequest, shown
from orchestrator.model.lease import LeaseRequest
from orchestrator.model.lease_fields import (
    GUEST_KEYS,
    KEYS,
    MAX_USER_DATA_BYTES,
    Fields,
    ImageResolver,
    SiteCheck,
    flag_label,
)

__all__ = ["GUEST_KEYS", "KEYS", "MAX_USER_DATA_BYTES", "GuestFiles", "ImageResolver", "SiteCheck", "current_user",
           "flag_label", "load_lease_file", "request_from_fields"]

MAX_FILE_BYTES = 1 << 20


def request_from_fields(values: Mapping[str, Any], now: datetime, *, label: Callable[[str], str] = str,
                        where: str | None = None, default_user: str | None = None,
                        images: ImageResolver | None = None, base_dir: Path | None = None,
                        site: SiteCheck | None = None) -> LeaseRequest:
    """`lease_fields.request_from_fields` with the CLI's guest files (relative to `base_dir`) and, when no
    `default_user` is given, the current user as the owner."""
    return lease_fields.request_from_fields(
        values, now, default_user=current_user() if default_user is None else default_user,
        guest=GuestFiles(base_dir), label=label, where=where, images=images, site=site)


class GuestFiles:
    """Keys and cloud-config read from files on the user's machine (`ssh_key`: a file or a list of them,
    default `~/.ssh/id_*.pub`; `user_data`: a #cloud-config file), relative to `base_dir` when given."""

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
        return tuple(_read_key(f, _resolve(path, self.base_dir)) for path in key_files)

    def user_data(self, f: Fields) -> str:
        source = f.get("user_data")
        if not isinstance(source, str) or not source.strip():
            raise f.error("user_data", f"must be a #cloud-config file (got {shown(source)})")
        return _read_user_data(f, _resolve(source, self.base_dir))


def _resolve(path: str, base_dir: Path | None) -> Path:
    """A file named in a lease file is relative to that file; on the command line, to where it runs."""
    expanded = Path(os.path.expanduser(path))
    return expanded if expanded.is_absolute() or base_dir is None else base_dir / expanded


def _read_small(f: Fields, key: str, path: Path, limit: int) -> str:
    try:
        with open(path, "rb") as handle:
            raw = handle.read(limit + 1)
    except FileNotFoundError:
        raise f.error(key, f"{path}: no such file") from None
    except IsADirectoryError:
        raise f.error(key, f"{path}: is a directory") from None
    except OSError as exc:
        raise f.error(key, f"{path}: cannot be read ({exc.strerror or exc})") from None
    if len(raw) > limit:
        raise f.error(key, f"{path}: is larger than {limit // 1024} KiB")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise f.error(key, f"{path}: is not UTF-8 text") from None


def _read_key(f: Fields, path: Path) -> str:
    text = _read_small(f, "ssh_key", path, 16 * 1024)
    try:
        return read_ssh_public_key(text, str(path))
    except ValueError as exc:
        raise f.error("ssh_key", str(exc)) from None


def _read_user_data(f: Fields, path: Path) -> str:
    text = _read_small(f, "user_data", path, MAX_USER_DATA_BYTES)
    try:
        return parse_user_data(text, str(path))
    except ValueError as exc:
        raise f.error("user_data", str(exc)) from None


def current_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):   # no passwd entry and no $USER (some containers)
        return ""


class _LeaseFileLoader(NoDuplicateKeysLoader):
    """Safe YAML, no key twice, and times left as text: `parse_time`, the one reader of times, reads them
    (PyYAML's own reader raises ValueError on `2026-13-45T99:00:00Z` and makes dates of `2026-05-04`)."""


_LeaseFileLoader.add_constructor("tag:yaml.org,2002:timestamp", _LeaseFileLoader.construct_yaml_str)


def load_lease_file(path: str | Path, now: datetime, default_user: str | None = None,
                    images: ImageResolver | None = None, site: SiteCheck | None = None) -> LeaseRequest:
    """Read a YAML lease file (safe_load only) into a validated request; errors name the file and key."""
    where = str(path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise InvalidRequest("file", "not found", where=where) from None
    except IsADirectoryError:
        raise InvalidRequest("file", "is a directory", where=where) from None
    except OSError as exc:
        raise InvalidRequest("file", f"cannot be read ({exc.strerror or exc})", where=where) from None
    if len(raw) > MAX_FILE_BYTES:
        raise InvalidRequest("file", f"is larger than {MAX_FILE_BYTES // 1024} KiB: not a lease file", where=where)
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
    return request_from_fields(data, now, where=where, default_user=default_user, images=images,
                               base_dir=Path(path).parent, site=site)
