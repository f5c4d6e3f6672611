"""What the simulated hosts hold (VMs, save images, disk overlays), and the JSON file that keeps it across
processes.

The file is read when the driver is built and written whole after each operation that changes the hosts:
next to the file, then renamed over it (`drivers.files.write_whole`), so a reader (or a process that starts
after a crash) sees the old state or the new one, never a mix. Only one driver process may write a given
file at a time.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, get_args

from drivers.base import DiskSpec, VMSpec, VMStateName
from drivers.cloudinit import SeedSpec
from drivers.files import write_whole

STATE_FORMAT = "leasewise-simulated-hosts"
STATE_VERSION = 1

_VM_STATES = frozenset(get_args(VMStateName))
_SPEC_FIELDS = frozenset(f.name for f in fields(VMSpec))


@dataclass
class SimulatedVM:
    """A VM defined on a simulated host."""

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


@dataclass
class HostsState:
    """Everything on the simulated hosts that an operation changes."""

    vms: dict[str, SimulatedVM] = field(default_factory=dict)
    images: dict[ImageKey, SaveImage] = field(default_factory=dict)
    disks: dict[str, bool] = field(default_factory=dict)   # VM -> its overlay is kept when it stops
    #: (host, VM) -> a copy a host that was down kept while the VM was started again elsewhere (libvirt keeps
    #: one definition per host, so a VM's name can be on two hosts: the live one is in `vms`)
    left: dict[tuple[str, str], SimulatedVM] = field(default_factory=dict)
    #: (host, path) -> SHA-256 of a base image copied to that host's own storage (`upload_image`)
    base_copies: dict[tuple[str, str], str] = field(default_factory=dict)

    def copy(self) -> HostsState:
        """A copy an operation can be undone to (the VM records are copied: operations change them)."""
        return HostsState({name: replace(vm) for name, vm in self.vms.items()}, dict(self.images), dict(self.disks),
                          {key: replace(vm) for key, vm in self.left.items()}, dict(self.base_copies))


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
            return _parse(json.loads(text), hosts)
        except (ValueError, KeyError, TypeError) as exc:
            problem = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc)
            raise ValueError(f"simulated state file {path}: {problem}") from None

    def save(self, state: HostsState) -> None:
        """Write `state` whole (one line: the C encoder, as the file is rewritten after every operation)."""
        write_whole(self.path, json.dumps(self._json(state), sort_keys=True, separators=(",", ":")))

    def _json(self, state: HostsState) -> dict[str, Any]:
        # (a spec is frozen: its JSON is made once, not at every write of a file listing every VM)
        known, self._spec_json = self._spec_json, {}

        def spec_json(spec: VMSpec) -> dict[str, Any]:
            cached = known.get(id(spec))
            if cached is None or cached[0] is not spec:
                cached = (spec, asdict(spec))
            self._spec_json[id(spec)] = cached
            return cached[1]

        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "vms": {name: {"host": vm.host, "state": vm.state, "spec": spec_json(vm.spec)}
                    for name, vm in state.vms.items()},
            "disks": state.disks,
            "images": [{"host": host, "path": image_path, "size_bytes": image.size_bytes,
                        "spec": spec_json(image.spec)}
                       for (host, image_path), image in state.images.items()],
            "left": [{"host": vm.host, "state": vm.state, "spec": spec_json(vm.spec)} for vm in state.left.values()],
            "base_copies": [{"host": host, "path": path, "sha256": digest}
                            for (host, path), digest in state.base_copies.items()],
        }


def _parse(data: Any, hosts: Collection[str]) -> HostsState:
    if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
        raise ValueError(f"not a {STATE_FORMAT} file")
    if data.get("version") != STATE_VERSION:
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
