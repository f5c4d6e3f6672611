"""The site as a request is first checked against: how many hosts, and the most CPU and memory one has.

A request no set of hosts could ever hold is refused at once rather than queued forever. Every submission
is checked twice (as it is read, and again under the scheduler's lock), so the shape is computed once per
change of the hosts, not per submission: a scan of a thousand hosts cost more than the rest of the check."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator.model.errors import InvalidRequest
from orchestrator.model.resources import Resources
from orchestrator.model.tolerance import EPSILON


@dataclass(frozen=True)
class SiteShape:
    hosts: int
    largest: Resources   # the most CPU any host has, and the most memory (maybe of two different hosts)


def site_shape(capacities: Iterable[Resources]) -> SiteShape:
    capacities = list(capacities)
    if not capacities:
        return SiteShape(0, Resources(0, 0))
    return SiteShape(len(capacities), Resources(max(c.cpu for c in capacities), max(c.memory for c in capacities)))


def check_site_can_hold(site: SiteShape, numnodes: int, node: Resources) -> None:
    """Refuse, naming the field, `numnodes` VMs of size `node` that no set of the site's hosts could ever
    hold. It works on the numbers alone, so a request absurd for the site is refused before its list of
    nodes is made."""
    if not site.hosts:
        raise InvalidRequest("hosts", "no hosts: add one with `leasewise host add` or `leasewise host import`")
    largest = site.largest
    for field in ("cpu", "memory"):
        if getattr(node, field) > getattr(largest, field) + EPSILON:
            unit = "vCPUs" if field == "cpu" else "MiB"
            asked = node.vcpus if field == "cpu" else node.memory
            most = largest.vcpus if field == "cpu" else largest.memory
            raise InvalidRequest(f"nodes[0].{'cpus' if field == 'cpu' else 'memory'}",
                                 f"{asked:g} {unit} is more than any host has ({most:g} {unit})")
    if numnodes > site.hosts * max(1, int(largest.cpu // max(node.cpu, 1))):
        raise InvalidRequest("nodes", f"{numnodes} nodes cannot fit on {site.hosts} hosts")
