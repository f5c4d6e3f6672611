"""Stateful property test of the slot table against a brute-force oracle.

Random sequences of add / remove / update, where an add (or update) is only performed when `fits` says it
fits; after every step no host is over capacity, and every answer of usage_at, fits, latest_fit and
changepoints_after (with and without `excluding`) equals what a brute-force computation over the raw list
of reservations gives. Times are small integers of minutes from a fixed aware UTC epoch, and there are
1-3 hosts, so shrunk counter-examples stay readable.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from orchestrator.model.reservations import Reservation, ReservationKind
from orchestrator.model.resources import Resources
from orchestrator.model.timeutil import UTC
from orchestrator.planning.slottable import shared_usage
from orchestrator.planning.slottable.table import FOREVER, SlotTable, time_key
from tests.reference import CORES

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
HOSTS = ("h0", "h1", "h2")


def T(minute: int) -> datetime:
    return EPOCH + timedelta(minutes=minute)


minutes = st.integers(min_value=0, max_value=40)
lengths = st.integers(min_value=0, max_value=15)          # 0: zero-length reservations too
query_minutes = st.integers(min_value=-3, max_value=60)
amounts = st.builds(lambda cpu, memory: Resources(cpu, memory),
                    st.integers(0, 5).map(lambda n: n * 50), st.integers(0, 5))


# -- the oracle: nothing but sums over the raw list -----------------------------------------------------------------------

Raw = dict[int, tuple[int, int, dict[str, Resources]]]   # id -> (start minute, end minute, host -> amount)


def o_usage(raw: Raw, host: str, t: int, excluded: frozenset[int] = frozenset()) -> Resources:
    cpu = memory = 0
    for rid, (start, end, res) in raw.items():
        if rid not in excluded and host in res and start <= t < end:
            cpu += res[host].cpu
            memory += res[host].memory
    return Resources(cpu, memory)


def o_count(raw: Raw, host: str, t: int) -> int:
    return sum(1 for start, end, res in raw.values() if host in res and start <= t < end)


def o_ok(raw: Raw, cap: Resources, host: str, req: Resources, t: int, excluded: frozenset[int]) -> bool:
    used = o_usage(raw, host, t, excluded)
    return used.cpu + req.cpu <= cap.cpu and used.memory + req.memory <= cap.memory


def o_points(raw: Raw, host: str, t1: int, t2: int | None) -> list[int]:
    """t1 and every reservation boundary on the host strictly inside (t1, t2)."""
    inside = {p for start, end, res in raw.values() if host in res for p in (start, end)
              if p > t1 and (t2 is None or p < t2)}
    return [t1, *sorted(inside)]


def o_fits(raw, cap, host, req, t1, t2, excluded) -> bool:
    return all(o_ok(raw, cap, host, req, p, excluded) for p in o_points(raw, host, t1, t2))


def o_latest_fit(raw, cap, host, req, t1, t2, excluded) -> datetime | None:
    points = o_points(raw, host, t1, t2)
    if not o_ok(raw, cap, host, req, t1, excluded):
        return None
    for p in points[1:]:
        if not o_ok(raw, cap, host, req, p, excluded):
            return T(p)
    return FOREVER if t2 is None else T(t2)


def o_changepoints(raw: Raw, t: int, until: int | None, hosts) -> list[datetime]:
    points = {p for start, end, res in raw.values() if end > start and any(h in res for h in hosts)
              for p in (start, end) if p > t and (until is None or p < until)}
    return [T(p) for p in sorted(points)]


# -- the machine -------------------------------------------------------------------------------------------------------------
# Rules take plain integers (host indexes, positions in the list of live reservations) rather than drawing
# from the state with st.data(): that keeps every step's arguments independent, so hypothesis shrinks a
# failure to a handful of tiny steps in seconds.

host_picks = st.integers(min_value=0, max_value=2)
host_sets = st.sets(host_picks, min_size=1, max_size=3)
positions = st.integers(min_value=0, max_value=60)
position_sets = st.sets(positions, max_size=4)


class SlotTableMachine(RuleBasedStateMachine):
    #: the core the table runs on (`tests.reference.CORES`): the compiled one here, the reference below
    kind = "compiled"

    @initialize(caps=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 8)), min_size=1, max_size=3))
    def setup(self, caps):
        self.caps = {HOSTS[i]: Resources(cpu * 100, memory) for i, (cpu, memory) in enumerate(caps)}
        self.table = SlotTable(self.caps, core=CORES[self.kind])
        self.raw: Raw = {}
        self.objs: dict[int, Reservation] = {}
        self.next_lease = 1

    # -- helpers --
    def host(self, pick: int) -> str:
        return HOSTS[pick % len(self.caps)]

    def placement(self, picks: set[int], amount_list: list[Resources]) -> dict[str, Resources]:
        hosts = sorted({self.host(p) for p in picks})
        return {h: amount_list[i % len(amount_list)] for i, h in enumerate(hosts)}

    def rid(self, position: int) -> int:
        ids = sorted(self.raw)
        return ids[position % len(ids)]

    def excluded(self, picks: set[int]) -> tuple[frozenset[int], list[Reservation]]:
        ids = sorted(self.raw)
        chosen = frozenset(ids[p] for p in picks if p < len(ids))
        return chosen, [self.objs[i] for i in sorted(chosen)]

    def check_and_decide(self, start, end, res, excluded_ids=frozenset(), excluding=()) -> bool:
        """Ask the table whether it fits on every host, comparing each answer with the oracle."""
        ok = True
        for host, amount in res.items():
            got = self.table.fits(host, amount, T(start), T(end), excluding)
            assert got == o_fits(self.raw, self.caps[host], host, amount, start, end, excluded_ids), \
                (host, amount, start, end, excluded_ids)
            ok = ok and got
        return ok

    # -- rules --
    @rule(picks=host_sets, amount_list=st.lists(amounts, min_size=1, max_size=3), start=minutes, length=lengths)
    def add(self, picks, amount_list, start, length):
        res, end = self.placement(picks, amount_list), start + length
        if self.check_and_decide(start, end, res):
            rr = self.table.add(Reservation(self.next_lease, ReservationKind.VM, T(start), T(end), dict(res)))
            self.next_lease += 1
            assert rr.id not in self.raw
            self.raw[rr.id] = (start, end, dict(res))
            self.objs[rr.id] = rr

    @precondition(lambda self: self.raw)
    @rule(position=positions)
    def remove(self, position):
        rid = self.rid(position)
        self.table.remove(self.objs.pop(rid))
        del self.raw[rid]

    @precondition(lambda self: self.raw)
    @rule(position=positions, start=minutes, length=lengths,
          new_place=st.none() | st.tuples(host_sets, st.lists(amounts, min_size=1, max_size=3)))
    def update(self, position, start, length, new_place):
        rid = self.rid(position)
        rr, end = self.objs[rid], start + length
        res = dict(self.raw[rid][2]) if new_place is None else self.placement(*new_place)
        # it may move only where it fits once its old self is out of the way
        if self.check_and_decide(start, end, res, frozenset({rid}), [rr]):
            self.table.update(rr, T(start), T(end), None if new_place is None else dict(res))
            assert rr.id == rid and rr in self.table
            self.raw[rid] = (start, end, dict(res))

    @rule(pick=host_picks, t=query_minutes, exclude=position_sets)
    def point_queries(self, pick, t, exclude):
        host = self.host(pick)
        cap = self.caps[host]
        excluded_ids, excluding = self.excluded(exclude)
        assert self.table.usage_at(host, T(t)) == o_usage(self.raw, host, t)
        used = o_usage(self.raw, host, t, excluded_ids)
        assert self.table.usage_at(host, T(t), excluding) == used
        free = self.table.free_at(host, T(t), excluding)
        assert (free.cpu, free.memory) == (cap.cpu - used.cpu, cap.memory - used.memory)
        count = o_count(self.raw, host, t)
        assert self.table.reservation_count_at(host, T(t)) == count
        assert self.table.host_states([host], T(t), excluding) == [(host, used, cap, count)]
        # every host at once, from the incrementally maintained snapshots
        names, used_rows, cap_rows, counts, _ = self.table.state_arrays(T(t))
        assert names == list(self.caps)
        assert [tuple(row[:2]) for row in used_rows.tolist()] == \
            [tuple(o_usage(self.raw, h, t)[:2]) for h in names]
        assert [tuple(row[:2]) for row in cap_rows.tolist()] == [tuple(self.caps[h][:2]) for h in names]
        assert counts.tolist() == [o_count(self.raw, h, t) for h in names]

    @rule(pick=host_picks, req=amounts, t1=query_minutes, length=st.integers(0, 30), exclude=position_sets)
    def interval_queries(self, pick, req, t1, length, exclude):
        host = self.host(pick)
        cap = self.caps[host]
        t2 = t1 + length
        excluded_ids, excluding = self.excluded(exclude)
        for ex, ex_ids in (((), frozenset()), (excluding, excluded_ids)):
            assert self.table.fits(host, req, T(t1), T(t2), ex) == \
                o_fits(self.raw, cap, host, req, t1, t2, ex_ids)
            assert self.table.latest_fit(host, req, T(t1), T(t2), ex) == \
                o_latest_fit(self.raw, cap, host, req, t1, t2, ex_ids)
            assert self.table.latest_fit(host, req, T(t1), None, ex) == \
                o_latest_fit(self.raw, cap, host, req, t1, None, ex_ids)

    @rule(pick=host_picks, t1=query_minutes, length=st.integers(0, 30), forever=st.booleans())
    def step_queries(self, pick, t1, length, forever):
        """A host's steps over an interval (`steps_key`) and its peak (`peak_key`), which the preemption
        bound reads: the usage at t1 and at every boundary inside, and per field the most of them."""
        host = self.host(pick)
        t2 = None if forever else t1 + length
        k = (lambda m: time_key(T(m)))
        points = [p for p in o_points(self.raw, host, t1, t2) if p == t1 or p in {
            b for s, e, res in self.raw.values() if e > s and host in res for b in (s, e)}]
        keys, usages = self.table.timeline(host).steps_key(k(t1), None if t2 is None else k(t2))
        assert keys == [k(p) for p in points]
        assert list(usages) == [o_usage(self.raw, host, p) for p in points]
        peak = self.table.timeline(host).peak_key(k(t1), None if t2 is None else k(t2))
        assert peak == tuple(float(max(u[f] for u in usages)) for f in range(5))

    @rule(picks=st.sets(host_picks, max_size=3), t=query_minutes, until=st.none() | query_minutes)
    def changepoint_queries(self, picks, t, until):
        hosts = sorted({self.host(p) for p in picks})
        assert self.table.changepoints_after(T(t), None if until is None else T(until), hosts) == \
            o_changepoints(self.raw, t, until, hosts)
        assert self.table.changepoints_after(T(t)) == o_changepoints(self.raw, t, None, self.caps)

    # -- invariants --
    @invariant()
    def never_over_capacity(self):
        assert self.table.overcommitted() == []

    @invariant()
    def indexes_match_the_raw_list(self):
        assert len(self.table) == len(self.raw)
        assert {r.id: (r.start, r.end, r.resources) for r in self.table.reservations()} == \
            {rid: (T(s), T(e), res) for rid, (s, e, res) in self.raw.items()}
        # a host's breakpoints are exactly the boundaries of its non-empty reservations
        for host in self.caps:
            expected = {p for s, e, res in self.raw.values() if e > s and host in res for p in (s, e)}
            assert len(self.table.timeline(host)) == len(expected)
        if not self.raw:
            assert self.table.changepoints_after(T(-10**6)) == []


TestSlotTableMachine = SlotTableMachine.TestCase
TestSlotTableMachine.settings = settings(max_examples=200, stateful_step_count=40, deadline=None, report_multiple_bugs=False,
                                         suppress_health_check=[HealthCheck.too_slow])


# -- the same machine with the shared usage vectors swept often -----------------------------------------------------------

class SweepingMachine(SlotTableMachine):
    """With the shared usage vectors swept whenever their number doubles and the memo of usage transitions
    starting again after two amounts or two transitions: the compiled core keeps a memo across the hosts of
    a reservation, which a sweep replaces."""

    def __init__(self):
        super().__init__()
        self._saved = shared_usage._SWEEP_SLACK, shared_usage._MAX_AMOUNTS
        shared_usage._SWEEP_SLACK, shared_usage._MAX_AMOUNTS = 2, 2

    def teardown(self):
        shared_usage._SWEEP_SLACK, shared_usage._MAX_AMOUNTS = self._saved


TestSweepingMachine = SweepingMachine.TestCase
TestSweepingMachine.settings = settings(max_examples=300, stateful_step_count=40, deadline=None,
                                        report_multiple_bugs=False, suppress_health_check=[HealthCheck.too_slow])


# -- the same machine on the plain reference (tests/reference/core.py) ----------------------------------------------------

class ReferenceMachine(SlotTableMachine):
    kind = "reference"


TestReferenceMachine = ReferenceMachine.TestCase
TestReferenceMachine.settings = settings(max_examples=100, stateful_step_count=40, deadline=None,
                                         report_multiple_bugs=False, suppress_health_check=[HealthCheck.too_slow])
