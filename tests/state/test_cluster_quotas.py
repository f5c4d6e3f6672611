"""Quotas where leases are made: `Cluster.submit` and `Cluster.extend` refuse a request over its owner's or
a group's quota before anything is written, and the quota functions the commands and the server share."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from drivers.inventory import HostConfig
from orchestrator.config import Config
from orchestrator.model.errors import InvalidRequest
from orchestrator.model.lease import LeaseRequest, LeaseType
from orchestrator.model.quota import Holding, Quota, QuotaExceeded
from orchestrator.model.resources import Resources
from orchestrator.model.states import LeaseState
from orchestrator.state.cluster import Cluster
from orchestrator.state.groups import unix_groups
from orchestrator.state.quotas import current_holdings, list_quotas, remove_quota, set_quota, show_quota
from orchestrator.state.store import Store, StoreError
from tests.support.stores import snapshot
from tests.support.times import T0

GROUPS = {"alice": frozenset({"lab"}), "bob": frozenset({"lab", "ops"}), "carol": frozenset()}


def groups_of(user: str) -> frozenset[str]:
    return GROUPS.get(user, frozenset())


@pytest.fixture
def path(tmp_path: Path) -> Path:
    path = tmp_path / "state.sqlite"
    with Store.open(path) as store:
        for i in (1, 2):
            store.add_host(HostConfig(name=f"h{i}", uri="sim://", domain_type="qemu"), 16, 32768)
    return path


def request(user: str, nodes: int = 1, cpus: float = 2, memory: int = 1024, hours: float = 1,
            start: datetime | None = None) -> LeaseRequest:
    return LeaseRequest(type=LeaseType.ADVANCE_RESERVATION if start else LeaseType.BEST_EFFORT,
                        nodes=(Resources.of(cpus, memory),) * nodes, duration=timedelta(hours=hours),
                        submit_time=T0, start=start, user=user)


def submit(path: Path, req: LeaseRequest, now: datetime = T0) -> int:
    with Store.open(path) as store, store.transaction():
        cluster = Cluster(store, Config(), groups_of=groups_of)
        lease = cluster.submit(req, now)
        cluster.save(now)
        return lease.id


def extend(path: Path, lease_id: int, by: timedelta, now: datetime = T0) -> None:
    with Store.open(path) as store, store.transaction():
        cluster = Cluster(store, Config(), groups_of=groups_of)
        cluster.extend(lease_id, by, now)
        cluster.save(now)


def test_a_request_over_quota_leaves_nothing_behind_not_even_an_id(path):
    with Store.open(path) as store:
        store.set_quota("alice", Quota(vcpus=8), at=T0)
    assert submit(path, request("alice", nodes=3)) == 1   # 6 vCPUs
    before = snapshot(path)
    with pytest.raises(QuotaExceeded, match=r"^alice would hold 10 vCPUs > 8$"):
        submit(path, request("alice", nodes=2))
    assert snapshot(path) == before
    assert submit(path, request("alice", nodes=1)) == 2   # exactly 8: allowed, and the next id
    with Store.open(path) as store:
        assert [l.id for l in store.load_leases()] == [1, 2]
        assert current_holdings(store) == {"alice": Holding(8, 4096, 4)}


def test_the_refusal_happens_even_without_an_outer_transaction(path):
    with Store.open(path) as store:
        store.set_quota("alice", Quota(vms=0), at=T0)
        cluster = Cluster(store, Config(), groups_of=groups_of)
        before = snapshot(path)
        with pytest.raises(QuotaExceeded, match="alice would hold 1 VMs > 0"):
            cluster.submit(request("alice"), T0)
        assert snapshot(path) == before and store.next_lease_id() == 1


def test_a_group_quota_counts_every_member_and_finished_leases_count_for_nothing(path):
    with Store.open(path) as store:
        store.set_quota("@lab", Quota(vcpus=10), at=T0)
    first = submit(path, request("alice", nodes=2))          # lab: 4
    submit(path, request("bob", nodes=3))                     # lab: 10
    submit(path, request("carol", nodes=5))                   # not in lab
    with pytest.raises(QuotaExceeded, match="^group @lab would hold 12 vCPUs > 10$"):
        submit(path, request("alice"))
    with Store.open(path) as store, store.transaction():
        cluster = Cluster(store, Config(), groups_of=groups_of)
        cluster.cancel(first, T0)
        cluster.save(T0)
    submit(path, request("alice", nodes=2))                   # lab: 10 again
    with Store.open(path) as store:
        assert [row["holding"] for row in list_quotas(store, groups_of)] == [{"vcpus": 10, "memory_mib": 5120, "vms": 5}]


def test_max_duration_and_max_ahead_at_submit(path):
    with Store.open(path) as store:
        store.set_quota("bob", Quota(max_duration=timedelta(hours=24), max_ahead=timedelta(days=14)), at=T0)
    submit(path, request("bob", hours=24, start=T0 + timedelta(days=14)))
    with pytest.raises(QuotaExceeded, match="^lease of 30h > bob's max duration 24h$"):
        submit(path, request("bob", hours=30))
    with pytest.raises(QuotaExceeded, match=r"^start 2026-01-19T13:00:00Z is 18d ahead > bob's max ahead 14d$"):
        submit(path, request("bob", start=T0 + timedelta(days=18)))


def test_an_extension_is_checked_and_a_refused_one_changes_nothing(path):
    lease_id = submit(path, request("alice", hours=20))
    with Store.open(path) as store:
        store.set_quota("@lab", Quota(max_duration=timedelta(hours=24)), at=T0)
    extend(path, lease_id, timedelta(hours=4))   # 24h: allowed
    before = snapshot(path)
    with pytest.raises(QuotaExceeded, match="^lease of 25h > group @lab's max duration 24h$"):
        extend(path, lease_id, timedelta(hours=1))
    assert snapshot(path) == before
    with Store.open(path) as store:
        assert store.lease(lease_id).request.duration == timedelta(hours=24)


def test_an_unknown_or_finished_lease_is_not_a_quota_question(path):
    lease_id = submit(path, request("alice"))
    with Store.open(path) as store:
        store.set_quota("alice", Quota(max_duration=timedelta(hours=1)), at=T0)
    with pytest.raises(InvalidRequest, match="no lease with id 9"):
        extend(path, 9, timedelta(hours=1))
    with Store.open(path) as store, store.transaction():
        cluster = Cluster(store, Config(), groups_of=groups_of)
        cluster.cancel(lease_id, T0)
        cluster.save(T0)
    with pytest.raises(Exception) as exc:
        extend(path, lease_id, timedelta(hours=1))
    assert not isinstance(exc.value, QuotaExceeded)


def test_without_quotas_nothing_is_asked_of_the_group_resolver(path):
    def no_calls(user):
        raise AssertionError("asked")

    with Store.open(path) as store, store.transaction():
        cluster = Cluster(store, Config(), groups_of=no_calls)
        assert cluster.submit(request("alice"), T0).state is not LeaseState.REJECTED


def test_the_default_resolver_is_the_systems_groups(path):
    with Store.open(path) as store:
        assert Cluster(store, Config()).groups_of is unix_groups
    assert "root" in unix_groups("root")
    assert unix_groups("no-such-user-here") == frozenset() and unix_groups("") == frozenset()


# -- the shared functions ----------------------------------------------------------------------------------------
def test_set_changes_only_the_limits_given_and_none_removes_one(path):
    with Store.open(path) as store:
        answer = set_quota(store, "alice", {"vcpus": 32, "max_duration": timedelta(hours=24)}, T0)
        assert answer == {"subject": "alice", "set_at": "2026-01-01T13:00:00Z",
                          "limits": {"vcpus": 32, "memory_mib": None, "vms": None, "max_duration_s": 86400.0,
                                     "max_ahead_s": None}}
        set_quota(store, "alice", {"vms": 4, "vcpus": None}, T0 + timedelta(minutes=1))
        assert store.quota("alice") == Quota(vms=4, max_duration=timedelta(hours=24))
        for bad in ({}, {"cpus": 1}):
            with pytest.raises(InvalidRequest):
                set_quota(store, "alice", bad, T0)
        with pytest.raises(InvalidRequest):
            set_quota(store, "al ice", {"vms": 1}, T0)
        with pytest.raises(InvalidRequest):
            set_quota(store, "alice", {"vms": -1}, T0)
        assert store.quota("alice") == Quota(vms=4, max_duration=timedelta(hours=24))
        remove_quota(store, "alice")
        with pytest.raises(StoreError, match="no quota for 'alice'"):
            remove_quota(store, "alice")


def test_show_gives_each_applicable_quota_with_what_is_held_and_left(path):
    submit(path, request("alice", nodes=2, memory=1000))
    submit(path, request("bob", nodes=1, memory=3000))
    with Store.open(path) as store:
        set_quota(store, "alice", {"vcpus": 6, "vms": 1}, T0)       # over on VMs: 2 > 1
        set_quota(store, "@lab", {"memory_mib": 10000}, T0)
        set_quota(store, "@ops", {"vcpus": 1}, T0)                   # bob's, not alice's
        shown = show_quota(store, "alice", groups_of)
        assert shown["user"] == "alice" and shown["groups"] == ["lab"]
        assert shown["holding"] == {"vcpus": 4, "memory_mib": 2000, "vms": 2}
        assert [(q["subject"], q["left"], q["over"]) for q in shown["quotas"]] == [
            ("alice", {"vcpus": 2, "memory_mib": None, "vms": 0}, ["vms"]),
            ("@lab", {"vcpus": None, "memory_mib": 5000, "vms": None}, []),
        ]
        assert shown["quotas"][1]["holding"] == {"vcpus": 6, "memory_mib": 5000, "vms": 3}
        assert show_quota(store, "carol", groups_of)["quotas"] == []
        with pytest.raises(InvalidRequest):
            show_quota(store, "@lab", groups_of)
