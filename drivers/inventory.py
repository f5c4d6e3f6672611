"""The host inventory file (TOML): which hosts the libvirt driver manages and how to reach them.

The lab writes one (`deploy/lab/run/inventory.toml`); the CLI and the daemon read it. Mistakes are
reported as one `DriverConfigError` line naming the file, the host and the key, because an operator edits
this file by hand. docs/cluster.md says what each transport needs (`uri`, `peer_uri`, `ssh_key`,
`known_hosts`, `migration_uri`).
"""

from __future__ import annotations

import json
import os
import posixpath
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from urllib.parse import urlsplit

from .domain_xml import DOMAIN_TYPES, NETWORK_TYPES
from .errors import DriverConfigError
from .files import UserFileError, read_user_file

INVENTORY_ENV = "LEASEWISE_INVENTORY"
LAB_INVENTORY = Path("deploy/lab/run/inventory.toml")
DEFAULT_STATE_DIR = "/var/lib/libvirt/qemu/save"
#: where a host keeps its VMs' disk overlays and cloud-init seeds when the inventory names no `disk_dir`
#: (under the first shared-storage prefix, so a live migration finds the disk where it left it)
DISK_DIR_NAME = "leasewise-vms"
FALLBACK_DISK_PARENT = "/var/lib/libvirt/images"
#: the largest inventory read (a few hundred hosts take some tens of KiB)
MAX_INVENTORY_BYTES = 4 << 20


@dataclass(frozen=True)
class HostConfig:
    """One host: its libvirt URI and what is needed to move memory images to and from it."""

    name: str
    uri: str
    domain_type: str = "kvm"                 # kvm | qemu (TCG, e.g. inside a nested lab)
    ssh: str | None = None                   # user@host[:port], for move_state over SFTP
    ssh_key: str | None = None
    known_hosts: str | None = None
    migration_uri: str | None = None         # data channel for migrate3 (VIR_MIGRATE_PARAM_URI)
    state_dir: str = DEFAULT_STATE_DIR       # where save images go
    shared_storage: tuple[str, ...] = ()     # path prefixes every host sees (no copy needed)
    network: str | None = None               # the bridge (or libvirt network) VMs attach to; None = no NIC
    network_type: str = "bridge"             # bridge | network
    disk_dir: str | None = None              # the libvirt pool directory for overlays and seeds
    peer_uri: str | None = None              # how the other hosts' libvirtd reach this one (peer-to-peer migration)
    #: the private key and known_hosts file, on this host, with which it copies memory images (and the disks
    #: moved with them) straight to the other hosts' `ssh` targets; without a key they go through this machine
    peer_ssh_key: str | None = None
    peer_known_hosts: str | None = None
    #: what leases may ask of the host (`--where gpu=a100`): (key, value) pairs sorted by key; an inventory
    #: gives them as a table (`properties = { gpu = "a100" }`); the service checks their names
    properties: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for key in ("name", "uri"):
            value = getattr(self, key)
            if not isinstance(value, str) or not value.strip():
                raise DriverConfigError(key, "must be a non-empty string")
        for key in ("ssh", "ssh_key", "known_hosts", "migration_uri", "network", "disk_dir", "peer_uri",
                    "peer_ssh_key", "peer_known_hosts"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise DriverConfigError(key, "must be a non-empty string when given")
        if self.domain_type not in DOMAIN_TYPES:
            raise DriverConfigError("domain_type", f"must be one of {', '.join(DOMAIN_TYPES)} (got {self.domain_type!r})")
        if not urlsplit(self.uri).scheme:
            raise DriverConfigError("uri", f"{self.uri!r} is not a libvirt URI (e.g. qemu+tcp://10.77.0.11/system)")
        if self.peer_uri is not None and not urlsplit(self.peer_uri).hostname:
            raise DriverConfigError("peer_uri", f"{self.peer_uri!r} is not a libvirt URI naming a host "
                                                "(e.g. qemu+tls://10.77.0.11/system)")
        if not isinstance(self.state_dir, str) or not posixpath.isabs(self.state_dir):
            raise DriverConfigError("state_dir", f"must be an absolute path (got {self.state_dir!r})")
        if isinstance(self.shared_storage, str) or not isinstance(self.shared_storage, Iterable):
            raise DriverConfigError("shared_storage", "must be a list of absolute paths")
        prefixes = tuple(self.shared_storage)
        for prefix in prefixes:
            if not isinstance(prefix, str) or not posixpath.isabs(prefix):
                raise DriverConfigError("shared_storage", f"must be a list of absolute paths (got {prefix!r})")
        object.__setattr__(self, "shared_storage", tuple(posixpath.normpath(p) for p in prefixes))
        if self.network_type not in NETWORK_TYPES:
            raise DriverConfigError("network_type",
                                    f"must be one of {', '.join(NETWORK_TYPES)} (got {self.network_type!r})")
        for key in ("disk_dir", "peer_ssh_key", "peer_known_hosts"):   # (paths on the host itself)
            value = getattr(self, key)
            if value is not None and not posixpath.isabs(value):
                raise DriverConfigError(key, f"must be an absolute path on the host (got {value!r})")
        if self.peer_known_hosts is not None and self.peer_ssh_key is None:
            raise DriverConfigError("peer_known_hosts", "needs peer_ssh_key (the key the host copies with)")
        pairs = self.properties.items() if isinstance(self.properties, Mapping) else self.properties
        if isinstance(pairs, str) or not isinstance(pairs, Iterable):
            raise DriverConfigError("properties", "must be a table of names, e.g. { gpu = \"a100\" }")
        checked = {}
        for pair in pairs:
            if (not isinstance(pair, (tuple, list)) or len(pair) != 2
                    or not all(isinstance(p, str) and p.strip() for p in pair)):
                raise DriverConfigError("properties", f"must be a table of names, e.g. {{ gpu = \"a100\" }} "
                                                      f"(got {pair!r})")
            checked[pair[0]] = pair[1]
        object.__setattr__(self, "properties", tuple(sorted(checked.items())))

    @property
    def property_map(self) -> dict[str, str]:
        return dict(self.properties)

    @property
    def is_remote(self) -> bool:
        """True when the URI names a host (qemu+tcp://h/system), False for qemu:///system or test:///."""
        return bool(urlsplit(self.uri).hostname)

    @property
    def vm_disk_dir(self) -> str:
        """Where this host's VM overlays and seeds live: `disk_dir`, else under its first shared storage."""
        if self.disk_dir is not None:
            return posixpath.normpath(self.disk_dir)
        parent = self.shared_storage[0] if self.shared_storage else FALLBACK_DISK_PARENT
        return posixpath.join(parent, DISK_DIR_NAME)

    def shares_vm_disks_with(self, other: HostConfig) -> bool:
        """Whether a VM's overlay and seed on this host are where `other` sees them too (one directory on
        storage both share), so a VM moving between them needs no copy of its disks."""
        disk_dir = self.vm_disk_dir
        return disk_dir == other.vm_disk_dir and self.is_shared(disk_dir) and other.is_shared(disk_dir)

    def is_shared(self, path: str) -> bool:
        """Whether `path` is on storage every host sees, so no copy is needed."""
        return is_under(path, self.shared_storage)


def is_under(path: str, prefixes: Iterable[str]) -> bool:
    """Whether the POSIX `path` lies inside one of `prefixes` (by path components, not by string)."""
    norm = posixpath.normpath(path)
    for prefix in prefixes:
        prefix = posixpath.normpath(prefix)
        if norm == prefix or norm.startswith(prefix.rstrip("/") + "/"):
            return True
    return False


_KEYS = frozenset(f.name for f in fields(HostConfig))
_STRING_KEYS = _KEYS - {"shared_storage", "properties"}


def _host_from_table(table: object, index: int, where: str) -> HostConfig:
    label = f"host[{index}]"
    if not isinstance(table, Mapping):
        raise DriverConfigError(label, "must be a table ([[host]])", where=where)
    name = table.get("name")
    if isinstance(name, str) and name:
        label = f"host {name!r}"
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise DriverConfigError(f"{label}.{unknown[0]}", f"unknown key (known: {', '.join(sorted(_KEYS))})", where=where)
    for key in ("name", "uri"):
        if key not in table:
            raise DriverConfigError(f"{label}.{key}", "is required", where=where)
    for key in _STRING_KEYS & set(table):
        if not isinstance(table[key], str):
            raise DriverConfigError(f"{label}.{key}", f"must be a string (got {table[key]!r})", where=where)
    if "shared_storage" in table and not isinstance(table["shared_storage"], list):
        raise DriverConfigError(f"{label}.shared_storage", "must be a list of absolute paths", where=where)
    if "properties" in table:
        props = table["properties"]
        if not isinstance(props, Mapping) or not all(isinstance(v, str) for v in props.values()):
            raise DriverConfigError(f"{label}.properties", 'must be a table of strings, e.g. { gpu = "a100" }',
                                    where=where)
    try:
        return HostConfig(**dict(table))
    except DriverConfigError as exc:
        raise DriverConfigError(f"{label}.{exc.field}", exc.problem, where=where) from None


def load_inventory(path: str | os.PathLike[str]) -> list[HostConfig]:
    """Read and validate an inventory file; raises `DriverConfigError` naming the file, host and key."""
    where = str(path)
    try:
        raw = read_user_file(path, MAX_INVENTORY_BYTES)
    except UserFileError as exc:
        raise DriverConfigError("inventory", "file not found" if exc.problem == "no such file" else exc.problem,
                                where=where) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise DriverConfigError("inventory", "is not UTF-8 text", where=where) from None
    except RecursionError:
        raise DriverConfigError("inventory", "is not valid TOML (nested too deeply)", where=where) from None
    except tomllib.TOMLDecodeError as exc:
        raise DriverConfigError("inventory", f"is not valid TOML ({exc})", where=where) from None
    unknown = sorted(set(data) - {"host"})
    if unknown:
        raise DriverConfigError(unknown[0], "unknown top-level key (only [[host]] tables are allowed)", where=where)
    tables = data.get("host")
    if not isinstance(tables, list) or not tables:
        raise DriverConfigError("host", "no [[host]] entries", where=where)
    hosts: list[HostConfig] = []
    seen: set[str] = set()
    for index, table in enumerate(tables):
        host = _host_from_table(table, index, where)
        if host.name in seen:
            raise DriverConfigError(f"host {host.name!r}.name", "duplicate host name", where=where)
        seen.add(host.name)
        hosts.append(host)
    return hosts


def _toml_string(value: str) -> str:
    # A JSON string literal is a valid TOML basic string (same escapes, \uXXXX for the rest).
    return json.dumps(value)


def dump_inventory(hosts: Iterable[HostConfig]) -> str:
    """Render hosts as inventory TOML that `load_inventory` reads back to equal `HostConfig`s."""
    blocks: list[str] = []
    names: set[str] = set()
    for host in hosts:
        if host.name in names:
            raise DriverConfigError(f"host {host.name!r}.name", "duplicate host name")
        names.add(host.name)
        lines = ["[[host]]"]
        for f in fields(HostConfig):
            value = getattr(host, f.name)
            if value is None:
                continue
            if f.name == "shared_storage":
                lines.append(f"shared_storage = [{', '.join(_toml_string(p) for p in value)}]")
            elif f.name == "properties":
                if value:
                    lines.append(f"properties = {{ {', '.join(f'{_toml_string(k)} = {_toml_string(v)}' for k, v in value)} }}")
            else:
                lines.append(f"{f.name} = {_toml_string(value)}")
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)


def resolve_inventory_path(
    option: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> Path | None:
    """The inventory to use: the option, else $LEASEWISE_INVENTORY, else the lab's file if present."""
    if option is not None:
        return Path(option)
    environ = os.environ if env is None else env
    if environ.get(INVENTORY_ENV):
        return Path(environ[INVENTORY_ENV])
    lab = Path(cwd if cwd is not None else Path.cwd()) / LAB_INVENTORY
    return lab if lab.is_file() else None


def split_ssh_target(target: str) -> tuple[str | None, str, int]:
    """`user@host[:port]` -> (user, host, port); `[v6]:port` is accepted too."""
    user, _, rest = target.rpartition("@")
    port = 22
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        if tail.startswith(":"):
            port = int(tail[1:])
    elif rest.count(":") == 1:
        host, _, port_text = rest.partition(":")
        port = int(port_text)
    else:
        host = rest
    return (user or None), host, port
