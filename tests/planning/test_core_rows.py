"""The compiled core's per-host loops for a reservation's change (`mark_rows`, `unmark_rows`, `narrow_windows`,
`add_on_hosts`/`remove_on_hosts`) against the plain reference's, on random hosts, rows and keys."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.model.resources import Resources
from orchestrator.model.timeutil import UTC
from orchestrator.planning.slottable.keys import AFTER_ALL, BEFORE_ALL, time_key
from orchestrator.planning.slottable.shared_usage import SharedUsage
from tests.reference import CORES

HOSTS = [f"h{i}" for i in range(8)]
keys = st.integers(min_value=-10**12, max_value=10**12)
bounds = st.lists(st.one_of(keys, st.just(AFTER_ALL), st.just(BEFORE_ALL)), min_size=8, max_size=8)
subsets = st.lists(st.sampled_from(HOSTS), unique=True, max_size=8)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.integers(0, 7), unique=True), before=bounds, k=keys, later=st.booleans(),
       marked=st.lists(st.integers(0, 7), unique=True))
def test_rows_and_windows_as_the_reference(rows, before, k, later, marked):
    out = {}
    for kind, core in CORES.items():
        bound = np.array(before, dtype=np.int64)
        into = list(marked)
        flags = bytearray(len(HOSTS))
        for i in marked:
            flags[i] = 1
        core.narrow_windows(rows, bound, k, later)
        core.mark_rows(rows, flags, into)
        core.mark_rows(rows, flags, into)   # (a second time: nothing more)
        marks = list(flags)
        core.unmark_rows(into, flags)
        out[kind] = (bound.tolist(), into, marks, list(flags))
    assert out["compiled"] == out["reference"]
    bound, into, marks, cleared = out["compiled"]
    for i in range(len(HOSTS)):
        expected = (min if later else max)(before[i], k) if i in rows else before[i]
        assert bound[i] == expected
    assert into == marked + [i for i in rows if i not in marked]
    assert marks == [int(i in into) for i in range(len(HOSTS))]
    assert cleared == [0] * len(HOSTS)


T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("kind", sorted(CORES))
def test_a_reservation_on_an_unknown_host_changes_no_timeline(kind):
    core = CORES[kind]
    shared = SharedUsage()
    timelines = {h: core.HostTimeline(h, Resources.of(4, 4096), shared) for h in ("a", "b")}
    timelines["a"].row, timelines["b"].row = 7, 3
    one = Resources.of(1, 512)
    start, end = T0, T0 + timedelta(hours=1)
    ks, ke = time_key(start), time_key(end)
    with pytest.raises(KeyError):
        core.add_on_hosts(timelines, {"a": one, "nowhere": one, "b": one}, ks, ke, start, end)
    assert [len(timelines[h]) for h in ("a", "b")] == [0, 0]
    assert core.add_on_hosts(timelines, {"b": one, "a": one}, ks, ke, start, end) == [3, 7]   # (their rows)
    with pytest.raises(KeyError):
        core.remove_on_hosts(timelines, {"a": one, "nowhere": one}, ks, ke)
    assert [timelines[h].usage_at(start) for h in ("a", "b")] == [one, one]
    assert core.remove_on_hosts(timelines, {"a": one, "b": one}, ks, ke) == [7, 3]
    assert [len(timelines[h]) for h in ("a", "b")] == [0, 0]


# -- the host states' and the mapper's loops over many rows ------------------------------------------------------
row_lists = st.lists(st.integers(0, 7), min_size=1, max_size=12)
small = st.lists(st.integers(0, 2), min_size=8, max_size=8)


@settings(max_examples=300, deadline=None)
@given(rows=row_lists, ids=small, counts=small, groups=small)
def test_rows_alike_as_the_reference(rows, ids, counts, groups):
    answers = {kind: core.rows_alike(rows, ids, counts, groups) for kind, core in CORES.items()}
    assert answers["compiled"] == answers["reference"] == (len({(ids[i], counts[i], groups[i]) for i in rows}) == 1)


def _learned(calls):
    """A stand-in for `_Room.learn`: a count from the group and code alone, each call noted."""
    def learn(group, code, used, capacity):
        calls.append((group, code, used, capacity))
        return (group * 7 + code * 3) % 5
    return learn


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.integers(0, 7)), code=st.lists(st.integers(0, 5), min_size=8, max_size=8), groups=small,
       known=st.lists(st.dictionaries(st.integers(0, 5), st.integers(0, 4)), min_size=3, max_size=3),
       before=st.lists(st.integers(0, 4), min_size=8, max_size=8))
def test_recount_rows_as_the_reference(rows, code, groups, known, before):
    used = [Resources.of(i, 0) for i in range(8)]
    capacities = [Resources.of(4, 4096)] * 8
    out = {}
    for kind, core in CORES.items():
        per_row, array, calls = list(before), np.array(before, dtype=float), []
        # (a row may come more than once: the host states list a row each time it is refreshed)
        change = core.recount_rows(rows, code, groups, known, per_row, array, _learned(calls), used, capacities)
        # (which usages were learned: the compiled loop learns a code once for a run of rows holding it)
        out[kind] = (change, per_row, array.tolist(), sorted({(g, c) for g, c, _, _ in calls}))
    assert out["compiled"] == out["reference"]
    change, per_row, array, calls = out["compiled"]
    expected = [(known[groups[i]][code[i]] if code[i] in known[groups[i]] else (groups[i] * 7 + code[i] * 3) % 5)
                if i in rows else before[i] for i in range(8)]
    assert per_row == expected and array == [float(x) for x in expected]
    assert change == sum(expected) - sum(before)
    assert set(calls) == {(groups[i], code[i]) for i in rows if code[i] not in known[groups[i]]}


reservations = st.lists(st.tuples(st.integers(0, 7), st.integers(0, 100), st.integers(1, 60), st.integers(1, 3)),
                        max_size=20)


@settings(max_examples=200, deadline=None)
@given(placed=reservations, until=st.lists(st.integers(0, 200), min_size=8, max_size=8), k=st.integers(0, 200),
       rows=st.one_of(st.none(), st.lists(st.integers(0, 7), unique=True)), most=st.integers(-1, 8),
       groups=small, before=st.lists(st.integers(0, 4), min_size=8, max_size=8),
       known=st.lists(st.dictionaries(st.integers(0, 30), st.integers(0, 4)), min_size=3, max_size=3))
def test_room_later_as_the_reference(placed, until, k, rows, most, groups, before, known):
    capacities = [Resources.of(4, 4096)] * 8
    out = {}
    for kind, core in CORES.items():
        shared = SharedUsage()
        timelines = [core.HostTimeline(f"h{i}", capacities[i], shared) for i in range(8)]
        for host, start, length, cpus in placed:
            timelines[host].add_keys(start, start + length, Resources.of(cpus, 0), T0, T0)
        calls: list = []
        change = core.room_later(timelines, np.array(until, dtype=np.int64), k, rows, most, list(before), groups,
                                 known, _learned(calls), shared.vectors, capacities)
        code_of = {vector: code for code, vector in shared.vectors.items()}
        codes = [code_of[timelines[i].usage_key(k)] for i in range(8)]
        out[kind] = (change, sorted(set(calls)), codes)   # (the compiled loop learns once for a run of rows)
    assert out["compiled"] == out["reference"]
    change, _, codes = out["compiled"]
    changed = [i for i in (range(8) if rows is None else rows) if until[i] <= k]
    if 0 <= most < len(changed):
        assert change is None
    else:
        fits = [known[groups[i]].get(codes[i], (groups[i] * 7 + codes[i] * 3) % 5) for i in range(8)]
        assert change == sum(fits[i] - before[i] for i in changed)


@settings(max_examples=300, deadline=None)
@given(ranked=st.lists(st.integers(0, 7), unique=True), steady=st.lists(st.integers(0, 100), min_size=8, max_size=8),
       per_row=st.lists(st.integers(0, 4), min_size=8, max_size=8), end_key=st.integers(0, 100), n=st.integers(1, 20))
def test_steady_head_as_the_reference(ranked, steady, per_row, end_key, n):
    names = [f"h{i}" for i in range(8)]
    out = {}
    for kind, core in CORES.items():
        held: list[str] = []
        taken = core.steady_head(ranked, names, per_row, np.array(steady, dtype=np.int64), end_key, n, held)
        out[kind] = (taken, held)
    assert out["compiled"] == out["reference"]
    taken, held = out["compiled"]
    assert len(held) <= n and all(steady[row] >= end_key for row in ranked[:taken])
    assert held == [names[row] for row in ranked[:taken] for _ in range(per_row[row])][:n]
