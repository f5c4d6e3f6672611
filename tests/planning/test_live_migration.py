"""Live migration as a planning move (issue #7) on the simulated clock: evacuation instead of suspension,
its fallbacks, serialisation, early ends, failures, and the daemon enacting it on the simulated driver.

Numbers used throughout: a 512 MiB VM moves in 512 / 12.5 = 40.96 s at the default bandwidth, planned
as 41 s; the default margin is 30 s, so an evacuation for a 13:30 AR runs 13:28:49-13:29:30.
"""

from __future__ import annotations

import dataclasses

import pytest

from drivers.clock import SimulatedClock
from drivers.inventory import HostConfig
from drivers.simulated import SimulatedDriver, SimulatedDriverConfig
from orchestrator.config import config_from_dict
from orchestrator.model.resources import Resources
from orchestrator.model.timeutil import iso
from orchestrator.planning.enactment import EnactmentError, NullEnactor
from orchestrator.planning.lease_scheduler import LeaseScheduler
from orchestrator.planning.slottable.table import SlotTable
from orchestrator.planning.precopy import predict_precopy
from orchestrator.runtime.daemon import Daemon
from orchestrator.runtime.intents import IntentCollector
from orchestrator.state.cluster import Cluster
from orchestrator.state.store import Store
from tests.support.scenario import T0, ar, at, be, lease, plan, simulate, site

H1, H5 = "host1", "host5"
SMALL = ("host5", Resources.of(1, 512))   # holds a 512 MiB best-effort VM, not a 1024 MiB AR node


def with_small_host(n: int = 4):
    return site(n) + [SMALL]


def dirty(request, rate: float):
    return dataclasses.replace(request, dirty_rate_mib_s=rate)


def test_migrate_first_finishes_the_best_effort_lease_earlier_than_suspend_only():
    requests = [be("13:00", 60, memory=512), ar("13:15", "13:30", 30, nodes=4)]
    live = simulate(with_small_host(), requests, preemption_mode="migrate-first")
    assert plan(live, 1) == [
        ("vm", "13:00:00", "13:29:30", [H1]),
        ("live-migrate", "13:28:49", "13:29:30", [H1, H5]),
        ("vm", "13:29:30", "14:00:00", [H5]),
        ("shutdown", "14:00:00", "14:00:00", [H5]),
    ]
    assert lease(live, 1)["end"] == "2026-01-01T14:00:00Z"
    assert lease(live, 2)["start"] == "2026-01-01T13:30:00Z"
    assert {k: live.metrics[k] for k in ("migrations", "suspensions", "requeues")} == \
        {"migrations": 1, "suspensions": 0, "requeues": 0}

    cold = simulate(with_small_host(), requests, preemption_mode="suspend-only")
    assert plan(cold, 1)[:2] == [("vm", "13:00:00", "13:29:44", [H1]), ("suspend", "13:29:44", "13:30:00", [H1])]
    assert lease(cold, 1)["end"] == "2026-01-01T14:01:13Z"   # + 16 s suspend, 41 s transfer, 16 s resume
    assert cold.metrics["migrations"] == 0 and cold.metrics["suspensions"] == 1
    assert lease(live, 1)["end"] < lease(cold, 1)["end"]


def test_predicted_downtime_is_summed_in_the_metrics():
    """1 MiB/s dirtying: a second pass of 3.28 s, then 262 ms of stop-and-copy (under 300 ms)."""
    requests = [dirty(be("13:00", 60, memory=512), 1.0), ar("13:15", "13:30", 30, nodes=4)]
    result = simulate(with_small_host(), requests)
    expected = predict_precopy(512, 12.5, 1.0, 300.0)
    assert expected.passes == 3 and 0 < expected.downtime_ms < 300
    assert result.metrics["predicted_downtime_ms_total"] == pytest.approx(expected.downtime_ms)
    # 40.96 + 3.2768 + 0.262 s = 44.5 s, planned as 45 s
    assert plan(result, 1)[1] == ("live-migrate", "13:28:45", "13:29:30", [H1, H5])
    assert result.to_json()["metrics"]["predicted_downtime_ms_total"] == pytest.approx(expected.downtime_ms)


def test_the_switch_over_cost_is_planned_and_the_job_gets_the_limit_left_after_it():
    """1 MiB/s dirtying with a 200 ms switch-over: the job's limit is 100 ms, so pre-copy makes a fourth
    pass (the third would leave 262 ms to send), and the predicted pause, switch-over included, keeps 300 ms."""
    requests = [dirty(be("13:00", 60, memory=512), 1.0), ar("13:15", "13:30", 30, nodes=4)]
    result = simulate(with_small_host(), requests, live_migration_switchover_ms=200.0)
    expected = predict_precopy(512, 12.5, 1.0, 100.0, switchover_ms=200.0)
    assert expected.passes == 4 and expected.downtime_ms <= 300
    assert result.metrics["predicted_downtime_ms_total"] == pytest.approx(expected.downtime_ms)


def test_a_switch_over_that_takes_the_whole_maximum_means_suspension():
    requests = [be("13:00", 60, memory=512), ar("13:15", "13:30", 30, nodes=4)]
    result = simulate(with_small_host(), requests, live_migration_switchover_ms=300.0)
    assert result.metrics["migrations"] == 0 and result.metrics["suspensions"] == 1


def test_a_migration_predicted_to_overrun_falls_back_to_suspension():
    """The AR arrives at 13:29: the 41 s migration would have had to start at 13:28:49."""
    result = simulate(with_small_host(), [be("13:00", 60, memory=512), ar("13:29", "13:30", 30, nodes=4)])
    assert plan(result, 1)[:2] == [("vm", "13:00:00", "13:29:44", [H1]), ("suspend", "13:29:44", "13:30:00", [H1])]
    assert result.metrics["migrations"] == 0 and result.metrics["suspensions"] == 1


def test_a_vm_that_never_converges_is_suspended():
    """Dirtying faster than the link: pre-copy never gets under the downtime limit."""
    requests = [dirty(be("13:00", 60, memory=512), 50.0), ar("13:15", "13:30", 30, nodes=4)]
    result = simulate(with_small_host(), requests)
    assert result.metrics["migrations"] == 0 and result.metrics["suspensions"] == 1


def test_no_room_elsewhere_means_suspension():
    """The reference scenario itself (no free host) is unchanged under migrate-first."""
    result = simulate(site(4), [be("13:00", 60), ar("13:15", "13:30", 30, nodes=4)], preemption_mode="migrate-first")
    assert plan(result, 1)[1] == ("suspend", "13:29:28", "13:30:00", [H1])
    assert lease(result, 1)["end"] == "2026-01-01T14:31:04Z"


def test_migrations_sharing_a_host_are_serialised():
    """Two best-effort VMs go to the same destination: the second migration ends where the first starts."""
    hosts = [(f"host{i}", Resources.of(1, 2048)) for i in range(1, 5)] + [("host5", Resources.of(2, 1024))]
    requests = [be("13:00", 60, memory=512), be("13:00", 60, memory=512), ar("13:15", "13:30", 30, nodes=4, memory=2048)]
    result = simulate(hosts, requests)
    migrations = sorted(next(r for r in plan(result, n) if r[0] == "live-migrate") for n in (1, 2))
    assert migrations == [("live-migrate", "13:28:08", "13:28:49", ["host2", H5]),
                          ("live-migrate", "13:28:49", "13:29:30", [H1, H5])]
    assert lease(result, 1)["end"] == lease(result, 2)["end"] == "2026-01-01T14:00:00Z"
    assert result.metrics["migrations"] == 2


def test_a_lease_that_ends_before_switching_over_drops_its_evacuation():
    requests = [be("13:00", 60, memory=512, real_minutes=20), ar("13:15", "13:30", 30, nodes=4)]
    result = simulate(with_small_host(), requests)
    assert plan(result, 1) == [("vm", "13:00:00", "13:20:00", [H1])]
    assert lease(result, 1)["state"] == "done" and result.metrics["migrations"] == 0


def test_a_lease_that_ends_after_switching_over_ends_on_its_new_host():
    requests = [be("13:00", 60, memory=512, real_minutes=40), ar("13:15", "13:30", 30, nodes=4)]
    result = simulate(with_small_host(), requests)
    assert plan(result, 1)[-1] == ("vm", "13:29:30", "13:40:00", [H5])
    assert lease(result, 1)["end"] == "2026-01-01T13:40:00Z" and result.metrics["migrations"] == 1


def test_a_second_reservation_on_the_new_host_suspends_the_continuation():
    """After moving to host5, a later AR wants host5 too: the lease is suspended there in time."""
    hosts = with_small_host()
    requests = [be("13:00", 60, memory=512), ar("13:15", "13:30", 30, nodes=4),
                ar("13:16", "13:45", 10, memory=512)]
    result = simulate(hosts, requests)
    kinds = [r[0] for r in plan(result, 1)]
    assert kinds[:4] == ["vm", "live-migrate", "vm", "suspend"]
    assert plan(result, 1)[3] == ("suspend", "13:44:44", "13:45:00", [H5])
    assert lease(result, 3)["start"] == "2026-01-01T13:45:00Z"
    assert lease(result, 1)["state"] == "done"


def _moves_later():
    """host2 (2 CPUs) has one CPU free from 13:00 until AR 1 takes all of it at 13:30; host1 is busy
    until 13:20 (AR 3), then free. Lease 4 (1 h) cannot run to its end anywhere at 13:00."""
    hosts = [("host1", Resources.of(1, 1024)), ("host2", Resources.of(2, 2048))]
    requests = [ar("13:00", "13:30", 60, cpus=2, memory=2048), ar("13:00", "13:00", 20),
                ar("13:00", "13:00", 20), be("13:00", 60)]
    return hosts, requests


def test_a_best_effort_lease_that_must_leave_its_host_is_planned_to_move_live():
    """Lease 4 starts at once on host2; with migrate-first it is planned from the start to move live
    to host1 (1024 MiB: 82 s) before AR 1 needs host2, instead of being suspended there."""
    hosts, requests = _moves_later()
    live = simulate(hosts, requests, preemption_mode="migrate-first")
    assert plan(live, 4) == [
        ("vm", "13:00:00", "13:29:30", ["host2"]),
        ("live-migrate", "13:28:08", "13:29:30", [H1, "host2"]),
        ("vm", "13:29:30", "14:00:00", [H1]),
        ("shutdown", "14:00:00", "14:00:00", [H1]),
    ]
    assert live.metrics["migrations"] == 1 and live.metrics["suspensions"] == 0
    cold = simulate(hosts, requests, preemption_mode="suspend-only")
    assert plan(cold, 4)[:3] == [("vm", "13:00:00", "13:29:28", ["host2"]),
                                 ("suspend", "13:29:28", "13:30:00", ["host2"]),
                                 ("migrate", "13:30:00", "13:31:22", [H1, "host2"])]
    assert lease(cold, 4)["end"] == "2026-01-01T14:02:26Z"


def test_a_planned_live_migration_whose_destination_is_taken_falls_back_to_the_suspension():
    """At 13:10 AR 5 wants host1 from 13:25, before lease 4 would have switched over to it: the live
    migration is given up and lease 4 is suspended on host2 by 13:30, as without it (not killed)."""
    hosts, requests = _moves_later()
    result = simulate(hosts, requests + [ar("13:10", "13:25", 30)], preemption_mode="migrate-first")
    assert plan(result, 5)[0] == ("vm", "13:25:00", "13:55:00", [H1])
    assert plan(result, 4)[:2] == [("vm", "13:00:00", "13:29:28", ["host2"]),
                                   ("suspend", "13:29:28", "13:30:00", ["host2"])]
    assert lease(result, 4)["end"] == "2026-01-01T14:26:04Z"
    assert result.metrics["requeues"] == 0 and result.metrics["migrations"] == 0


class FailingMigrations(NullEnactor):
    def live_migrate(self, lease, rr):
        raise EnactmentError("migrate lw-1-0 on host1: connection refused")


def _cluster(tmp_path, enactor=None, **scheduling):
    path = tmp_path / "state.sqlite"
    store = Store.open(path)
    for name, cap in with_small_host():
        store.add_host(HostConfig(name=name, uri="sim://", domain_type="qemu"), int(cap.cpu // 100), int(cap.memory))
    cfg = config_from_dict({"scheduling": {"suspend_rate": 32, "resume_rate": 32, **scheduling}})
    return store, cfg, enactor


def _step_until(store, cfg, enactor, until):
    """Step the scheduler through the store (rebuilt at every step, as the daemon does) up to `until`."""
    while True:
        with store.transaction():
            cluster = Cluster(store, cfg, enactor)
            nxt = cluster.scheduler.next_event_time()
            if nxt is None or nxt > until:
                return cluster
            cluster.scheduler.process_events(nxt)
            cluster.scheduler.schedule(nxt)
            cluster.save(nxt)


def _run_cluster(store, cfg, enactor, until):
    """The scenario's best-effort lease at 13:00, the AR submitted at 13:15, stepped to `until`."""
    with store.transaction():
        cluster = Cluster(store, cfg, enactor)
        cluster.submit(be("13:00", 60, memory=512), T0)
        cluster.save(T0)
    _step_until(store, cfg, enactor, at("13:15"))
    with store.transaction():
        cluster = Cluster(store, cfg, enactor)
        cluster.submit(ar("13:15", "13:30", 30, nodes=4), at("13:15"))
        cluster.save(at("13:15"))
    return _step_until(store, cfg, enactor, until)


def test_failed_migration_falls_back_to_suspension_before_the_reservation(tmp_path):
    store, cfg, enactor = _cluster(tmp_path, FailingMigrations())
    cluster = _run_cluster(store, cfg, enactor, at("14:40"))
    lease1 = cluster.lease(1)
    parts = [(r.kind.value, iso(r.start)[11:19], iso(r.end)[11:19], r.hosts)
             for vm in lease1.reservations for r in vm.all_parts()]
    # the migration failed at 13:28:49: the VM stays on host1 and is suspended there by 13:30
    assert ("suspend", "13:29:44", "13:30:00", [H1]) in parts
    assert not any(p[0] == "live-migrate" for p in parts)
    assert lease1.state.value == "done" and lease1.suspensions == 1
    assert cluster.scheduler.counters["failed_migrations"] == 1
    assert cluster.lease(2).start_time == at("13:30")
    store.close()


def test_failed_migration_without_suspension_requeues(tmp_path):
    store, cfg, enactor = _cluster(tmp_path, FailingMigrations(), suspension="none")
    cluster = _run_cluster(store, cfg, enactor, at("15:00"))
    lease1 = cluster.lease(1)
    assert lease1.requeues == 1 and lease1.state.value == "done"
    assert lease1.reservations[0].end == at("13:28:49")   # killed when the migration failed
    assert cluster.lease(2).start_time == at("13:30")
    store.close()


def test_an_evacuation_survives_a_round_trip_through_the_store(tmp_path):
    store, cfg, _ = _cluster(tmp_path)
    cluster = _run_cluster(store, cfg, None, at("13:20"))
    lease1 = cluster.lease(1)
    assert [vm.continues for vm in lease1.reservations] == [False, True]
    migration = lease1.reservations[1].pre[0]
    assert migration.kind.value == "live-migrate" and migration.transfers == {0: (H1, H5)}
    assert migration.extra["predicted"]["0"]["seconds"] == pytest.approx(40.96)
    assert migration.extra["needed_by"] == "2026-01-01T13:30:00Z"
    reloaded = store.lease(1)
    assert [(r.kind, r.start, r.end, r.continues, r.extra) for vm in reloaded.reservations for r in vm.all_parts()] \
        == [(r.kind, r.start, r.end, r.continues, r.extra) for vm in lease1.reservations for r in vm.all_parts()]
    store.close()


def _daemon_until_the_ar(tmp_path, scheduling=None, dirty_rate=None, **driver_config):
    """The scenario on the daemon and the simulated driver (with `driver_config`): the best-effort lease
    (dirtying at `dirty_rate`) started at 13:00, the daemon stepped to 13:15, the AR submitted then.
    Returns the open store."""
    store, cfg, _ = _cluster(tmp_path, **(scheduling or {}))
    driver = SimulatedDriver.for_hosts({h.name: (h.vcpus, h.memory_mib) for h in store.hosts()},
                                       SimulatedClock(T0), config=SimulatedDriverConfig(**driver_config),
                                       migration_model=predict_precopy)
    request = be("13:00", 60, memory=512)
    with store.transaction():
        cluster = Cluster(store, cfg)
        cluster.submit(request if dirty_rate is None else dirty(request, dirty_rate), T0)
        cluster.save(T0)
    Daemon(store, cfg, driver, SimulatedClock(T0)).run(until=at("13:15"))
    with store.transaction():
        cluster = Cluster(store, cfg)
        cluster.submit(ar("13:15", "13:30", 30, nodes=4), at("13:15"))
        cluster.save(at("13:15"))
    return store, cfg, driver


def test_the_daemon_enacts_an_evacuation_through_the_driver(tmp_path):
    """The daemon on the simulated driver: the VM is on host5 after the switch-over, the AR starts on
    time, the best-effort lease is never suspended, and the log keeps predicted next to measured."""
    store, cfg, driver = _daemon_until_the_ar(tmp_path)
    be_id, ar_id = 1, 2
    with store:
        assert driver.locate("lw-1-0") == H1
        Daemon(store, cfg, driver, SimulatedClock(at("13:15"))).run(until=at("13:29:30"))
        assert driver.locate("lw-1-0") == H5       # moved, still running
        assert {v.state for v in driver.list_vms(H5)} == {"running"}
        Daemon(store, cfg, driver, SimulatedClock(at("13:29:30"))).run(until_idle=True)
        first, second = store.lease(be_id), store.lease(ar_id)
        events = [e for e in store.events(lease_id=be_id) if e.kind == "enacted"]
    assert [e.detail["operation"] for e in events] == ["start", "migrate", "stop"]
    migrate = events[1].detail
    assert (migrate["src"], migrate["dst"], migrate["reservation_kind"]) == (H1, H5, "live-migrate")
    assert migrate["predicted_seconds"] == pytest.approx(40.96)
    assert migrate["total_seconds"] == pytest.approx(512 / 100)   # the simulated link: 100 MiB/s
    assert migrate["planned_start"] == "2026-01-01T13:28:49Z" and migrate["enacted_start"] == "2026-01-01T13:28:49Z"
    assert first.state.value == "done" and first.suspensions == 0 and first.migrations == 1
    assert first.end_time == at("14:00")
    assert second.start_time == at("13:30") and second.state.value == "done"
    assert all(driver.list_vms(h) == [] for h in driver.hosts())


def test_the_daemon_gives_the_driver_the_limit_left_after_the_switch_over(tmp_path):
    """With the planner's own parameters on the simulated driver, the enacted migration is the predicted
    one: four passes under the 100 ms job limit, not the three a 300 ms limit would give (262 ms + 200 ms)."""
    # (the daemon measures 1 MiB/s on the simulated driver too: planned with no margin, the same rate)
    store, cfg, driver = _daemon_until_the_ar(
        tmp_path, scheduling={"live_migration_switchover_ms": 200.0, "dirty_rate_margin": 1.0}, dirty_rate=1.0,
        migration_bandwidth_mib_s=12.5, migration_switchover_ms=200.0)
    with store:
        Daemon(store, cfg, driver, SimulatedClock(at("13:15"))).run(until_idle=True)
        migrate = [e.detail for e in store.events(lease_id=1) if e.kind == "enacted"
                   and e.detail["operation"] == "migrate"][0]
    expected = predict_precopy(512, 12.5, 1.0, 100.0, switchover_ms=200.0)
    assert migrate["iterations"] == expected.passes == 4
    assert migrate["downtime_ms"] == pytest.approx(migrate["predicted_downtime_ms"])
    assert migrate["downtime_ms"] <= 300
    assert migrate["max_downtime_ms"] == 300.0


def test_a_stored_calibration_times_the_planned_migrations(tmp_path):
    """What `leasewise calibrate migration` stored replaces the configured model parameters: at a
    calibrated 51.2 MiB/s plus 2 s of overhead, moving 512 MiB is planned as 12 s."""
    from orchestrator.state.calibrated import CALIBRATION_KEY

    store, cfg, _ = _cluster(tmp_path)
    store.set_meta(CALIBRATION_KEY, {"migration": {"bandwidth_mib_s": 51.2, "overhead_s": 2.0, "dirty_factor": None}})
    cluster = _run_cluster(store, cfg, None, at("13:20"))
    assert cluster.scheduler.config.live_bandwidth == 51.2
    migration = cluster.lease(1).reservations[1].pre[0]
    assert (migration.start, migration.end) == (at("13:29:18"), at("13:29:30"))
    store.close()


def test_a_migration_that_overruns_is_aborted_and_the_lease_suspended_in_time(tmp_path):
    """The link is slower than planned (1 MiB/s, not 12.5): at the reservation's abort_at (13:30 minus the
    16 s suspension minus 1 s) the daemon gives up, the VM is still on host1 and is suspended there by
    13:30; the AR starts on time."""
    store, cfg, driver = _daemon_until_the_ar(tmp_path, migration_bandwidth_mib_s=1.0)
    with store:
        migration = store.lease(1).reservations[1].pre[0]
        assert migration.extra["abort_at"] == "2026-01-01T13:29:43Z"
        Daemon(store, cfg, driver, SimulatedClock(at("13:15"))).run(until_idle=True)
        first, second = store.lease(1), store.lease(2)
        failed = [e.detail for e in store.events(lease_id=1) if e.kind == "enactment-failed"]
        counters = store.get_meta("counters")
    assert len(failed) == 1 and failed[0]["operation"] == "migrate" and failed[0]["outcome"] == "aborted"
    assert failed[0]["reservation_kind"] == "live-migrate"
    suspend = next(r for vm in first.reservations for r in vm.post if r.kind.value == "suspend")
    assert (suspend.start, suspend.end, suspend.hosts) == (at("13:29:44"), at("13:30"), [H1])
    assert first.state.value == "done" and first.suspensions == 1 and counters["failed_migrations"] == 1
    assert second.start_time == at("13:30") and second.state.value == "done"


def test_a_lease_cancelled_before_its_switch_over_is_killed_where_it_runs():
    """Cancelled at 13:20, before its planned move to host5: its VM still runs on host1, so the kill is an
    operation on host1 as well as host5. The daemon's runner orders operations by those hosts: a start on
    host1, in the room the cancellation gave back, waits for the kill there instead of finding host1 full."""
    config = config_from_dict({"scheduling": {"preemption_mode": "migrate-first"}}).scheduling
    collector = IntentCollector()
    scheduler = LeaseScheduler(SlotTable(dict(with_small_host())), config, collector)
    for request, now in ((be("13:00", 60, memory=512), at("13:00")), (ar("13:15", "13:30", 30, nodes=4), at("13:15"))):
        scheduler.submit(request, now)
        scheduler.schedule(now)
        scheduler.process_events(now)
    assert [rr.kind.value for vm in scheduler.lease(1).reservations for rr in vm.all_parts()] == \
        ["vm", "live-migrate", "vm", "shutdown"]
    collector.take()
    scheduler.cancel(1, at("13:20"))
    [kill] = collector.take()
    assert kill.operation.value == "kill_vms" and kill.hosts == {H1, H5}
