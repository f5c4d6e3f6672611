"""A workload: lease requests in submit order, the site they were made for, and what was left out.

The simulator runs a `Workload`; the readers in `orchestrator.workloads` make one from a file. The site a
run uses is `orchestrator.config.simulation.resolve_site(workload, config)`: the configuration's
`[simulation] site` when it names one, otherwise the workload's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from orchestrator.model.errors import WorkloadError
from orchestrator.model.lease import LeaseRequest
from orchestrator.model.resources import Resources, within
from orchestrator.model.tolerance import EPSILON


@dataclass(frozen=True)
class Workload:
    """Lease requests sorted by submit time (stable), with the workload's lease ids as strings."""

    requests: list[tuple[str, LeaseRequest]]
    site: list[tuple[str, Resources]] | None = None
    #: host -> its properties, for leases that carry `where` constraints (an LWF site's `properties`)
    properties: dict[str, dict[str, str]] = field(default_factory=dict)
    source: str = ""
    skipped: dict[str, int] = field(default_factory=dict)   # reason -> number of trace entries left out
    name: str = ""
    description: str = ""

    def __len__(self) -> int:
        return len(self.requests)


_RES_UNIT = {"cpu": "% of a core", "memory": " MiB", "disk": " MiB", "net_in": " MB/s", "net_out": " MB/s"}


def check_fits_site(request: LeaseRequest, hosts: list[tuple[str, Resources]], where: str,
                    _cache: dict | None = None) -> None:
    """Refuse a lease with more nodes than the site has hosts, or a node no single host can hold."""
    if request.numnodes > len(hosts):
        raise WorkloadError("nodes", f"asks for {request.numnodes} nodes but the site has {len(hosts)} hosts", where=where)
    seen: dict[Resources, Literal[True] | tuple[str, str]] = _cache if _cache is not None else {}
    for i, node in enumerate(request.nodes):
        verdict = seen.get(node)
        if verdict is None:
            verdict = _node_verdict(node, hosts)
            seen[node] = verdict
        if verdict is not True:
            resource, problem = verdict
            raise WorkloadError(f"nodes[{i}].{resource}" if resource else f"nodes[{i}]", problem, where=where)


def _node_verdict(node: Resources, hosts: list[tuple[str, Resources]]) -> Literal[True] | tuple[str, str]:
    """True when some host can hold `node`, else (the resource no host has enough of, or "", the reason)."""
    if any(within(node, capacity) for _, capacity in hosts):
        return True
    for index, name in enumerate(Resources._fields):
        largest = max(capacity[index] for _, capacity in hosts)
        if node[index] > largest + EPSILON:
            unit = _RES_UNIT[name]
            return name, f"asks {node[index]:g}{unit} but the largest host has {largest:g}{unit}"
    return "", f"({node.describe()}) fits on no single host of the site"
