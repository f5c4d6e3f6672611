"""The compiled core's per-host loops for a reservation's change (`mark_rows`, `narrow_windows`,
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
@given(hosts=subsets, before=bounds, k=keys, later=st.booleans(), marked=st.sets(st.integers(0, 7)))
def test_rows_and_windows_as_the_reference(hosts, before, k, later, marked):
    index = {h: i for i, h in enumerate(reversed(HOSTS))}
    out = {}
    for kind, core in CORES.items():
        bound = np.array(before, dtype=np.int64)
        into = set(marked)
        core.narrow_windows(hosts, index, bound, k, later)
        core.mark_rows(hosts, index, into)
        out[kind] = (bound.tolist(), into)
    assert out["compiled"] == out["reference"]
    bound, into = out["compiled"]
    for h, i in index.items():
        expected = (min if later else max)(before[i], k) if h in hosts else before[i]
        assert bound[i] == expected
    assert into == marked | {index[h] for h in hosts}


T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("kind", sorted(CORES))
def test_a_reservation_on_an_unknown_host_changes_no_timeline(kind):
    core = CORES[kind]
    shared = SharedUsage()
    timelines = {h: core.HostTimeline(h, Resources.of(4, 4096), shared) for h in ("a", "b")}
    one = Resources.of(1, 512)
    start, end = T0, T0 + timedelta(hours=1)
    ks, ke = time_key(start), time_key(end)
    with pytest.raises(KeyError):
        core.add_on_hosts(timelines, {"a": one, "nowhere": one, "b": one}, ks, ke, start, end)
    assert [len(timelines[h]) for h in ("a", "b")] == [0, 0]
    core.add_on_hosts(timelines, {"a": one, "b": one}, ks, ke, start, end)
    with pytest.raises(KeyError):
        core.remove_on_hosts(timelines, {"a": one, "nowhere": one}, ks, ke)
    assert [timelines[h].usage_at(start) for h in ("a", "b")] == [one, one]
    core.remove_on_hosts(timelines, {"a": one, "b": one}, ks, ke)
    assert [len(timelines[h]) for h in ("a", "b")] == [0, 0]
