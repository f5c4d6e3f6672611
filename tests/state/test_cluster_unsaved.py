"""`Cluster.unsaved` against the plain oracle: the cluster kept in memory by the server writes back only the
leases the scheduler says it changed, so every lease whose saved signature differs from its state in
memory must be among them; and `Cluster.moved` (a submission's answer) names exactly the leases whose
state or last VM reservation the submission changed, as a full before/after comparison finds them."""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drivers.inventory import HostConfig
from orchestrator.config import Config, config_from_dict
from orchestrator.model.errors import InvalidRequest
from orchestrator.model.lease import LeaseRequest, LeaseType
from orchestrator.model.resources import Resources
from orchestrator.state.cluster import Cluster, _signature
from orchestrator.state.store import Store
from tests.support.times import T0

submit_op = st.tuples(st.just("submit"), st.sampled_from(["be", "be", "ar", "im"]), st.integers(1, 3),
                      st.sampled_from([2, 4]), st.integers(5, 90), st.integers(0, 60),
                      st.one_of(st.none(), st.integers(1, 90)))
other_op = st.one_of(st.tuples(st.just("advance"), st.integers(1, 45)),
                     st.tuples(st.just("cancel"), st.integers(0, 30)),
                     st.tuples(st.just("extend"), st.integers(0, 30), st.integers(1, 30)))
operations = st.lists(st.one_of(submit_op, submit_op, other_op), min_size=5, max_size=40)


def _request(kind: str, nodes: int, cpus: int, minutes: int, ahead: int, real: int | None, now) -> LeaseRequest:
    ltype = {"be": LeaseType.BEST_EFFORT, "ar": LeaseType.ADVANCE_RESERVATION, "im": LeaseType.IMMEDIATE}[kind]
    return LeaseRequest(type=ltype, nodes=(Resources.of(cpus, 1024),) * nodes, duration=timedelta(minutes=minutes),
                        submit_time=now, start=now + timedelta(minutes=ahead + 1) if kind == "ar" else None,
                        real_duration=timedelta(minutes=real) if real and kind == "be" else None, user="alice")


def _shown(lease):
    vm = lease.last_vm
    return lease.state, None if vm is None else (vm.id, vm.start, vm.end, vm.is_suspending)


def _check_unsaved(cluster: Cluster) -> None:
    unsaved = set(cluster.unsaved())
    for lease_id in cluster._live:
        lease = cluster.scheduler.leases[lease_id]
        if cluster._written.get(lease_id) != _signature(lease):
            assert lease_id in unsaved, f"lease {lease_id} changed but is not among the unsaved leases"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations, suspension=st.sampled_from(["all", "none"]))
def test_every_changed_lease_is_unsaved_and_a_submission_names_what_it_moved(tmp_path: Path, ops, suspension):
    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "state.sqlite"   # (hypothesis reuses tmp_path)
    with Store.open(path) as store:
        for i in (1, 2):   # (small: leases queue, are preempted and wait, as on a busy site)
            store.add_host(HostConfig(name=f"h{i}", uri="sim://", domain_type="qemu"), 4, 8192)
        config = config_from_dict({"scheduling": {"suspension": suspension, "migration": "yes"}}) \
            if suspension == "all" else Config()
        with store.transaction():
            cluster = Cluster(store, config, live_only=True)
        now = T0
        for op in ops:
            with store.transaction():
                if op[0] == "submit":
                    before = {i: _shown(cluster.scheduler.leases[i]) for i in cluster._live}
                    try:
                        lease = cluster.submit(_request(*op[1:], now), now)
                    except InvalidRequest:
                        continue
                    expected = sorted(i for i, shown in before.items()
                                      if _shown(cluster.scheduler.leases[i]) != shown)
                    assert [entry["id"] for entry in cluster.moved(lease.id)] == expected
                elif op[0] == "advance":
                    now += timedelta(minutes=op[1])
                    while cluster.scheduler.process_events(now):
                        cluster.scheduler.schedule(now)
                    cluster.scheduler.schedule(now)
                else:
                    live = sorted(cluster._live)
                    if not live:
                        continue
                    lease_id = live[op[1] % len(live)]
                    try:
                        if op[0] == "cancel":
                            cluster.cancel(lease_id, now)
                        else:
                            cluster.extend(lease_id, timedelta(minutes=op[2]), now)
                    except InvalidRequest:
                        pass
                _check_unsaved(cluster)
                cluster.save(now)
        # what was written is what a cluster read back from the store holds
        with store.transaction():
            fresh = Cluster(store, config, live_only=True)
        assert {i: _signature(l) for i, l in fresh.scheduler.leases.items()} == \
               {i: _signature(cluster.scheduler.leases[i]) for i in fresh.scheduler.leases}
        # and the scheduler's own values (written only when they change)
        assert fresh.scheduler.vm.future_leases == cluster.scheduler.vm.future_leases
        assert fresh.scheduler.counters == cluster.scheduler.counters


def test_an_extended_queued_lease_is_unsaved(tmp_path: Path):
    """The one change to a lease with neither a reservation moved nor a state changed: its request."""
    with Store.open(tmp_path / "state.sqlite") as store:
        store.add_host(HostConfig(name="h1", uri="sim://", domain_type="qemu"), 4, 8192)
        with store.transaction():
            cluster = Cluster(store, Config(), live_only=True)
        for _ in range(4):   # (one runs, one is planned after it, the others wait in the queue)
            with store.transaction():
                lease = cluster.submit(_request("be", 1, 4, 60, 0, None, T0), T0)
                cluster.save(T0)
        assert lease.state.value == "queued"
        with store.transaction():
            cluster.extend(lease.id, timedelta(minutes=5), T0)
            assert cluster.unsaved() == [lease.id]
            cluster.save(T0)
        assert store.lease(lease.id).request.duration == timedelta(minutes=65)
