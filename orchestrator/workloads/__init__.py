"""Workloads: lease requests read from a file (Haizea's LWF, the Parallel Workloads Archive's SWF) or generated.

`load_workload(path, config)` picks the format from the file name (`.lwf`/`.xml`, `.swf`, either optionally
`.gz`) or, failing that, from the content, and returns a `Workload`: the requests in submit order, each with
the workload's own lease id, plus the site the file describes (if any).

Which site a simulation runs on is `resolve_site(workload, config)`: the configuration's
`[simulation] site` when it names one, otherwise the workload's.
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError, WorkloadError
from ..lease import LeaseRequest
from ..resources import Resources, within

if TYPE_CHECKING:  # pragma: no cover
    from ..config import Config

__all__ = ["Workload", "load_workload", "resolve_site", "check_fits_site"]


@dataclass(frozen=True)
class Workload:
    """Lease requests sorted by submit time (stable), with the workload's lease ids as strings."""

    requests: list[tuple[str, LeaseRequest]]
    site: list[tuple[str, Resources]] | None = None
    source: str = ""
    skipped: dict[str, int] = field(default_factory=dict)   # reason -> number of trace entries left out
    name: str = ""
    description: str = ""

    def __len__(self) -> int:
        return len(self.requests)


def resolve_site(workload: Workload, config: "Config | None") -> list[tuple[str, Resources]]:
    """The hosts to simulate: the configuration's site if it names one, else the workload's."""
    if config is not None and config.simulation.site is not None:
        return config.simulation.hosts  # type: ignore[return-value]
    if workload.site is not None:
        return list(workload.site)
    raise ConfigError("simulation.site",
                      f"no site to simulate: the configuration names none and {workload.source or 'the workload'} describes none "
                      '(set e.g. site = "4 CPU:100,Memory:1024" in [simulation])')


_RES_UNIT = {"cpu": "% of a core", "memory": " MiB", "disk": " MiB", "net_in": " MB/s", "net_out": " MB/s"}


def check_fits_site(request: LeaseRequest, hosts: list[tuple[str, Resources]], where: str,
                    _cache: dict | None = None) -> None:
    """Refuse a lease with more nodes than the site has hosts, or a node no single host can hold."""
    if request.numnodes > len(hosts):
        raise WorkloadError("nodes", f"asks for {request.numnodes} nodes but the site has {len(hosts)} hosts", where=where)
    seen: dict = _cache if _cache is not None else {}
    for i, node in enumerate(request.nodes):
        verdict = seen.get(node)
        if verdict is None:
            verdict = _node_verdict(node, hosts)
            seen[node] = verdict
        if verdict is not True:
            resource, problem = verdict
            raise WorkloadError(f"nodes[{i}].{resource}" if resource else f"nodes[{i}]", problem, where=where)


def _node_verdict(node: Resources, hosts: list[tuple[str, Resources]]) -> "bool | tuple[str, str]":
    if any(within(node, capacity) for _, capacity in hosts):
        return True
    for index, name in enumerate(Resources._fields):
        largest = max(capacity[index] for _, capacity in hosts)
        if node[index] > largest + 1e-9:
            unit = _RES_UNIT[name]
            return name, f"asks {node[index]:g}{unit} but the largest host has {largest:g}{unit}"
    return "", f"({node.describe()}) fits on no single host of the site"


def _read(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise WorkloadError(str(path), f"cannot read the workload file ({exc.strerror or exc})") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise WorkloadError(str(path), f"not a valid gzip file ({exc})") from None
    return raw


def load_workload(path: str | Path, config: "Config | None" = None) -> Workload:
    """Read an LWF or SWF workload (gzip-compressed or not) into a `Workload`."""
    from ..config import Config
    from . import lwf, swf

    config = config or Config()
    path = Path(path)
    data = _read(path)
    name = path.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.endswith((".lwf", ".xml")):
        return lwf.parse_lwf(data, config, source=str(path))
    if name.endswith(".swf"):
        return swf.parse_swf(data, config, source=str(path))
    head = data.lstrip()[:1]
    if head == b"<":
        return lwf.parse_lwf(data, config, source=str(path))
    if head == b";" or head.isdigit():
        return swf.parse_swf(data, config, source=str(path))
    raise WorkloadError(str(path), "unknown workload format (expected an LWF .lwf/.xml or an SWF .swf file, optionally .gz)")
