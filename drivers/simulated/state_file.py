"""What the simulated hosts hold (VMs, save images, disk overlays), and the file that keeps it across
processes.

The file is a journal: its first line the whole state (JSON), each following line what one operation
changed (the new entries, null for those it removed), appended and flushed to disk. An operation then costs
what it changed, not the whole site (a server enacting thousands of VMs rewrote every VM at every start).
When the lines appended outweigh the first, the file is written whole again: beside it, then renamed over
it (`drivers.files.write_whole`). A reader, or a process that starts after a crash, sees the old state or
the new one, never a mix: a last line cut short by a crash is an operation that did not happen. Only one
driver process may write a given file at a time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, get_args

from drivers.base import DiskSpec, VMSpec, VMStateName
from drivers.cloudinit import SeedSpec
from drivers.files import write_whole

STATE_FORMAT = "leasewise-simulated-hosts"
STATE_VERSION = 2   # (1: the first line only, no journal; still read)
#: a file's journal is written whole again once its lines outweigh its first line, and this at least
_MIN_JOURNAL_BYTES = 64 * 1024

_VM_STATES = frozenset(get_args(VMStateName))
_SPEC_FIELDS = frozenset(f.name for f in fields(VMSpec))


@dataclass(frozen=True)
class SimulatedVM:
    """A VM defined on a simulated host (replaced, not changed: an operation's changes are the entries it
    replaced, found by identity)."""

    spec: VMSpec
    host: str
    state: VMStateName


@dataclass(frozen=True)
class SaveImage:
    """A memory image a suspension wrote: whose VM it holds, and its size."""

    spec: VMSpec
    size_bytes: int


#: a save image's key: (host, path) for a host's own files, (None, path) on shared storage
ImageKey = tuple[str | None, str]


_ABSENT = object()


class UndoableDict(dict):
    """A dict that, during a change (`begin` to `keep` or `undo`), remembers each key's entry from before the
    key's first change: an operation's changes are then the keys it touched, and undoing it puts back those
    entries alone (a copy of every VM before each operation, compared after it, cost each operation the
    whole site). Every write, an undo's too, goes through `_put` and `_drop`."""

    __slots__ = ("_before",)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__()
        self._before: dict | None = None
        for key, value in dict(*args, **kwargs).items():
            self._put(key, value)

    def _put(self, key: Any, value: Any) -> None:
        dict.__setitem__(self, key, value)

    def _drop(self, key: Any) -> None:
        dict.__delitem__(self, key)

    def _remember(self, key: Any) -> None:
        before = self._before
        if before is not None and key not in before:
            before[key] = dict.get(self, key, _ABSENT)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._remember(key)
        self._put(key, value)

    def __delitem__(self, key: Any) -> None:
        self._remember(key)
        self._drop(key)

    def pop(self, key: Any, *default: Any) -> Any:
        if key not in self:
            if default:
                return default[0]
            raise KeyError(key)
        value = dict.__getitem__(self, key)
        del self[key]
        return value

    def _unsupported(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("the hosts' state changes one key at a time ([]=, del, pop)")

    setdefault = update = popitem = clear = __ior__ = _unsupported

    def begin(self) -> None:
        self._before = {}

    def changes(self) -> dict:
        """The keys changed since `begin`: -> the new entry, or None when the key is gone."""
        changed = {}
        for key, old in (self._before or {}).items():
            new = dict.get(self, key, _ABSENT)
            if new is not old:
                changed[key] = None if new is _ABSENT else new
        return changed

    def keep(self) -> None:
        self._before = None

    def undo(self) -> None:
        """Put back every entry changed since `begin`; the change is over."""
        before, self._before = self._before or {}, None
        for key, old in before.items():
            if old is not _ABSENT:
                self._put(key, old)
            elif key in self:
                self._drop(key)


class VMsByHost(UndoableDict):
    """VMs (or a host's kept copies) that are also kept by host, so that a host's VMs are listed without a
    scan of the whole site."""

    __slots__ = ("_on_host",)

    def __init__(self, *args: Any, **kwargs: Any):
        self._on_host: dict[str, dict[Any, SimulatedVM]] = {}
        super().__init__(*args, **kwargs)

    def _put(self, key: Any, value: SimulatedVM) -> None:
        old = dict.get(self, key)
        if old is not None and old.host != value.host:   # (else it keeps its place in its host's list)
            del self._on_host[old.host][key]
        dict.__setitem__(self, key, value)
        self._on_host.setdefault(value.host, {})[key] = value

    def _drop(self, key: Any) -> None:
        del self._on_host[dict.__getitem__(self, key).host][key]
        dict.__delitem__(self, key)


#: the kinds of entry a state holds, as the file names them
KINDS = ("vms", "images", "disks", "left", "base_copies")


@dataclass
class HostsState:
    """Everything on the simulated hosts that an operation changes. An operation begins a change (`begin`),
    changes entries one key at a time, then keeps them (`changes` says which, `keep`) or puts everything
    back (`undo`)."""

    vms: dict[str, SimulatedVM] = field(default_factory=dict)
    images: dict[ImageKey, SaveImage] = field(default_factory=dict)
    disks: dict[str, bool] = field(default_factory=dict)   # VM -> its overlay is kept when it stops
    #: (host, VM) -> a copy a host that was down kept while the VM was started again elsewhere (libvirt keeps
    #: one definition per host, so a VM's name can be on two hosts: the live one is in `vms`)
    left: dict[tuple[str, str], SimulatedVM] = field(default_factory=dict)
    #: (host, path) -> SHA-256 of a base image copied to that host's own storage (`upload_image`)
    base_copies: dict[tuple[str, str], str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.vms, self.left = VMsByHost(self.vms), VMsByHost(self.left)
        self.images, self.disks = UndoableDict(self.images), UndoableDict(self.disks)
        self.base_copies = UndoableDict(self.base_copies)

    def _parts(self) -> list[UndoableDict]:
        return [getattr(self, kind) for kind in KINDS]

    @property
    def changing(self) -> bool:
        return self.vms._before is not None   # type: ignore[attr-defined]

    def begin(self) -> None:
        for part in self._parts():
            part.begin()

    def changes(self) -> dict[str, dict]:
        """{kind: {key: new entry, or None when gone}} of every entry changed since `begin`."""
        return {kind: part.changes() for kind, part in zip(KINDS, self._parts())}

    def keep(self) -> None:
        for part in self._parts():
            part.keep()

    def undo(self) -> None:
        for part in self._parts():
            part.undo()

    def on_host(self, host: str) -> list[SimulatedVM]:
        """The VMs defined on `host`: its live ones, then the copies it kept."""
        live = self.vms._on_host.get(host)   # type: ignore[attr-defined]
        kept = self.left._on_host.get(host) if self.left else None   # type: ignore[attr-defined]
        if kept:
            return [*(live.values() if live else ()), *kept.values()]
        return list(live.values()) if live else []


def spec_from_json(data: object) -> VMSpec:
    """A `VMSpec` from its JSON form (`dataclasses.asdict`); `ValueError` names what is wrong."""
    if not isinstance(data, dict):
        raise ValueError(f"bad VM spec {data!r}")
    unknown = sorted(set(data) - _SPEC_FIELDS)
    if unknown:
        raise ValueError(f"VM spec has unknown key {unknown[0]!r}")
    values = dict(data)
    if isinstance(values.get("disk"), dict):
        values["disk"] = DiskSpec(**values["disk"])
    if isinstance(values.get("seed"), dict):
        values["seed"] = SeedSpec(**{**values["seed"], "ssh_keys": tuple(values["seed"].get("ssh_keys", ()))})
    return VMSpec(**values)


class StateFile:
    """The JSON file of one driver's simulated hosts."""

    def __init__(self, path: Path):
        self.path = path
        self._spec_json: dict[int, tuple[VMSpec, dict[str, Any]]] = {}   # id(spec) -> (spec, its JSON)
        self._whole_bytes: int | None = None   # the first line's size (None: not written by this object yet)
        self._journal_bytes = 0   # the lines appended since

    def load(self, hosts: Collection[str]) -> HostsState | None:
        """The state in the file, checked against the driver's `hosts`; None when there is no file yet
        (it is written at the first change). `ValueError` naming the file and the problem otherwise."""
        path = self.path
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ValueError(f"simulated state file {path}: cannot be read ({exc.strerror or exc})") from None
        try:
            return _parse(_merged(text), hosts)
        except (ValueError, KeyError, TypeError) as exc:
            problem = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc)
            raise ValueError(f"simulated state file {path}: {problem}") from None

    def save(self, changes: Mapping[str, Mapping], after: HostsState) -> None:
        """Keep `after`, the state an operation's `changes` (`HostsState.changes`) made: the changes
        appended as one line, or the state written whole (the first write of this object, once the journal
        outweighs the first line, or when the file was removed). An error leaves the file as it was."""
        if self._whole_bytes is None or self._journal_bytes > max(self._whole_bytes, _MIN_JOURNAL_BYTES):
            self.write_whole(after)
            return
        line = (json.dumps(self._changes_json(changes), sort_keys=True, separators=(",", ":"))
                + "\n").encode()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        except FileNotFoundError:   # (removed under the driver: the state it holds is written afresh)
            self.write_whole(after)
            return
        try:
            size = os.fstat(fd).st_size
            try:
                os.write(fd, line)
                os.fsync(fd)
            except BaseException:
                os.ftruncate(fd, size)   # (a line half written, or not known to be on disk, is taken back)
                raise
        finally:
            os.close(fd)
        self._journal_bytes += len(line)

    def write_whole(self, state: HostsState) -> None:
        """The file made again of `state` alone (one line, no journal)."""
        # (a spec is frozen: its JSON is made once, not at every write of a file listing every VM)
        known, self._spec_json = self._spec_json, {}
        text = json.dumps(self._whole_json(state, known), sort_keys=True, separators=(",", ":")) + "\n"
        write_whole(self.path, text)
        self._whole_bytes, self._journal_bytes = len(text), 0

    def _spec(self, spec: VMSpec, known: dict[int, tuple[VMSpec, dict[str, Any]]]) -> dict[str, Any]:
        cached = known.get(id(spec))
        if cached is None or cached[0] is not spec:
            cached = (spec, asdict(spec))
        self._spec_json[id(spec)] = cached
        return cached[1]

    def _vm(self, vm: SimulatedVM, known) -> dict[str, Any]:
        return {"host": vm.host, "state": vm.state, "spec": self._spec(vm.spec, known)}

    def _image(self, key: ImageKey, image: SaveImage, known) -> dict[str, Any]:
        return {"host": key[0], "path": key[1], "size_bytes": image.size_bytes, "spec": self._spec(image.spec, known)}

    def _whole_json(self, state: HostsState, known) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "vms": {name: self._vm(vm, known) for name, vm in state.vms.items()},
            "disks": state.disks,
            "images": [self._image(key, image, known) for key, image in state.images.items()],
            "left": [self._vm(vm, known) for vm in state.left.values()],
            "base_copies": [{"host": host, "path": path, "sha256": digest}
                            for (host, path), digest in state.base_copies.items()],
        }

    def _changes_json(self, changes: Mapping[str, Mapping]) -> dict[str, Any]:
        """One operation's line: per kind, each changed entry's key and new JSON (null: removed)."""
        known = self._spec_json
        return {
            "vms": {name: None if vm is None else self._vm(vm, known) for name, vm in changes["vms"].items()},
            "disks": dict(changes["disks"]),
            "images": [[list(key), None if image is None else self._image(key, image, known)]
                       for key, image in changes["images"].items()],
            "left": [[list(key), None if vm is None else self._vm(vm, known)] for key, vm in changes["left"].items()],
            "base_copies": [[list(key), digest] for key, digest in changes["base_copies"].items()],
        }


def read_state(path: Path) -> dict[str, Any]:
    """The state a file holds, as one JSON document (its first line with the journal's changes applied)."""
    return _merged(path.read_text(encoding="utf-8"))


def _merged(text: str) -> dict[str, Any]:
    lines = text.split("\n")
    data = json.loads(lines[0])
    vms = data.get("vms") if isinstance(data, dict) else None
    if not isinstance(vms, dict) or len(lines) <= 2:
        return data   # (nothing to apply the journal to: `_parse` says what is wrong, if anything)
    complete = lines[1:-1] if not text.endswith("\n") else lines[1:]
    # (a file not ending in a new line ends in a line cut short: that operation did not happen)
    images = {(e.get("host"), e.get("path")): e for e in data.get("images", [])}
    left = {(e.get("host"), e.get("spec", {}).get("name")): e for e in data.get("left", [])}
    copies = {(e.get("host"), e.get("path")): e for e in data.get("base_copies", [])}
    disks = data.setdefault("disks", {})
    for line in complete:
        if not line:
            continue
        change = json.loads(line)
        for name, entry in change["vms"].items():
            _put(vms, name, entry)
        for name, keep in change["disks"].items():
            _put(disks, name, keep)
        for key, entry in change["images"]:
            _put(images, tuple(key), entry)
        for key, entry in change["left"]:
            _put(left, tuple(key), entry)
        for key, digest in change["base_copies"]:
            _put(copies, tuple(key), None if digest is None else {"host": key[0], "path": key[1], "sha256": digest})
    data["images"], data["left"] = list(images.values()), list(left.values())
    data["base_copies"] = list(copies.values())
    return data


def _put(entries: dict, key: Any, entry: Any) -> None:
    if entry is None:
        entries.pop(key, None)
    else:
        entries[key] = entry


def _parse(data: Any, hosts: Collection[str]) -> HostsState:
    if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
        raise ValueError(f"not a {STATE_FORMAT} file")
    if data.get("version") not in (1, STATE_VERSION):
        raise ValueError(f"version {data.get('version')!r} is not supported (expected {STATE_VERSION})")
    vms = {}
    if not isinstance(data["vms"], dict):
        raise ValueError("vms must map VM names to VMs")
    for name, entry in data["vms"].items():
        spec = spec_from_json(entry["spec"])
        if spec.name != name:
            raise ValueError(f"VM {name!r} holds the spec of {spec.name!r}")
        host, state = entry["host"], entry["state"]
        if host not in hosts:
            raise ValueError(f"VM {spec.name!r} is on host {host!r}, which this driver does not manage "
                             f"(hosts: {', '.join(hosts)})")
        if state not in _VM_STATES:
            raise ValueError(f"VM {spec.name!r} has unknown state {state!r}")
        vms[spec.name] = SimulatedVM(spec, host, state)
    images = {}
    for entry in data["images"]:
        host, image_path, size = entry["host"], entry["path"], entry["size_bytes"]
        if not isinstance(image_path, str) or (host is not None and not isinstance(host, str)):
            raise ValueError(f"bad save image entry {entry!r}")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"save image {image_path}: bad size {size!r}")
        images[(host, image_path)] = SaveImage(spec_from_json(entry["spec"]), size)
    disks = data.get("disks", {})
    if not isinstance(disks, dict) or not all(isinstance(v, bool) for v in disks.values()):
        raise ValueError("disks must map VM names to true/false")
    left = {}
    for entry in data.get("left", []):   # (absent from files written before hosts kept copies)
        spec = spec_from_json(entry["spec"])
        if entry["host"] not in hosts or entry["state"] not in _VM_STATES:
            raise ValueError(f"bad copy of VM {spec.name!r} left on {entry['host']!r}")
        left[(entry["host"], spec.name)] = SimulatedVM(spec, entry["host"], entry["state"])
    copies = {}
    for entry in data.get("base_copies", []):   # (absent from files written before images were copied)
        if entry["host"] not in hosts or not all(isinstance(entry[k], str) for k in ("path", "sha256")):
            raise ValueError(f"bad copy of a base image {entry!r}")
        copies[(entry["host"], entry["path"])] = entry["sha256"]
    return HostsState(vms, images, dict(disks), left, copies)
