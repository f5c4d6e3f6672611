"""The earliest start and the free windows (`planning/free_slots.py`) against brute force: the placement an
advance reservation gets, tried at the first time and at every changepoint of the slot table in order."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.config import SchedulingConfig
from orchestrator.model.errors import InvalidRequest
from orchestrator.model.lease import Lease, LeaseRequest, LeaseType
from orchestrator.model.resources import Resources
from orchestrator.model.states import LeaseState
from orchestrator.planning.lease_scheduler import LeaseScheduler
from orchestrator.planning.slottable.table import SlotTable
from tests.reference import core as reference_core
from tests.support.times import T0

MINUTE = timedelta(minutes=1)


def at(minutes: float) -> datetime:
    return T0 + minutes * MINUTE


def scheduler(capacities: list[tuple[int, int]], policy: str = "greedy", core=None,
              preemption: str = "ar-preempts-be") -> LeaseScheduler:
    table = SlotTable([(f"h{i}", Resources.of(c, m)) for i, (c, m) in enumerate(capacities)], core=core)
    config = SchedulingConfig(suspension="all", suspend_rate=32, resume_rate=32, policy_host_selection=policy,
                              policy_preemption=preemption)
    return LeaseScheduler(table, config)


def request(kind: LeaseType, nodes: int, cpus: int, memory: int, minutes: int, start: datetime | None = None,
            preemptible: bool = True, earliest: bool = False, not_after: datetime | None = None,
            sizes: list[tuple[int, int]] | None = None) -> LeaseRequest:
    node_list = tuple(Resources.of(c, m) for c, m in sizes) if sizes else (Resources.of(cpus, memory),) * nodes
    return LeaseRequest(type=kind, nodes=node_list, duration=minutes * MINUTE, submit_time=T0, start=start,
                        preemptible=preemptible, earliest=earliest, not_after=not_after)


def brute_force(s: LeaseScheduler, lease: Lease, first: datetime, not_after: datetime | None) -> datetime | None:
    """The first of the first time and every changepoint of the table at which the AR's placement holds."""
    duration = lease.request.duration
    for t in [first, *s.table.changepoints_after(first)]:
        if not_after is not None and t + duration > not_after:
            return None
        if s.vm.map_exact(lease, t, t + duration) is not None:
            return t
    return None


@st.composite
def sites(draw):
    hosts = draw(st.lists(st.tuples(st.integers(1, 4), st.sampled_from((1024, 2048, 4096))), min_size=1, max_size=4))
    leases = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from((LeaseType.ADVANCE_RESERVATION, LeaseType.BEST_EFFORT)))
        start = at(draw(st.integers(0, 240))) if kind is LeaseType.ADVANCE_RESERVATION else None
        leases.append(request(kind, draw(st.integers(1, 4)), draw(st.integers(1, 3)),
                              draw(st.sampled_from((512, 1024, 2048))), draw(st.integers(5, 120)), start,
                              preemptible=draw(st.booleans())))
    return hosts, leases


def planned(capacities, leases, policy: str = "greedy", core=None) -> LeaseScheduler:
    s = scheduler(capacities, policy, core)
    for r in leases:
        s.submit(r, T0)
    s.schedule(T0)
    return s


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(site=sites(), policy=st.sampled_from(("greedy", "pack", "spread")),
       nodes=st.integers(1, 4), cpus=st.integers(1, 3), memory=st.sampled_from((512, 1024, 2048)),
       minutes=st.integers(5, 150), after=st.integers(0, 200), window=st.none() | st.integers(0, 400),
       mixed=st.booleans(), reference=st.booleans())
def test_earliest_start_is_the_first_feasible_changepoint(site, policy, nodes, cpus, memory, minutes, after,
                                                          window, mixed, reference):
    capacities, leases = site
    s = planned(capacities, leases, policy, reference_core if reference else None)
    not_before = at(after)
    not_after = None if window is None else not_before + (minutes + window) * MINUTE
    sizes = [(cpus, memory), (1, 512)] * ((nodes + 1) // 2) if mixed else None
    wanted = request(LeaseType.ADVANCE_RESERVATION, nodes, cpus, memory, minutes, not_before, preemptible=False,
                     earliest=True, not_after=not_after, sizes=sizes)
    probe = Lease(id=10_000, request=wanted)
    expected = brute_force(s, probe, not_before, not_after)
    lease = s.submit(wanted, T0)
    s.schedule(T0)
    misfit = s.table.misfit(wanted.nodes)   # (admission: nodes the empty site could not hold, first fit)
    if misfit is not None:
        assert lease.state is LeaseState.REJECTED and lease.reason == misfit
    elif expected is None:
        assert lease.state is LeaseState.REJECTED
        assert lease.reason.startswith("nothing fits from ")
    else:
        assert lease.state is LeaseState.SCHEDULED, lease.reason
        assert lease.last_vm.start == expected
        assert lease.request.start == expected and not lease.request.earliest
        assert lease.last_vm.final_end == expected + wanted.duration
        assert not s.table.overcommitted()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(site=sites(), nodes=st.integers(1, 3), cpus=st.integers(1, 3), minutes=st.integers(5, 90),
       count=st.integers(1, 4))
def test_every_free_window_really_fits(site, nodes, cpus, minutes, count):
    """A submission at each window's start succeeds (on the plan as it was), on the window's hosts, and one
    lasting until the window's latest end fits there too."""
    capacities, leases = site
    duration = minutes * MINUTE
    s = planned(capacities, leases)
    probe = Lease(id=-1, request=request(LeaseType.ADVANCE_RESERVATION, nodes, cpus, 1024, minutes, T0,
                                         preemptible=False))
    windows = s.vm.free_slots.windows(probe, T0, None, duration, count)
    assert windows == sorted(windows, key=lambda w: w.start)
    assert len(windows) <= count
    for earlier, later in zip(windows, windows[1:]):
        assert earlier.latest_end is not None and later.start > earlier.latest_end - duration
    for window in windows:
        assert window.latest_end is None or window.latest_end >= window.start + duration
        trial = planned(capacities, leases)
        lease = trial.submit(request(LeaseType.ADVANCE_RESERVATION, nodes, cpus, 1024, minutes, window.start,
                                     preemptible=False), T0)
        trial.schedule(T0)
        assert lease.state is LeaseState.SCHEDULED, lease.reason
        assert lease.last_vm.start == window.start
        assert not trial.table.overcommitted()
    if windows:
        assert windows[0].start == brute_force(s, probe, T0, None)


def test_waits_for_a_reservation_that_cannot_give_way_and_preempts_one_that_can():
    s = scheduler([(2, 2048), (2, 2048)])
    s.submit(request(LeaseType.ADVANCE_RESERVATION, 2, 2, 1024, 60, at(10), preemptible=False), T0)
    s.submit(request(LeaseType.BEST_EFFORT, 2, 2, 1024, 300), T0)
    s.schedule(T0)
    lease = s.submit(request(LeaseType.ADVANCE_RESERVATION, 2, 2, 1024, 30, T0, preemptible=False, earliest=True),
                     T0)
    s.schedule(T0)
    # not at 13:00 (the AR at 13:10 cannot give way within 30 minutes), but when it ends: the best-effort
    # lease planned after it is preempted
    assert lease.state is LeaseState.SCHEDULED
    assert lease.last_vm.start == at(70)


def test_refused_when_nothing_fits_before_not_after():
    s = scheduler([(2, 2048)])
    s.submit(request(LeaseType.ADVANCE_RESERVATION, 1, 2, 1024, 60, at(0), preemptible=False), T0)
    s.schedule(T0)
    lease = s.submit(request(LeaseType.ADVANCE_RESERVATION, 1, 1, 1024, 30, T0, preemptible=False, earliest=True,
                             not_after=at(80)), T0)
    s.schedule(T0)
    assert lease.state is LeaseState.REJECTED
    assert lease.reason == ("nothing fits from 2026-01-01T13:00:00Z to 2026-01-01T14:20:00Z without preempting "
                            "leases that may not be preempted")
    fits = s.submit(request(LeaseType.ADVANCE_RESERVATION, 1, 1, 1024, 30, T0, preemptible=False, earliest=True,
                            not_after=at(90)), T0)
    s.schedule(T0)
    assert fits.last_vm.start == at(60)


def test_a_window_must_hold_the_duration():
    with pytest.raises(InvalidRequest, match="not_after: .* leaves less than the duration"):
        request(LeaseType.ADVANCE_RESERVATION, 1, 1, 1024, 30, T0, earliest=True, not_after=at(20))
    with pytest.raises(InvalidRequest, match="not_after: is for a lease that starts at the earliest"):
        request(LeaseType.ADVANCE_RESERVATION, 1, 1, 1024, 30, T0, not_after=at(60))
    with pytest.raises(InvalidRequest, match="start: earliest is an advance reservation's start"):
        request(LeaseType.BEST_EFFORT, 1, 1, 1024, 30, T0, earliest=True)
