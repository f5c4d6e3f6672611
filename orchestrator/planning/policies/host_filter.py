"""Host filters: which hosts may hold a lease's VMs at all, before the mapper looks at room or scores.

This is the Kubernetes scheduler framework's Filter extension point: each filter is a small named class,
registered in `HOST_FILTER`, that says of one host whether it is a candidate for a lease. The mapper runs
every registered filter that applies to the lease (`HostFilter.applies`) and keeps the hosts all of them
admit; a lease no filter applies to costs nothing (the mapper's usual path, with every host). Every move of
a lease is planned through the mapper or, for live migration, through the same chain
(`HostFilters.allowed`), so what a filter refuses a lease never gets, later included.

- `constraints`: the lease's `--where` tests on the host's properties (`orchestrator.model.placement`).

Another filter (say, the hosts that hold a lease's image, for local storage) is one more class here: it
reads what it needs of the hosts from `HostFacts` and says whether it `applies` to a lease.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping

from orchestrator.model.lease import Lease
from orchestrator.planning.policies.registry import Registry


class HostFacts:
    """What the filters know of the hosts beyond their capacity: their properties. `version` changes with
    every change, so what was worked out from them can be remembered."""

    def __init__(self, properties: Mapping[str, Mapping[str, str]] | None = None):
        self.properties: dict[str, Mapping[str, str]] = dict(properties or {})
        self.version = 0

    def set_properties(self, host: str, properties: Mapping[str, str]) -> None:
        self.properties[host] = dict(properties)
        self.version += 1

    def properties_of(self, host: str) -> Mapping[str, str]:
        return self.properties.get(host, {})


class HostFilter(ABC):
    name = "abstract"

    @abstractmethod
    def applies(self, lease: Lease) -> bool:
        """Whether this filter has anything to say about the lease (cheap: asked of every placement)."""

    @abstractmethod
    def admits(self, lease: Lease, host: str, facts: HostFacts) -> bool:
        """Whether the host may hold VMs of the lease."""

    def key(self, lease: Lease) -> object:
        """What the filter's answer for a lease depends on (besides the hosts' facts): leases with equal
        keys get the same hosts, worked out once."""
        return lease.request.placement


HOST_FILTER: Registry[HostFilter] = Registry("host filter", "scheduling")


@HOST_FILTER.register("constraints")
class Constraints(HostFilter):
    """The hosts whose properties meet every `--where` constraint of the lease."""

    def applies(self, lease: Lease) -> bool:
        placement = lease.request.placement
        return placement is not None and bool(placement.where)

    def admits(self, lease: Lease, host: str, facts: HostFacts) -> bool:
        placement = lease.request.placement
        assert placement is not None
        return placement.admits(facts.properties_of(host))

    def key(self, lease: Lease) -> object:
        placement = lease.request.placement
        return None if placement is None else placement.where


class HostFilters:
    """Every registered filter, run in turn: the hosts a lease may use."""

    def __init__(self, facts: HostFacts, filters: Iterable[HostFilter] | None = None):
        self.facts = facts
        self.filters = [HOST_FILTER.create(name) for name in HOST_FILTER.names()] if filters is None else list(filters)
        self._known: dict[tuple, frozenset[str]] = {}

    def allowed(self, lease: Lease, hosts: Iterable[str]) -> frozenset[str] | None:
        """The hosts of `hosts` that every filter applying to the lease admits; None when none applies
        (every host may be used). `hosts` must be the same list for the same facts (the table's)."""
        if lease.request.placement is None:   # (the usual lease: no filter has anything to say)
            return None
        applying = [f for f in self.filters if f.applies(lease)]
        if not applying:
            return None
        key = (self.facts.version, tuple((f.name, f.key(lease)) for f in applying))
        found = self._known.get(key)
        if found is None:
            if len(self._known) > 256:
                self._known.clear()
            facts = self.facts
            found = self._known[key] = frozenset(h for h in hosts if all(f.admits(lease, h, facts) for f in applying))
        return found

    def forget(self) -> None:
        """The table's hosts changed: what was worked out from them no longer holds."""
        self._known.clear()
