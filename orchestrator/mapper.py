"""The mapper: places a lease's virtual nodes on hosts for [start, end), preempting if it must.

Stages, as in the Kubernetes scheduler framework: *filter* (hosts where the smallest node fits at the
start), *score* (the host-selection policy orders them), *reserve* (nodes assigned greedily in that
order, packing or spreading per the policy). *Bind* is the scheduler's job: it turns the mapping into
reservations. With `strict_end` off the mapping may end early (the latest end that fits on every host
used), for leases that will be suspended; hosts that would hold their nodes for less than the caller's
`min_end` are passed over, so a placement cut too short to be worth running is not built while one that
lasts longer exists. With preemption allowed, victim leases are added one at a time, the most
preemptable first, until the lease fits; victims that turned out not to be needed are dropped again.

Leases whose nodes are all alike (a 64-node job) on a packing policy are placed per host rather than per
node: how many nodes a host takes comes from the host states' counts per node size, and only hosts
whose usage changes before the end are walked along their timelines; a placement that may end early
and the strict one it prefers are built in the same walk. The answer is the node-by-node greedy one
(tests/test_mapper_alike.py holds the two side by side).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from .hoststates import room_of
from .lease import Lease
from .policies import HostSelectionPolicy, PreemptionPolicy
from .reservations import Reservation, ReservationKind
from .resources import NOTHING, Resources, add, fits, scale
from .slottable import SlotTable, time_key


@dataclass
class Mapping:
    """Where each virtual node goes, until when the placement holds, and which leases must give way."""

    nodes: dict[int, str]
    end: datetime
    victims: list[Lease] = field(default_factory=list)

    def per_host(self, lease: Lease) -> dict[str, Resources]:
        """Total resources held on each host by this mapping."""
        alike = lease.request.uniform
        if alike is not None:   # (count the nodes per host, then one product each)
            counts: dict[str, int] = {}
            for host in self.nodes.values():
                counts[host] = counts.get(host, 0) + 1
            return {host: alike if k == 1 else scale(alike, k) for host, k in counts.items()}
        held: dict[str, Resources] = {}
        for vnode, host in self.nodes.items():
            held[host] = add(held.get(host, NOTHING), lease.request.nodes[vnode])
        return held


def _walk(ranked: list[int], room: np.ndarray, steady: np.ndarray | None, end_key: int):
    """(row, nodes that fit at the start, no change on the host before end_key) along the ranking, a
    slice at a time: a lease usually needs only the first few hosts of a long ranking."""
    i, size = 0, 128
    while i < len(ranked):
        rows = ranked[i:i + size]
        fits = room[rows].astype(int).tolist()
        quiet = (steady[rows] >= end_key).tolist() if steady is not None else [False] * len(rows)
        yield from zip(rows, fits, quiet)
        i += size
        size = 1024


class Mapper:
    def __init__(self, table: SlotTable, host_selection: HostSelectionPolicy, preemption: PreemptionPolicy):
        self.table = table
        self.host_selection = host_selection
        self.preemption = preemption
        self._derived: dict[tuple, object] = {}

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
        floor = start if min_end is None or strict_end else max(start, min(min_end, end))
        hosts = self.table.hosts if only_hosts is None else [h for h in self.table.hosts if h in only_hosts]
        if lease.request.uniform is not None:
            vnodes = list(range(lease.numnodes))   # (alike: the order below, without sorting)
        else:
            vnodes = sorted(range(lease.numnodes), key=lambda v: lease.request.nodes[v], reverse=True)
        mapping = None
        if not strict_end and lease.request.uniform is not None and self.host_selection.packs:
            # both placements below in one walk over the hosts
            mapping = self._place(lease, vnodes, hosts, start, end, False, (), strict_first=True, floor=floor)
        else:
            if not strict_end:
                # hosts that hold the lease to its end first: a placement cut short by a later reservation
                # costs a suspension and a resumption, and the greedy order alone does not see that
                mapping = self._place(lease, vnodes, hosts, start, end, True, ())
            if mapping is None:
                mapping = self._place(lease, vnodes, hosts, start, end, strict_end, (), floor=floor)
        if mapping is not None or not allow_preemption or lease_of is None:
            return mapping
        return self._place_with_preemption(lease, vnodes, hosts, start, end, strict_end, lease_of)

    def could_fit_at(self, lease: Lease, t: datetime, only_hosts: Collection[str] | None = None) -> bool:
        """A cheap necessary condition over all hosts (or `only_hosts`): enough room at the instant t. For
        a lease whose nodes are alike it is exact for that instant (how many nodes each host can take,
        added up: kept up to date by the host states, so this is a lookup); otherwise the site's free
        total must cover the lease's total."""
        node = lease.request.uniform
        if node is not None:
            return self.table.room_total(node, t, only_hosts) >= lease.numnodes
        _, used, cap, _, version = self.table.state_arrays(t)
        key = ("free", version)
        free = self._derived.get(key)
        if free is None:
            free = self._remember(key, (cap - used).sum(axis=0) + 1e-9)
        return bool(np.all(free >= np.array(lease.total_request)))

    def site_full(self, t: datetime) -> bool:
        """No CPU free on any host at t."""
        return self.table.states_at(t).site_full()

    # The same states (`SlotTable.state_arrays`: one version each) are asked about again and again: by
    # the filter and the score of the mapping at one time, twice when a strict placement is tried first.
    # What depends only on the states is worked out once per version.
    def _remember(self, key: tuple, value):
        derived = self._derived
        if len(derived) > 512:
            derived.clear()
        derived[key] = value
        return value

    # -- filter, score, reserve ---------------------------------------------------------------------------
    def _place(self, lease: Lease, vnodes: list[int], hosts: list[str], start: datetime, end: datetime,
               strict_end: bool, excluding: Collection[Reservation], strict_first: bool = False,
               floor: datetime | None = None) -> Mapping | None:
        """Filter, score and reserve. Not strict: each host holds its nodes past `start` and at least
        until `floor`."""
        table = self.table
        requests = lease.request.nodes
        alike = lease.request.uniform
        # per resource, the least any node asks: a host where even that does not fit can hold no node
        # (the node with the least memory is not enough: it may need more CPU than another node)
        smallest = alike if alike is not None else Resources(
            *(min(requests[v][i] for v in vnodes) for i in range(len(NOTHING))))
        packing_alike = alike is not None and self.host_selection.packs
        gather = room = per_row = potential = None
        if packing_alike and not excluding:
            # the room per host says which hosts are candidates; only their usage is read, for the ranking
            states = table.states_at(start)   # valid incrementally: no per-host bisect
            names, cap, version, gather = states.names, states.capacity, (id(states), states.version), states.gather
            used = count = None
            counts = states.room(alike)
            room, per_row = counts.array, counts.per_row
            if len(hosts) == len(names):
                potential = counts.total   # (every host with room is ranked)
        else:
            names, used, cap, count, version = table.state_arrays(start)
        if excluding:
            version = None   # (not the states the version names)
            # as if the excluded reservations were gone: only the rows of the hosts they hold change
            used, count = used.copy(), count.copy()
            for r in table.members(excluding):
                if r.start <= start < r.end:
                    for host, amount in r.resources.items():
                        row = table.row(host)
                        used[row] -= amount
                        count[row] -= 1
            if packing_alike:
                room = room_of(alike, used, cap)
        ranked = self._rank(table, names, used, cap, count, hosts, smallest, version, room, gather)
        if not ranked:
            return None
        # hosts whose usage does not change before `end` need no walk along their timeline: what fits
        # at the start fits throughout (with exclusions the arrays do not tell, so not then)
        steady = None if excluding or (end <= start and not strict_end) else table.unchanged_until(start)
        end_key = time_key(end)
        if packing_alike:
            return self._pack_alike(vnodes, alike, ranked, room, names, steady, start, end, strict_end, excluding,
                                    strict_first, potential, per_row, floor)
        rows: dict[str, int] = {}

        def ranked_hosts():
            # lazily: a lease usually needs only the first few hosts of a long ranking
            for i in ranked:
                host = names[i]
                rows[host] = i
                yield host

        ordered = ranked_hosts()
        at_start: dict[str, tuple[Resources, Resources]] = {}

        def instant(host: str) -> tuple[Resources, Resources]:
            pair = at_start.get(host)
            if pair is None:
                i = rows[host]
                pair = at_start[host] = (Resources(*used[i].tolist()), Resources(*cap[i].tolist()))
            return pair

        remaining = list(vnodes)
        nodes: dict[int, str] = {}
        held: dict[str, Resources] = {}
        until: dict[str, datetime] = {}

        uniform = lease.request.uniform is not None

        def try_add(host: str, vnode: int) -> bool:
            before = held.get(host)
            trial = requests[vnode] if before is None else add(before, requests[vnode])
            # not even at the start: no need to walk the timeline (the filter stage already checked
            # the smallest node, which for alike nodes is any first one on the host)
            if before is not None or not uniform:
                used_now, cap_now = instant(host)
                if not fits(used_now, trial, cap_now):
                    return False
            if steady is not None and steady[rows[host]] >= end_key:
                until[host] = end
            elif strict_end:
                if not table.fits(host, trial, start, end, excluding):
                    return False
                until[host] = end
            else:
                fit_end = table.latest_fit(host, trial, start, end, excluding)
                if fit_end is None or fit_end <= start or (floor is not None and fit_end < floor):
                    return False
                until[host] = fit_end
            held[host] = trial
            nodes[vnode] = host
            return True

        def take_first_fitting(host: str) -> bool:
            if uniform:   # all nodes alike: the first one stands for any
                if try_add(host, remaining[0]):
                    del remaining[0]
                    return True
                return False
            # first fit, largest node first: a node that does not fit must not stop a smaller one
            failed: set[Resources] = set()   # identical nodes need not be tried twice
            for i, vnode in enumerate(remaining):
                if requests[vnode] in failed:
                    continue
                if try_add(host, vnode):
                    del remaining[i]
                    return True
                failed.add(requests[vnode])
            return False

        if self.host_selection.packs:
            for host in ordered:
                while remaining and take_first_fitting(host):
                    pass
                if not remaining:
                    break
        else:
            active = list(ordered)
            while remaining and active:
                still = []
                for host in active:
                    if not remaining:
                        break
                    if take_first_fitting(host):
                        still.append(host)
                active = still
        if remaining:
            return None
        return Mapping(nodes=nodes, end=min(until[h] for h in held))

    def _pack_alike(self, vnodes: list[int], node: Resources, ranked: list[int], room: np.ndarray,
                    names: list[str], steady: np.ndarray | None, start: datetime, end: datetime,
                    strict_end: bool, excluding: Collection[Reservation], strict_first: bool = False,
                    potential: int | None = None, per_row: list[int] | None = None,
                    floor: datetime | None = None) -> Mapping | None:
        """`_place` for nodes all alike on a packing policy: how many a host takes is worked out once per
        host (the most that fit at the start instant, then checked along its timeline) instead of one
        trial per node; the answer is the one node-by-node packing gives, since fitting is monotone in
        the number of nodes. With `strict_first` (a placement that may end early, but one that holds to
        the end is preferred) both packings are built in one walk over the hosts, sharing the timeline
        walks: the strict one if it places every node, else the other (each host holding its nodes at
        least until `floor`)."""
        table = self.table
        floor = start if floor is None else floor

        def too_soon(fit_end: datetime | None) -> bool:
            return fit_end is None or fit_end <= start or fit_end < floor

        start_key, end_key = None, time_key(end)
        n = len(vnodes)
        strict = strict_end or strict_first
        loose = not strict_end
        held: list[str] = []               # the packing that holds to the end: node i on held[i]
        held_count = 0
        early: list[str] = []              # the one that may end early
        early_count = 0
        early_end: datetime | None = None
        # nodes the hosts not walked yet could take at the start
        potential = int(room[ranked].sum()) if potential is None else potential
        # First the hosts at the head of the ranking whose usage stays until the end (`steady`): each
        # takes all it has room for in both packings, with no walk along its timeline, so they are read
        # from plain lists. Often they hold the whole lease; otherwise the walk below goes on from the
        # first other host, as if it had taken these itself (with room for the lease on the ranked
        # hosts, its strict packing is not given up on such hosts).
        p = 0
        if per_row is not None and steady is not None and potential >= n:
            got = 0
            for row in ranked:
                if steady[row] < end_key:
                    break
                k = per_row[row]
                if k >= n - got:
                    held += [names[row]] * (n - got)
                    return Mapping(nodes=dict(zip(vnodes, held)), end=end)
                held += [names[row]] * k
                got += k
                p += 1
            potential -= got
            if got:
                early, early_count, held_count, early_end = list(held), got, got, end
        # (the filter stage kept hosts with room for one node at least)
        for row, k, steady_row in _walk(ranked[p:] if p else ranked, room, steady, end_key):
            host = names[row]
            potential -= k
            loose_take = None
            if loose and early_count < n:
                take = min(k, n - early_count)
                if steady_row:
                    fit_end = end
                else:
                    fit_end = table.latest_fit(host, node if take == 1 else scale(node, take), start, end, excluding)
                    while too_soon(fit_end) and take > 1:
                        take -= 1
                        fit_end = table.latest_fit(host, scale(node, take), start, end, excluding)
                    if too_soon(fit_end):
                        take = 0
                loose_take = take
                if take:
                    early += [host] * take
                    early_count += take
                    if early_end is None or fit_end < early_end:
                        early_end = fit_end
            if strict:
                take = min(k, n - held_count)
                if steady_row:
                    pass
                elif loose_take == 0:      # not even one node fits until the floor (<= end)
                    take = 0
                elif loose_take == take:   # the walk above says whether it holds to the end
                    if fit_end < end:
                        take = 0 if take == 1 else self._most_that_fit(host, node, take - 1, start, end, excluding)
                elif not excluding and take == 1:
                    if start_key is None:
                        start_key = time_key(start)
                    take = 1 if table.timeline(host).scan(start_key, end_key, node) is None else 0
                else:
                    take = self._most_that_fit(host, node, take, start, end, excluding)
                if take:
                    held += [host] * take
                    held_count += take
                    if held_count == n:
                        return Mapping(nodes=dict(zip(vnodes, held)), end=end)
                if held_count + potential < n:   # the rest of the hosts cannot make up the difference
                    if not loose:
                        return None
                    strict = False
            if loose and early_count == n and not strict:
                break
        if loose and early_count == n:
            return Mapping(nodes=dict(zip(vnodes, early)), end=early_end)
        return None

    def _most_that_fit(self, host: str, node: Resources, most: int, start: datetime, end: datetime,
                       excluding: Collection[Reservation]) -> int:
        """The most copies of `node` (up to `most`) that fit on the host over [start, end)."""
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

    def _rank(self, table: SlotTable, names, used, cap, count, hosts: list[str], smallest: Resources,
              version=None, room: np.ndarray | None = None, gather=None) -> list[int]:
        """Filter and score: the rows of the hosts where the smallest node fits at the start (`room`: where
        at least one fits, for alike nodes), best first for the host-selection policy. Remembered per
        version of the states when every host may be used. `gather(rows)`: the usage and counts of
        those rows, when `used` and `count` are not given."""
        everywhere = len(hosts) == len(names)
        key = ("rank", smallest, version)
        if everywhere and version is not None:
            ranked = self._derived.get(key)
            if ranked is not None:
                return ranked
        fitting = room >= 1 if room is not None else np.all(used + np.array(smallest) <= cap + 1e-9, axis=1)
        if not everywhere:
            allowed = np.zeros(len(names), dtype=bool)
            allowed[[table.row(h) for h in hosts]] = True
            fitting &= allowed
        candidates = fitting.nonzero()[0]   # (flatnonzero: the same, with a Python-level wrapper)
        if not candidates.size:
            ranked = []
        else:
            used_c, count_c = gather(candidates) if gather is not None else (used[candidates], count[candidates])
            ranked = candidates[self.host_selection.rank_indices(used_c, cap[candidates], count_c)].tolist()
        if everywhere and version is not None:
            self._remember(key, ranked)
        return ranked

    # -- preemption -------------------------------------------------------------------------------------
    def _place_with_preemption(self, lease: Lease, vnodes: list[int], hosts: list[str], start: datetime,
                               end: datetime, strict_end: bool, lease_of: Callable[[int], Lease]) -> Mapping | None:
        table = self.table
        host_set = set(hosts)
        scored: dict[int, tuple[float, Lease]] = {}
        for rr in table.reservations_overlapping(start, end, host_set):
            if rr.lease_id in scored or rr.lease_id == lease.id or rr.kind is ReservationKind.UNAVAILABLE:
                continue
            other = lease_of(rr.lease_id)
            score = self.preemption.score(lease, other, start)
            if score is not None:
                scored[rr.lease_id] = (score, other)
        # most preemptable first (the reference sorted one way and popped from the other end)
        candidates = [other for _, other in sorted(scored.values(), key=lambda so: (-so[0], so[1].id))]
        victims: list[Lease] = []
        held_by: dict[int, list[Reservation]] = {}
        for victim in candidates:
            victims.append(victim)
            held_by[victim.id] = [r for r in table.reservations_of(victim.id) if r.end > start]
            excluding = [r for v in victims for r in held_by[v.id]]
            mapping = self._place(lease, vnodes, hosts, start, end, strict_end, excluding)
            if mapping is not None:
                return self._drop_unneeded(lease, vnodes, hosts, start, end, strict_end, victims, held_by, mapping)
        return None

    def _drop_unneeded(self, lease, vnodes, hosts, start, end, strict_end, victims, held_by, mapping) -> Mapping:
        """Give back victims the mapping does not need, least preemptable (last added) first."""
        used_hosts = set(mapping.nodes.values())
        needed = [v for v in victims if any(h in used_hosts for r in held_by[v.id] for h in r.resources)]
        for victim in reversed(list(needed)):
            trial = [v for v in needed if v is not victim]
            excluding = [r for v in trial for r in held_by[v.id]]
            alternative = self._place(lease, vnodes, hosts, start, end, strict_end, excluding)
            if alternative is not None:
                needed, mapping = trial, alternative
        mapping.victims = needed
        return mapping

