"""Quotas: the figures in a refusal, the edges (at the limit is allowed, one more is not), user and group
quotas together, checked against a plain oracle with hypothesis."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.model.errors import InvalidRequest, LeasewiseError
from orchestrator.model.lease import Lease, LeaseRequest, LeaseType
from orchestrator.model.quota import (
    Holding,
    Quota,
    QuotaExceeded,
    ahead_of,
    check_extension,
    check_request,
    check_subject,
    duration_text,
    group_holding,
    holding_of,
    holdings_by_user,
)
from orchestrator.model.resources import Resources
from orchestrator.model.states import LeaseState
from orchestrator.model.timeutil import UTC, parse_duration

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
GROUPS = {"alice": frozenset({"alice", "lab"}), "bob": frozenset({"bob", "lab"}), "carol": frozenset({"carol"})}


def groups_of(user: str) -> frozenset[str]:
    return GROUPS.get(user, frozenset())


def request(user="alice", nodes=1, cpus=2.0, memory=4096, duration="1h", start=None) -> LeaseRequest:
    kind = LeaseType.ADVANCE_RESERVATION if start is not None else LeaseType.BEST_EFFORT
    return LeaseRequest(type=kind, nodes=(Resources.of(cpus, memory),) * nodes, duration=parse_duration(duration),
                        submit_time=NOW, start=start, user=user)


def refusal(call) -> str:
    with pytest.raises(QuotaExceeded) as exc:
        call()
    assert isinstance(exc.value, LeasewiseError)
    return str(exc.value)


# -- the figures -------------------------------------------------------------------------------------------------
def test_each_limit_is_refused_with_its_figure():
    held = {"alice": Holding(vcpus=30, memory_mib=60000, vms=10)}
    quotas = {"alice": Quota(vcpus=32)}
    assert refusal(lambda: check_request(request(nodes=5, cpus=2), NOW, quotas, held, groups_of)) \
        == "alice would hold 40 vCPUs > 32"
    quotas = {"alice": Quota(vms=10)}
    assert refusal(lambda: check_request(request(nodes=2), NOW, quotas, held, groups_of)) \
        == "alice would hold 12 VMs > 10"
    quotas = {"alice": Quota(memory_mib=65536)}
    assert refusal(lambda: check_request(request(memory=10000), NOW, quotas, held, groups_of)) \
        == "alice would hold 70000 MiB of memory > 65536"
    quotas = {"alice": Quota(max_duration=timedelta(hours=24))}
    assert refusal(lambda: check_request(request(duration="30h"), NOW, quotas, held, groups_of)) \
        == "lease of 30h > alice's max duration 24h"
    quotas = {"alice": Quota(max_ahead=timedelta(days=14))}
    start = datetime(2026, 12, 20, 10, 0, tzinfo=UTC)
    assert refusal(lambda: check_request(request(start=start), NOW, quotas, held, groups_of)) \
        == "start 2026-12-20T10:00:00Z is 18d ahead > alice's max ahead 14d"


def test_a_group_quota_limits_the_sum_of_its_members():
    held = {"alice": Holding(30, 1000, 3), "bob": Holding(34, 1000, 3), "carol": Holding(100, 1000, 3)}
    quotas = {"@lab": Quota(vcpus=64)}
    # alice 30 + bob 34 + 6 asked = 70 (carol is not in lab)
    message = refusal(lambda: check_request(request(nodes=3, cpus=2), NOW, quotas, held, groups_of))
    assert message == "group @lab would hold 70 vCPUs > 64"
    assert group_holding("lab", held, groups_of) == Holding(64, 2000, 6)
    # carol is in no group with a quota: anything goes
    check_request(request(user="carol", nodes=50), NOW, quotas, held, groups_of)


def test_the_users_own_quota_is_reported_before_its_groups():
    held = {"alice": Holding(10, 0, 1), "bob": Holding(60, 0, 1)}
    quotas = {"alice": Quota(vcpus=11), "@lab": Quota(vcpus=64)}
    assert refusal(lambda: check_request(request(nodes=1, cpus=4), NOW, quotas, held, groups_of)) \
        == "alice would hold 14 vCPUs > 11"
    quotas = {"alice": Quota(vcpus=100), "@lab": Quota(vcpus=64)}
    assert refusal(lambda: check_request(request(nodes=1, cpus=4), NOW, quotas, held, groups_of)) \
        == "group @lab would hold 74 vCPUs > 64"


def test_group_limits_on_duration_and_ahead_name_the_group():
    quotas = {"@lab": Quota(max_duration=timedelta(hours=2), max_ahead=timedelta(hours=1))}
    assert refusal(lambda: check_request(request(duration="3h"), NOW, quotas, {}, groups_of)) \
        == "lease of 3h > group @lab's max duration 2h"
    start = NOW + timedelta(hours=1, minutes=30)
    assert refusal(lambda: check_request(request(start=start), NOW, quotas, {}, groups_of)) \
        == "start 2026-12-02T11:30:00Z is 1h30m ahead > group @lab's max ahead 1h"


def test_best_effort_and_immediate_leases_are_zero_ahead():
    quotas = {"alice": Quota(max_ahead=timedelta(0))}
    check_request(request(), NOW, quotas, {}, groups_of)
    immediate = LeaseRequest(type=LeaseType.IMMEDIATE, nodes=(Resources.of(1, 512),), duration=timedelta(hours=1),
                             submit_time=NOW, user="alice")
    assert ahead_of(immediate, NOW) == timedelta(0)
    check_request(immediate, NOW, quotas, {}, groups_of)
    assert ahead_of(request(start=NOW - timedelta(minutes=5)), NOW) == timedelta(0)


def test_vcpus_are_rounded_up_per_vm_as_the_drivers_boot_them():
    assert holding_of(request(nodes=3, cpus=0.5, memory=100.2)) == Holding(vcpus=3, memory_mib=303, vms=3)
    assert holding_of(request(nodes=2, cpus=2.5)) == Holding(vcpus=6, memory_mib=8192, vms=2)


def test_only_live_leases_hold_anything():
    live = Lease(1, request(nodes=2), state=LeaseState.QUEUED)
    running = Lease(2, request(user="bob"), state=LeaseState.ACTIVE)
    done = Lease(3, request(nodes=9), state=LeaseState.DONE)
    cancelled = Lease(4, request(user="bob", nodes=9), state=LeaseState.CANCELLED)
    assert holdings_by_user([live, running, done, cancelled]) == {"alice": Holding(4, 8192, 2),
                                                                    "bob": Holding(2, 4096, 1)}


def test_an_extension_is_checked_against_the_longer_duration_and_what_is_held():
    lease = Lease(1, request(duration="20h"), state=LeaseState.ACTIVE)
    held = holdings_by_user([lease])
    quotas = {"alice": Quota(vcpus=2, max_duration=timedelta(hours=24))}
    check_extension(lease, timedelta(hours=4), quotas, held, groups_of)   # exactly 24h
    assert refusal(lambda: check_extension(lease, timedelta(hours=4, seconds=1), quotas, held, groups_of)) \
        == "lease of 24h1s > alice's max duration 24h"
    # a quota lowered below what is held: no extension either
    assert refusal(lambda: check_extension(lease, timedelta(hours=1), {"alice": Quota(vcpus=1)}, held, groups_of)) \
        == "alice would hold 2 vCPUs > 1"


def test_limits_and_subjects_are_validated():
    for bad in (dict(vcpus=-1), dict(vms=True), dict(memory_mib=1.5), dict(max_duration=timedelta(seconds=-1)),
                dict(max_ahead=5)):
        with pytest.raises(InvalidRequest):
            Quota(**bad)
    assert Quota().unlimited and not Quota(vms=0).unlimited
    for good in ("alice", "@lab", "a.b_c-d", "svc$"):
        assert check_subject(good) == good
    for bad in ("", "@", "al ice", "-x", "@@lab", "a@b", "\x00", "x" * 300):
        with pytest.raises(InvalidRequest):
            check_subject(bad)


@pytest.mark.parametrize(("seconds", "text"), [(86400, "24h"), (30 * 3600, "30h"), (18 * 86400, "18d"),
                                               (5400, "1h30m"), (2 * 86400 + 61, "2d1m1s"), (0, "0s"), (0.5, "1s")])
def test_durations_read_as_people_set_them_and_parse_back(seconds, text):
    assert duration_text(timedelta(seconds=seconds)) == text
    assert parse_duration(text) == timedelta(seconds=math.ceil(seconds))


# -- against an oracle -------------------------------------------------------------------------------------------
def oracle(user, nodes, cpus, memory, duration, ahead, quotas, held) -> str | None:
    """The first exceeded limit's figure, written out plainly."""
    add_v, add_m, add_n = nodes * math.ceil(cpus), nodes * memory, nodes
    subjects = [user] + [f"@{g}" for g in sorted(groups_of(user))]
    for subject in subjects:
        if subject not in quotas:
            continue
        q = quotas[subject]
        if subject.startswith("@"):
            members = [u for u in held if subject[1:] in groups_of(u)]
            v = sum(held[u].vcpus for u in members)
            m = sum(held[u].memory_mib for u in members)
            n = sum(held[u].vms for u in members)
            who = f"group {subject}"
        else:
            h = held.get(user, Holding())
            v, m, n, who = h.vcpus, h.memory_mib, h.vms, user
        if q.vcpus is not None and v + add_v > q.vcpus:
            return f"{who} would hold {v + add_v} vCPUs > {q.vcpus}"
        if q.memory_mib is not None and m + add_m > q.memory_mib:
            return f"{who} would hold {m + add_m} MiB of memory > {q.memory_mib}"
        if q.vms is not None and n + add_n > q.vms:
            return f"{who} would hold {n + add_n} VMs > {q.vms}"
        if q.max_duration is not None and duration > q.max_duration:
            return "duration"
        if q.max_ahead is not None and ahead > q.max_ahead:
            return "ahead"
    return None


limits = st.one_of(st.none(), st.integers(0, 40))
holdings = st.builds(Holding, st.integers(0, 20), st.integers(0, 20), st.integers(0, 20))
quota_strategy = st.builds(Quota, limits, limits, limits,
                           st.one_of(st.none(), st.integers(0, 5).map(lambda h: timedelta(hours=h))),
                           st.one_of(st.none(), st.integers(0, 5).map(lambda h: timedelta(hours=h))))


@settings(max_examples=400, deadline=None)
@given(user=st.sampled_from(["alice", "bob", "carol", "dave"]), nodes=st.integers(1, 4),
       cpus=st.sampled_from([0.5, 1, 1.5, 2, 3]), memory=st.integers(1, 6),
       hours=st.integers(1, 6), ahead_h=st.one_of(st.none(), st.integers(0, 6)),
       quotas=st.dictionaries(st.sampled_from(["alice", "bob", "carol", "@lab", "@carol", "@bob"]), quota_strategy),
       held=st.dictionaries(st.sampled_from(["alice", "bob", "carol", "dave"]), holdings))
def test_check_request_agrees_with_the_oracle(user, nodes, cpus, memory, hours, ahead_h, quotas, held):
    start = None if ahead_h is None else NOW + timedelta(hours=ahead_h)
    req = request(user=user, nodes=nodes, cpus=cpus, memory=memory, duration=f"{hours}h", start=start)
    expected = oracle(user, nodes, cpus, memory, timedelta(hours=hours), timedelta(hours=ahead_h or 0), quotas, held)
    try:
        check_request(req, NOW, quotas, held, groups_of)
    except QuotaExceeded as exc:
        got = str(exc)
        if expected in ("duration", "ahead"):
            assert got.startswith("lease of" if expected == "duration" else "start "), got
        else:
            assert got == expected
    else:
        assert expected is None


@settings(max_examples=200, deadline=None)
@given(held=st.integers(0, 64), nodes=st.integers(1, 8), cpus=st.integers(1, 4),
       which=st.sampled_from(["vcpus", "memory_mib", "vms"]), group=st.booleans())
def test_exactly_at_the_limit_is_allowed_and_one_more_is_not(held, nodes, cpus, which, group):
    adding = {"vcpus": nodes * cpus, "memory_mib": nodes * 7, "vms": nodes}[which]
    holding = Holding(**{which: held})
    subject = "@lab" if group else "alice"
    owner = "bob" if group else "alice"   # for the group: bob holds it, alice asks
    req = request(nodes=nodes, cpus=cpus, memory=7)
    at = {subject: Quota(**{which: held + adding})}
    check_request(req, NOW, at, {owner: holding}, groups_of)
    below = {subject: Quota(**{which: held + adding - 1})}
    if held + adding - 1 >= 0:
        with pytest.raises(QuotaExceeded) as exc:
            check_request(req, NOW, below, {owner: holding}, groups_of)
        assert exc.value.subject == subject and exc.value.limit == which


@settings(max_examples=100, deadline=None)
@given(limit_s=st.integers(0, 10**6), delta=st.integers(-3, 3))
def test_duration_and_ahead_edges(limit_s, delta):
    limit = timedelta(seconds=limit_s)
    value = limit + timedelta(seconds=delta)
    if value <= timedelta(0):
        return
    long = LeaseRequest(type=LeaseType.BEST_EFFORT, nodes=(Resources.of(1, 1),), duration=value, submit_time=NOW,
                        user="alice")
    far = LeaseRequest(type=LeaseType.ADVANCE_RESERVATION, nodes=(Resources.of(1, 1),),
                       duration=timedelta(seconds=1), submit_time=NOW, start=NOW + value, user="alice")
    for req, quota, name in ((long, Quota(max_duration=limit), "max_duration"),
                             (far, Quota(max_ahead=limit), "max_ahead")):
        if delta <= 0:
            check_request(req, NOW, {"alice": quota}, {}, groups_of)
        else:
            with pytest.raises(QuotaExceeded) as exc:
                check_request(req, NOW, {"alice": quota}, {}, groups_of)
            assert exc.value.limit == name
