"""The mapper: places a lease's virtual nodes on hosts for [start, end), preempting if it must.

Stages, as in the Kubernetes scheduler framework: *filter* (the host-filter plugins a lease's placement
calls on, `policies/host_filter.py`, then the hosts where the smallest node fits at the start), *score*
(the host-selection policy orders them), *reserve* (nodes assigned greedily in that order, packing or
spreading per the policy, or per the lease's own `--spread`/`--pack`; `--exclusive`: one empty host each,
held whole). *Bind* is the scheduler's job: it turns the mapping into
reservations. With `strict_end` off the mapping may end early (the latest end that fits on every host
used), for leases that will be suspended; hosts that would hold their nodes for less than the caller's
`min_end` are passed over, so a placement cut too short to be worth running is not built while one that
lasts longer exists. With preemption allowed, victim leases are added one at a time, the most
preemptable first, until the lease fits; victims that turned out not to be needed are dropped again. A
victim set is tried only if the capacity it frees could hold the lease at all (`preemption_bound`).

One placement is an `_Ask` (what to place, where, when, on which terms). `Mapper._place` reads the hosts
at the start (`_HostsAtStart`), filters and scores them (`Mapper._rank`), then hands the ranking to one
of two reserve stages: `_NodeByNode` (nodes of different sizes, or a spreading policy) or
`_AlikePacking`. Leases whose nodes are all alike (a 64-node job) on a packing policy are placed per
host rather than per node: how many nodes a host takes comes from the host states' counts per node
size, and only hosts whose usage changes before the end are walked along their timelines; a placement
that may end early and the strict one it prefers are built in the same walk. The answer is the
node-by-node greedy one (tests/planning/test_mapper_alike.py holds the two side by side).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Hashable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple, TypeVar, cast

import numpy as np

from orchestrator.model.lease import Lease
from orchestrator.model.placement import refusal
from orchestrator.model.reservations import Reservation, ReservationKind
from orchestrator.model.resources import NOTHING, Resources, add, fits, scale
from orchestrator.model.tolerance import EPSILON
from orchestrator.planning.image_filter import NO_IMAGE_FILTER, ImageHolders
from orchestrator.planning.policies import HostSelectionPolicy, PreemptionPolicy
from orchestrator.planning.policies.host_filter import HostFilters
from orchestrator.planning.preemption_bound import PreemptionBound
from orchestrator.planning.slottable.hoststates import fits_rows, room_of
from orchestrator.planning.slottable.table import SlotTable, time_key
from orchestrator.planning.slottable.keys import AT_START

_T = TypeVar("_T")


@dataclass(init=False)
class Mapping:
    """Where each virtual node goes, until when the placement holds, and which leases must give way."""

    nodes: dict[int, str]
    end: datetime
    victims: list[Lease] = field(default_factory=list)
    #: what each host holds when it is not what the nodes add up to: an exclusive lease's hosts, whole
    held: dict[str, Resources] | None = None

    def __init__(self, nodes: dict[int, str], end: datetime, victims: list[Lease] | None = None,
                 held: dict[str, Resources] | None = None) -> None:
        # (written out: compiled, it is native code; one is made per placement tried)
        self.nodes = nodes
        self.end = end
        self.victims = [] if victims is None else victims
        self.held = held

    def per_host(self, lease: Lease) -> dict[str, Resources]:
        """Total resources held on each host by this mapping."""
        if self.held is not None:
            return dict(self.held)
        alike = lease.request.uniform
        if alike is not None:   # (count the nodes per host, then one product each)
            hosts = self.nodes.values()
            one_each = dict.fromkeys(hosts, alike)
            if len(one_each) == len(self.nodes):   # (a node a host: the counts are all 1)
                return one_each
            return {host: alike if k == 1 else scale(alike, k) for host, k in Counter(hosts).items()}
        held: dict[str, Resources] = {}
        for vnode, host in self.nodes.items():
            held[host] = add(held.get(host, NOTHING), lease.request.nodes[vnode])
        return held


class _Ask(NamedTuple):
    """One placement to look for: the lease's nodes in the order they are tried, the hosts allowed, the
    interval, and the terms: whether it must hold to `end`, which reservations count as gone (the
    victims of a preemption), and (`strict_first`, alike nodes on a packing policy) whether a placement
    that holds to the end is preferred to one that may end early."""

    lease: Lease
    vnodes: list[int]
    hosts: Sequence[str]
    start: datetime
    end: datetime
    strict_end: bool
    excluding: Collection[Reservation] = ()
    strict_first: bool = False
    #: not strict: each host used holds its nodes at least until then (None: past the start is enough)
    floor: datetime | None = None


class _HostsAtStart(NamedTuple):
    """What the filter and score stages know of every host (one row each) at the start of an ask."""

    names: list[str]
    cap: np.ndarray
    #: names these states, for what is derived from them once (`Mapper._remember`); None with exclusions
    version: Hashable | None
    used: np.ndarray | None = None     # usage per row; None when read through `gather`
    counts: np.ndarray | None = None   # reservations per row; None when read through `gather`
    #: rows -> (usage, count) of just those rows: the host states read only what the ranking needs
    gather: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None
    room: np.ndarray | None = None     # alike nodes on a packing policy: how many fit on each row
    per_row: list[int] | None = None   # the same as a list, when the host states keep one
    potential: int | None = None       # the sum of `room`, when every host may be used
    #: rows -> whether their states are alike (as `gather` reads them): a ranking then keeps their order
    alike: Callable[[list[int]], bool] | None = None


class Mapper:
    def __init__(self, table: SlotTable, host_selection: HostSelectionPolicy, preemption: PreemptionPolicy,
                 filters: HostFilters | None = None, images: ImageHolders = NO_IMAGE_FILTER):
        self.table = table
        self.host_selection = host_selection
        self.preemption = preemption
        #: the filter step's plugins (`policies.host_filter`): None, or none applying, is every host
        self.filters = filters
        #: the hosts holding each image copied to hosts' own storage (a lease booting one goes only there)
        self.images = images
        self._derived: dict[tuple, object] = {}

    def allowed_hosts(self, lease: Lease, only_hosts: Collection[str] | None = None) -> Collection[str] | None:
        """The hosts the filter step lets the lease use, within `only_hosts` (None: every host): those holding
        its image when it is copied to hosts' own storage, and those its placement's plugins admit."""
        only_hosts = self.images.restrict(lease, only_hosts)
        if self.filters is None or lease.request.placement is None:
            return only_hosts
        allowed = self.filters.allowed(lease, self.table.hosts)
        if allowed is None:
            return only_hosts
        return allowed if only_hosts is None else allowed.intersection(only_hosts)

    def map(
        self,
        lease: Lease,
        start: datetime,
        end: datetime,
        *,
        strict_end: bool = True,
        only_hosts: Collection[str] | None = None,
        allow_preemption: bool = False,
        lease_of: Callable[[int], Lease] | None = None,
        min_end: datetime | None = None,
    ) -> Mapping | None:
        """A mapping of every node of `lease` over [start, end) (or, when not strict, over [start, E)
        with min_end <= E <= end), or None. `lease_of` resolves reservation lease ids, needed for
        preemption. `min_end` (capped at `end`): hosts that would hold their nodes for less are passed
        over, as a mapping that ends sooner is of no use to the caller."""
        floor = None if min_end is None or strict_end else max(start, min(min_end, end))
        only_hosts = self.allowed_hosts(lease, only_hosts)
        hosts = self.table.host_names if only_hosts is None else [h for h in self.table.hosts if h in only_hosts]
        if lease.request.uniform is not None:
            vnodes = list(range(lease.numnodes))   # (alike: the order below, without sorting)
        else:
            vnodes = sorted(range(lease.numnodes), key=lambda v: lease.request.nodes[v], reverse=True)
        mapping = None
        if not strict_end and lease.request.uniform is not None and self.host_selection.packs:
            # both placements below in one walk over the hosts
            mapping = self._place(_Ask(lease, vnodes, hosts, start, end, strict_end=False, strict_first=True,
                                        floor=floor))
        else:
            if not strict_end:
                # hosts that hold the lease to its end first: a placement cut short by a later reservation
                # costs a suspension and a resumption, and the greedy order alone does not see that
                mapping = self._place(_Ask(lease, vnodes, hosts, start, end, strict_end=True))
            if mapping is None:
                mapping = self._place(_Ask(lease, vnodes, hosts, start, end, strict_end, floor=floor))
        if mapping is not None or not allow_preemption or lease_of is None:
            return mapping
        return self._place_with_preemption(_Ask(lease, vnodes, hosts, start, end, strict_end), lease_of)

    def could_fit_at(self, lease: Lease, t: datetime, only_hosts: Collection[str] | None = None) -> bool:
        """A cheap necessary condition over all hosts (or `only_hosts`): enough room at the instant t. For
        a lease whose nodes are alike it is exact for that instant (how many nodes each host can take,
        added up: kept up to date by the host states, so this is a lookup); otherwise the site's free
        total must cover the lease's total."""
        if lease.request.placement is not None:   # (the site's free total says nothing of a few hosts)
            only_hosts = self.allowed_hosts(lease, only_hosts)
            return self._could_fit_on(lease, t, self.table.hosts if only_hosts is None else only_hosts)
        only_hosts = self.images.restrict(lease, only_hosts)
        node = lease.request.uniform
        if node is not None:
            return self.table.room_total(node, t, only_hosts) >= lease.numnodes
        _, used, cap, _, version = self.table.state_arrays(t)
        key = ("free", version)
        free = self._derived.get(key)
        if free is None:
            free = self._remember(key, (cap - used).sum(axis=0) + EPSILON)
        return bool(np.all(free >= np.array(lease.total_request)))

    def misfit(self, lease: Lease) -> str | None:
        """Why the hosts a lease's placement allows could never hold it, even empty (None: they could)."""
        placement = lease.request.placement
        if placement is None:
            return None
        table = self.table
        facts = self.filters.facts.properties if self.filters is not None else {}
        return refusal(placement, lease.request.nodes, {h: facts.get(h, {}) for h in table.hosts},
                       {h: table.capacity(h) for h in table.hosts})

    def _could_fit_on(self, lease: Lease, t: datetime, hosts: Collection[str]) -> bool:
        """`could_fit_at` on some hosts: each node needs room on some host, a spread lease one host each,
        an exclusive one an empty host each."""
        if not hosts:
            return False
        names, used, cap, _, _ = self.table.state_arrays(t)
        rows = [self.table.row(h) for h in hosts]
        placement = lease.request.placement
        if placement is not None and placement.exclusive:
            return int((used[rows] <= EPSILON).all(axis=1).sum()) >= lease.numnodes
        free = (cap[rows] - used[rows]).sum(axis=0) + EPSILON
        if not bool(np.all(free >= np.array(lease.total_request))):
            return False
        if placement is not None and placement.spread:
            return int(fits_rows(used[rows], _least(lease), cap[rows]).sum()) >= lease.numnodes
        return True

    def site_full(self, t: datetime) -> bool:
        """No CPU free on any host at t."""
        return self.table.states_at(t).site_full()

    # The same states (`SlotTable.state_arrays`: one version each) are asked about again and again: by
    # the filter and the score of the mapping at one time, twice when a strict placement is tried first.
    # What depends only on the states is worked out once per version.
    def _remember(self, key: tuple, value: _T) -> _T:
        derived = self._derived
        if len(derived) > 512:
            derived.clear()
        derived[key] = value
        return value

    # -- filter, score, reserve ---------------------------------------------------------------------------
    def _place(self, ask: _Ask) -> Mapping | None:
        """Read the hosts at the start, filter and score them, then reserve nodes on them in that order:
        host by host for alike nodes on a packing policy, else node by node."""
        placement = ask.lease.request.placement
        if placement is not None and (placement.affinity is not None or placement.exclusive):
            return self._place_by_affinity(ask, placement.spread, placement.exclusive)
        alike = ask.lease.request.uniform
        packing = alike if alike is not None and self.host_selection.packs else None
        hosts = self._hosts_at_start(ask, packing)
        ranked = self._rank(hosts, ask.hosts, alike if alike is not None else _smallest(ask))
        if not ranked:
            return None
        steady = self._steady(ask)
        if packing is not None:
            return _AlikePacking(self.table, ask, packing, steady).place(ranked, hosts)
        return _NodeByNode(self.table, ask, hosts, steady).place(ranked, self.host_selection.packs)

    def _place_by_affinity(self, ask: _Ask, spread: bool, exclusive: bool) -> Mapping | None:
        """A lease that says how its VMs share hosts: spread, one node per host in the policy's order
        (exclusive: each an empty host, held whole); pack, the hosts with the most room first, each filled
        before the next (as few hosts as it takes)."""
        hosts = self._hosts_at_start(ask, None)
        everywhere = len(ask.hosts) == len(hosts.names)
        candidates = self._filter(hosts, None if everywhere else ask.hosts, _smallest(ask))
        if exclusive and candidates.size:
            assert hosts.used is not None
            candidates = candidates[(hosts.used[candidates] <= EPSILON).all(axis=1)]
        if not candidates.size:
            return None
        if spread:
            if candidates.size < len(ask.vnodes):
                return None
            return _NodeByNode(self.table, ask, hosts, self._steady(ask), once=True, whole=exclusive).place(
                self._score(hosts, candidates), packs=False)
        assert hosts.used is not None
        free = hosts.cap[candidates] - hosts.used[candidates]
        ranked = candidates[np.lexsort((-free[:, 1], -free[:, 0]))].tolist()   # (stable: ties keep the site's order)
        return _NodeByNode(self.table, ask, hosts, self._steady(ask)).place(ranked, packs=True)

    def _hosts_at_start(self, ask: _Ask, packing: Resources | None) -> _HostsAtStart:
        """Every host's usage at the start, as if the excluded reservations were gone. For alike nodes on a
        packing policy (`packing`: the node) also how many nodes each host has room for: that says which
        hosts are candidates, and then only their usage is read, for the ranking."""
        table = self.table
        if packing is not None and not ask.excluding:
            states = table.states_at(ask.start)   # valid incrementally: no per-host bisect
            counts = states.room(packing)
            # (with every host allowed, every host with room is ranked: their room adds up to the total)
            potential = counts.total if len(ask.hosts) == len(states.names) else None
            # (arguments by position: once per placement, on the simulator's hot path)
            return _HostsAtStart(states.names, states.capacity, (id(states), states.version),
                                 None, None, states.gather,   # (usage and counts: read through `gather`)
                                 counts.array, counts.per_row, potential, states.alike)
        names, used, cap, count, version = table.state_arrays(ask.start)
        if not ask.excluding:
            return _HostsAtStart(names, cap, version, used, count)
        # only the rows of the hosts the excluded reservations hold change
        used, count = used.copy(), count.copy()
        for r in table.members(ask.excluding):
            if r.start <= ask.start < r.end:
                for host, amount in r.resources.items():
                    row = table.row(host)
                    used[row] -= amount
                    count[row] -= 1
        room = room_of(packing, used, cap) if packing is not None else None
        return _HostsAtStart(names, cap, None, used, count, room=room)   # (None: not the states' version)

    def _rank(self, hosts: _HostsAtStart, allowed: Sequence[str], smallest: Resources) -> list[int]:
        """Filter, then score: the rows of the candidate hosts, best first. Remembered per version of the
        states when every host may be used."""
        everywhere = len(allowed) == len(hosts.names)
        key = ("rank", smallest, hosts.version)
        if everywhere and hosts.version is not None:
            ranked = cast("list[int] | None", self._derived.get(key))
            if ranked is None:
                ranked = self._remember(key, self._score(hosts, self._filter(hosts, None, smallest)))
            return ranked
        return self._score(hosts, self._filter(hosts, None if everywhere else allowed, smallest))

    def _filter(self, hosts: _HostsAtStart, allowed: Sequence[str] | None, smallest: Resources) -> np.ndarray:
        """The rows of the hosts (of `allowed` ones, None: all) where the smallest node fits at the start
        (`room`: where at least one fits, for alike nodes on a packing policy)."""
        if hosts.room is not None:
            fitting = hosts.room >= 1
        else:
            assert hosts.used is not None   # (read through `gather` only with `room`)
            fitting = fits_rows(hosts.used, smallest, hosts.cap)
        if allowed is not None:
            permitted = np.zeros(len(hosts.names), dtype=bool)
            permitted[[self.table.row(h) for h in allowed]] = True
            fitting &= permitted
        return fitting.nonzero()[0]   # (flatnonzero: the same, with a Python-level wrapper)

    def _score(self, hosts: _HostsAtStart, candidates: np.ndarray) -> list[int]:
        """The candidate rows, best first for the host-selection policy."""
        if not candidates.size:
            return []
        if hosts.gather is not None:
            # candidates alike: every key ties and the sort is stable, so they keep the site's order (the
            # first two asked first: on a big site they usually differ, and listing every candidate for
            # nothing would cost what the skip saves)
            if hosts.alike is not None and hosts.alike(candidates[:2].tolist()):
                rows = candidates.tolist()
                if hosts.alike(rows):
                    return rows
            used, count = hosts.gather(candidates)
        else:
            assert hosts.used is not None and hosts.counts is not None
            used, count = hosts.used[candidates], hosts.counts[candidates]
        return candidates[self.host_selection.rank_indices(used, hosts.cap[candidates], count)].tolist()

    def _steady(self, ask: _Ask) -> np.ndarray | None:
        """Per row, the key of the host's first change after the start: a host whose usage does not change
        before the end needs no walk along its timeline (what fits at the start fits throughout). None
        when that does not tell: with exclusions (the states do not know them), or for an empty interval
        that may end early."""
        if ask.excluding or (ask.end <= ask.start and not ask.strict_end):
            return None
        return self.table.unchanged_until(ask.start)

    # -- preemption -------------------------------------------------------------------------------------
    def _place_with_preemption(self, ask: _Ask, lease_of: Callable[[int], Lease]) -> Mapping | None:
        """Add victims, the most preemptable first, until the lease fits as if theirs were gone."""
        table = self.table
        lease, start = ask.lease, ask.start
        scored: dict[int, tuple[float, Lease]] = {}
        refused = {lease.id}   # (leases that may not give way: asked once, not once per reservation)
        for rr in table.reservations_overlapping(start, ask.end, set(ask.hosts)):
            lease_id = rr.lease_id
            if lease_id in scored or lease_id in refused or rr.kind is ReservationKind.UNAVAILABLE:
                continue
            other = lease_of(lease_id)
            score = self.preemption.score(lease, other, start)
            if score is None:
                refused.add(lease_id)
            else:
                scored[lease_id] = (score, other)
        # most preemptable first (the reference sorted one way and popped from the other end)
        candidates = [other for _, other in sorted(scored.values(), key=lambda so: (-so[0], so[1].id))]
        victims: list[Lease] = []
        held_by: dict[int, list[Reservation]] = {}
        bound = self._bound(ask)
        for victim in candidates:
            victims.append(victim)
            held_by[victim.id] = [r for r in table.reservations_of(victim.id) if r.end > start]
            if bound is not None:
                bound.exclude(held_by[victim.id])
                if not bound.could_hold():   # (no placement could fit yet: not worth trying)
                    continue
            mapping = self._place(ask._replace(excluding=[r for v in victims for r in held_by[v.id]]))
            if mapping is not None:
                return self._drop_unneeded(ask, victims, held_by, mapping, bound)
        return None

    def _bound(self, ask: _Ask) -> PreemptionBound | None:
        """The bound that rules out victim sets too small to hold the lease (`preemption_bound`), for a
        placement that must hold to its end (the one preemption makes)."""
        if not ask.strict_end or ask.end <= ask.start:
            return None
        placement = ask.lease.request.placement
        return PreemptionBound(self.table, ask.hosts, ask.start, ask.end,
                               tuple(ask.lease.request.nodes[v] for v in ask.vnodes),
                               spread=placement is not None and placement.spread,
                               exclusive=placement is not None and placement.exclusive)

    def _drop_unneeded(self, ask: _Ask, victims: list[Lease], held_by: dict[int, list[Reservation]],
                       mapping: Mapping, bound: PreemptionBound | None = None) -> Mapping:
        """Give back victims the mapping does not need, least preemptable (last added) first (a victim
        the bound says cannot be given back is kept without trying)."""
        used_hosts = set(mapping.nodes.values())
        needed = [v for v in victims if any(h in used_hosts for r in held_by[v.id] for h in r.resources)]
        if bound is not None:
            kept = {v.id for v in needed}
            for v in victims:
                if v.id not in kept:
                    bound.restore(held_by[v.id])
        for victim in reversed(list(needed)):
            trial = [v for v in needed if v is not victim]
            if bound is not None:
                bound.restore(held_by[victim.id])
                if not bound.could_hold():
                    bound.exclude(held_by[victim.id])
                    continue
            alternative = self._place(ask._replace(excluding=[r for v in trial for r in held_by[v.id]]))
            if alternative is not None:
                needed, mapping = trial, alternative
            elif bound is not None:
                bound.exclude(held_by[victim.id])
        mapping.victims = needed
        return mapping


def _least(lease: Lease) -> Resources:
    """Per resource, the least any node of the lease asks."""
    requests = lease.request.nodes
    return Resources(*(min(n[i] for n in requests) for i in range(len(NOTHING))))


def _smallest(ask: _Ask) -> Resources:
    """Per resource, the least any node asks: a host where even that does not fit can hold no node (the
    node with the least memory is not enough: it may need more CPU than another node)."""
    requests = ask.lease.request.nodes
    return Resources(*(min(requests[v][i] for v in ask.vnodes) for i in range(len(NOTHING))))


class _NodeByNode:
    """The reserve stage, one node at a time: each host in ranked order takes the first remaining node
    that fits (largest first), over the interval or, when the mapping may end early, from the start for
    as long as it fits. A packing policy fills a host before the next; a spreading one gives each host
    one node per round."""

    __slots__ = ("table", "start", "end", "strict_end", "excluding", "floor", "requests", "alike", "names",
                 "used", "cap", "steady", "end_key", "at_start", "remaining", "nodes", "held", "until", "once",
                 "whole")

    def __init__(self, table: SlotTable, ask: _Ask, hosts: _HostsAtStart, steady: np.ndarray | None,
                 once: bool = False, whole: bool = False):
        """`once`: spreading gives each host one node and no more (a spread lease: one VM per host);
        `whole`: each host is held whole (an exclusive lease), whatever its node asks."""
        self.table = table
        self.once = once
        self.whole = whole
        self.start, self.end, self.strict_end, self.excluding = ask.start, ask.end, ask.strict_end, ask.excluding
        self.floor = ask.start if ask.floor is None else ask.floor
        self.requests = ask.lease.request.nodes
        self.alike = ask.lease.request.uniform is not None
        assert hosts.used is not None   # (node by node: the usage arrays are read whole)
        self.names, self.used, self.cap = hosts.names, hosts.used, hosts.cap
        self.steady, self.end_key = steady, time_key(ask.end)
        self.at_start: dict[int, tuple[Resources, Resources]] = {}   # row -> (usage, capacity), as read
        self.remaining = list(ask.vnodes)
        self.nodes: dict[int, str] = {}        # vnode -> host
        self.held: dict[str, Resources] = {}   # host -> what its nodes add up to
        self.until: dict[str, datetime] = {}   # host -> until when they fit there

    def place(self, ranked: list[int], packs: bool) -> Mapping | None:
        """Every node on the ranked hosts, packing them (`packs`) or spreading them, or None."""
        if packs:
            self._pack(ranked)
        else:
            self._spread(ranked)
        if self.remaining:
            return None
        return Mapping(nodes=self.nodes, end=min(self.until[h] for h in self.held),
                       held=dict(self.held) if self.whole else None)

    def _pack(self, ranked: list[int]) -> None:
        names, remaining = self.names, self.remaining
        for row in ranked:
            host = names[row]
            while remaining and self._take_one(host, row):
                pass
            if not remaining:
                return

    def _spread(self, ranked: list[int]) -> None:
        names, remaining = self.names, self.remaining
        active = [(names[row], row) for row in ranked]
        while remaining and active:
            still = []
            for host, row in active:
                if not remaining:
                    break
                if self._take_one(host, row):
                    still.append((host, row))
            active = [] if self.once else still

    def _take_one(self, host: str, row: int) -> bool:
        """Put the first remaining node that fits on the host; False if none does."""
        remaining = self.remaining
        if self.alike:   # all nodes alike: the first one stands for any
            if self._try(host, row, remaining[0]):
                del remaining[0]
                return True
            return False
        # first fit, largest node first: a node that does not fit must not stop a smaller one
        requests = self.requests
        failed: set[Resources] = set()   # identical nodes need not be tried twice
        for i, vnode in enumerate(remaining):
            if requests[vnode] in failed:
                continue
            if self._try(host, row, vnode):
                del remaining[i]
                return True
            failed.add(requests[vnode])
        return False

    def _try(self, host: str, row: int, vnode: int) -> bool:
        """Add the node to the host if it fits there with the nodes the host has taken already."""
        before = self.held.get(host)
        request = self.requests[vnode]
        if self.whole:   # (the node must fit, and the host is held whole: empty over the interval)
            if not fits(NOTHING, request, self._at_start(row)[1]):
                return False
            request = self._at_start(row)[1]
        trial = request if before is None else add(before, request)
        # not even at the start: no need to walk the timeline (the filter stage already checked the
        # smallest node, which for alike nodes is any first one on the host)
        if before is not None or not self.alike:
            used_now, cap_now = self._at_start(row)
            if not fits(used_now, trial, cap_now):
                return False
        steady = self.steady
        if steady is not None and steady[row] >= self.end_key:
            self.until[host] = self.end
        elif self.strict_end:
            if not self.table.fits(host, trial, self.start, self.end, self.excluding):
                return False
            self.until[host] = self.end
        else:
            fit_end = self.table.latest_fit(host, trial, self.start, self.end, self.excluding)
            if fit_end is None or fit_end <= self.start or fit_end < self.floor:
                return False
            self.until[host] = fit_end
        self.held[host] = trial
        self.nodes[vnode] = host
        return True

    def _at_start(self, row: int) -> tuple[Resources, Resources]:
        """The host's usage and capacity at the start, read from the arrays once."""
        pair = self.at_start.get(row)
        if pair is None:
            pair = self.at_start[row] = (Resources(*self.used[row].tolist()), Resources(*self.cap[row].tolist()))
        return pair


class _AlikePacking:
    """The reserve stage for nodes all alike on a packing policy: how many nodes a host takes is worked
    out once per host (the most that fit at the start, from the host states' counts, then checked along
    its timeline) instead of one trial per node; the answer is the one node-by-node packing gives, since
    fitting is monotone in the number of nodes.

    Two packings can be built in one walk over the hosts, sharing the timeline walks: one that holds to
    the end (`held`: built when the ask is strict, or prefers it: `strict_first`) and one that may end
    early (`early`: built when the ask is not strict). The held one is the answer if it places every
    node, else the early one. Either is a list of hosts, node i on the i-th. The walk itself, host by
    host, is the table's core's (`alike_walk`, compiled); the steps it takes rarely are the methods below."""

    __slots__ = ("table", "timelines", "row_timelines", "ask", "node", "steady", "start_key", "end_key")

    def __init__(self, table: SlotTable, ask: _Ask, node: Resources, steady: np.ndarray | None):
        self.table = table
        self.timelines = table.timelines   # (the walk scans host after host: by name, and by row)
        self.row_timelines = table.timeline_rows
        self.ask = ask
        self.node = node
        self.steady = steady
        self.start_key = time_key(ask.start)
        self.end_key = time_key(ask.end)

    def place(self, ranked: list[int], hosts: _HostsAtStart) -> Mapping | None:
        """Every node on the ranked hosts (the steady head first, then the walk), or None."""
        n = len(self.ask.vnodes)
        # nodes the hosts not walked yet could take at the start
        assert hosts.room is not None   # (alike nodes on a packing policy: the room per host is known)
        potential = int(hosts.room[ranked].sum()) if hosts.potential is None else hosts.potential
        held: list[str] = []
        if hosts.per_row is not None and self.steady is not None and potential >= n:
            taken = self._take_steady_head(ranked, hosts.names, hosts.per_row, self.steady, held)
            if len(held) == n:
                return self._mapping(held, self.ask.end)
            potential -= len(held)
            if taken:
                ranked = ranked[taken:]
        return self.table.core.alike_walk(self, ranked, hosts, potential, held)

    def _take_steady_head(self, ranked: list[int], names: list[str], per_row: list[int], steady: np.ndarray,
                          held: list[str]) -> int:
        """The hosts at the head of the ranking whose usage stays until the end each take all they have
        room for (added to `held`), with no walk along their timelines, so they are read from plain lists.
        Often they hold the whole lease; otherwise the walk goes on from the first other host, as if it
        had taken these itself in both packings (with room for the lease on the ranked hosts, its strict
        packing is not given up on such hosts). Returns how many hosts were taken."""
        return self.table.core.steady_head(ranked, names, per_row, steady, self.end_key, len(self.ask.vnodes), held)

    def _latest_fit(self, host: str, request: Resources) -> datetime | None:
        """`SlotTable.latest_fit` over the ask's interval; with nothing excluded, a scan of the host's
        timeline straight away (the walk asks this of host after host)."""
        ask = self.ask
        if ask.excluding:
            return self.table.latest_fit(host, request, ask.start, ask.end, ask.excluding)
        stop = self.timelines[host].scan(self.start_key, self.end_key, request)
        if stop is None:
            return ask.end
        return None if stop is AT_START else cast(datetime, stop)

    def _most_that_fit(self, host: str, most: int) -> int:
        """The most copies of the node (up to `most`) that fit on the host over [start, end)."""
        node, ask = self.node, self.ask
        start, end, excluding = ask.start, ask.end, ask.excluding
        fits_over = self.table.fits
        if fits_over(host, scale(node, most), start, end, excluding):
            return most
        lo, hi = 0, most - 1        # fits(lo) holds (0 always), the answer is at most hi
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits_over(host, scale(node, mid), start, end, excluding):
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _mapping(self, hosts: list[str], end: datetime) -> Mapping:
        return Mapping(nodes=dict(zip(self.ask.vnodes, hosts)), end=end)
