"""The daemon learning the model's rates from what it enacts (orchestrator.runtime.learner), keeping them
in the store (orchestrator.state.learned) and planning with them: on the simulated driver, whose true
rates are not the configured ones."""

from __future__ import annotations

from datetime import timedelta

import pytest

from drivers.clock import SimulatedClock
from drivers.inventory import HostConfig
from drivers.simulated import SimulatedDriver, SimulatedDriverConfig
from orchestrator.analysis.report import build_report
from orchestrator.config import config_from_dict
from orchestrator.planning.precopy import predict_precopy
from orchestrator.runtime.daemon import Daemon
from orchestrator.state.calibrated import store_calibration
from orchestrator.state.cluster import Cluster
from orchestrator.state.learned import (
    FROM_HOST_CHECK,
    LEARNED_KEY,
    learned_estimates,
    learned_rates,
    record_observation,
    record_observations,
    seed,
)
from orchestrator.state.store import Store
from tests.support.scenario import T0, ar, at, be

ZERO = timedelta(0)


def _store(tmp_path, hosts=("host1",)):
    store = Store.open(tmp_path / "state.sqlite")
    for name in hosts:
        store.add_host(HostConfig(name=name, uri="sim://", domain_type="qemu"), 1, 1024)
    return store


def test_observations_are_kept_per_pair_and_read_back_as_the_planner_s_rates(tmp_path):
    store = _store(tmp_path, ("a", "b"))
    with store:
        record_observation(store, "live-migrate", "a>b", 12.5, 400.0, T0)
        record_observation(store, "suspend", "a", 32.0, 48.0, T0)
        stored = store.get_meta(LEARNED_KEY)
        rates = learned_rates(store)
    assert stored["live-migrate"]["a>b"]["rate_mib_s"] == pytest.approx(25.0)   # x2 at most per observation
    assert stored["live-migrate"]["a>b"]["source"] == "operations"
    assert rates.live("a", "b", 12.5) == pytest.approx(25.0) and rates.live("b", "a", 12.5) == 12.5
    assert rates.host("suspend", "a", 32.0) == pytest.approx(48.0)


def test_a_step_s_observations_are_folded_as_one_by_one_in_one_write(tmp_path):
    """The daemon folds a step's observations together: the same estimates as one at a time (a second
    observation of a key starts from the first's estimate, not from its prior), with the stored rates
    written once (on a big site they are thousands of entries, rewritten under the scheduler's lock)."""
    observations = [("suspend", "a", 32.0, 48.0, T0), ("suspend", "a", 32.0, 60.0, T0),
                    ("live-migrate", "a>b", 12.5, 400.0, T0), ("resume", "b", 32.0, 16.0, T0)]
    one_by_one, together = _store(tmp_path / "one", ("a", "b")), _store(tmp_path / "together", ("a", "b"))
    with one_by_one, together:
        singly = [record_observation(one_by_one, *o) for o in observations]
        before = together._conn.total_changes
        assert record_observations(together, observations) == singly
        assert together._conn.total_changes - before == 1   # (one row: the stored rates)
        assert together.get_meta(LEARNED_KEY) == one_by_one.get_meta(LEARNED_KEY)
        assert singly[1].samples == 2 and record_observations(together, []) == []
        with pytest.raises(ValueError, match="unknown kind"):
            record_observations(together, [("suspend", "a", 1.0, 1.0, T0), ("bogus", "a", 1.0, 1.0, T0)])
        assert together.get_meta(LEARNED_KEY) == one_by_one.get_meta(LEARNED_KEY)   # (nothing of it kept)


def test_a_calibration_takes_precedence_over_what_was_learned_of_its_kind(tmp_path):
    store = _store(tmp_path, ("a", "b"))
    with store:
        record_observation(store, "live-migrate", "a>b", 12.5, 20.0, T0)
        record_observation(store, "suspend", "a", 32.0, 40.0, T0)
        store_calibration(store, "migration", {"bandwidth_mib_s": 90.0, "overhead_s": 1.0})
        left = learned_estimates(store)
    assert "live-migrate" not in left and "suspend" in left


def test_a_host_check_seed_never_replaces_what_operations_taught(tmp_path):
    store = _store(tmp_path, ("a", "b"))
    with store:
        assert seed(store, "live-migrate", "a>b", 300.0, T0)
        assert store.get_meta(LEARNED_KEY)["live-migrate"]["a>b"]["source"] == FROM_HOST_CHECK
        record_observation(store, "live-migrate", "a>b", 12.5, 280.0, T0)   # from the seed, not the prior
        assert learned_rates(store).live("a", "b", 12.5) == pytest.approx(280.0)
        assert not seed(store, "live-migrate", "a>b", 10.0, T0)
        assert learned_rates(store).live("a", "b", 12.5) == pytest.approx(280.0)


def test_a_damaged_entry_is_learned_again_not_fatal(tmp_path):
    store = _store(tmp_path, ("a", "b"))
    with store:
        store.set_meta(LEARNED_KEY, {"live-migrate": {"a>b": {"rate_mib_s": -1}, "b>a": "x"}, "bogus": {}})
        assert learned_estimates(store) == {}
        record_observation(store, "live-migrate", "a>b", 12.5, 20.0, T0)
        assert learned_rates(store).live("a", "b", 12.5) == pytest.approx(20.0)


def test_the_evacuation_is_planned_at_the_pair_s_learned_rate_and_never_above_the_limit(tmp_path):
    """512 MiB from host1: at the configured 12.5 MiB/s 41 s; host1>host5 learned at 128 MiB/s, 4 s
    (the window keeps its 13:29:30 end); with a 64 MiB/s limit, 8 s, and the limit is the migration's."""
    from tests.planning.test_live_migration import _cluster, _run_cluster

    for limit, (start, seconds) in ((None, ("13:29:26", 4.0)), (64.0, ("13:29:22", 8.0))):
        (tmp_path / str(limit)).mkdir()
        store, cfg, _ = _cluster(tmp_path / str(limit), **({} if limit is None else
                                                            {"live_migration_bandwidth_limit": limit}))
        with store.transaction():
            store.set_meta(LEARNED_KEY, {"live-migrate": {"host1>host5": {"rate_mib_s": 128.0, "samples": 3}}})
        cluster = _run_cluster(store, cfg, None, at("13:20"))
        migration = cluster.lease(1).reservations[1].pre[0]
        assert migration.transfers == {0: ("host1", "host5")}
        assert (migration.start, migration.end) == (at(start), at("13:29:30"))
        assert migration.extra["predicted"]["0"]["seconds"] == pytest.approx(seconds)
        assert migration.extra["predicted"]["0"]["bandwidth_mib_s"] == (limit or 128.0)
        assert migration.extra["bandwidth_mib_s"] == limit
        store.close()


def test_the_daemon_learns_from_a_live_migration(tmp_path):
    """Predicted at 12.5 MiB/s (40.96 s), measured 5.12 s on the simulated 100 MiB/s link: the pair's rate
    doubles (the bound); the reverse pair is not learned."""
    from tests.planning.test_live_migration import _daemon_until_the_ar

    store, cfg, driver = _daemon_until_the_ar(tmp_path)
    with store:
        Daemon(store, cfg, driver, SimulatedClock(at("13:15"))).run(until_idle=True)
        rates = learned_rates(store)
    assert rates.live("host1", "host5", 12.5) == pytest.approx(25.0)
    assert rates.live("host5", "host1", 12.5) == 12.5


def test_the_error_falls_as_the_daemon_learns_saves_and_restores(tmp_path):
    """Planned at the configured 32 MiB/s, a 1024 MiB VM's save and restore take 4 s on the simulated host
    (256 MiB/s). An advance reservation every half hour suspends the best-effort lease and resumes it: the
    report's later half of saves and restores is predicted far better than the earlier half."""
    store = _store(tmp_path)
    cfg = config_from_dict({"scheduling": {"suspend_rate": 32, "resume_rate": 32, "migration": "no"}})
    truth = SimulatedDriverConfig(suspend_rate_mib_s=256, suspend_overhead=ZERO, resume_rate_mib_s=256,
                                  resume_overhead=ZERO)
    driver = SimulatedDriver.for_hosts({"host1": (1, 1024)}, SimulatedClock(T0), config=truth,
                                       migration_model=predict_precopy)
    with store:
        with store.transaction():
            cluster = Cluster(store, cfg)
            cluster.submit(be("13:00", 600), T0)
            cluster.save(T0)
        for k in range(6):
            submit = T0 + timedelta(minutes=30 * k + 10)
            Daemon(store, cfg, driver, SimulatedClock(submit)).run(until=submit)
            with store.transaction():
                cluster = Cluster(store, cfg)
                hhmm = (submit + timedelta(minutes=10)).strftime("%H:%M")
                cluster.submit(ar(submit.strftime("%H:%M"), hhmm, 5), submit)
                cluster.save(submit)
        Daemon(store, cfg, driver, SimulatedClock(submit)).run(until=T0 + timedelta(hours=4))
        report = build_report(store.events())
        rates = learned_rates(store)
    trend = {t.kind: t for t in report.error_trend}
    assert trend["suspend"].operations == 6 and trend["resume"].operations == 6
    for kind in ("suspend", "resume"):
        assert trend[kind].earlier_pct >= 100 and trend[kind].later_pct <= 10, trend[kind]
        assert rates.host(kind, "host1", 32) == pytest.approx(256, rel=0.05)


def test_the_daemon_gives_the_driver_the_configured_bandwidth_limit(tmp_path):
    """With `live_migration_bandwidth_limit = 50` the simulated 100 MiB/s link moves 512 MiB in 10.24 s,
    as planned: the model's rate and the real one agree."""
    from tests.planning.test_live_migration import _daemon_until_the_ar

    store, cfg, driver = _daemon_until_the_ar(tmp_path, scheduling={"live_migration_bandwidth_limit": 50})
    with store:
        Daemon(store, cfg, driver, SimulatedClock(at("13:15"))).run(until_idle=True)
        migrate = [e.detail for e in store.events(lease_id=1) if e.kind == "enacted"
                   and e.detail["operation"] == "migrate"][0]
    assert migrate["total_seconds"] == pytest.approx(512 / 50)
    assert migrate["predicted_seconds"] == pytest.approx(512 / 12.5)   # (nothing learned yet: the configured rate)
    assert migrate["model_bandwidth_mib_s"] == 12.5


def test_a_migration_done_while_no_daemon_ran_keeps_the_driver_s_measurements(tmp_path):
    """The evacuation's VM moved while no daemon watched (libvirtd went on after a crash): the daemon finds
    it on host5, logs it found done with the destination's measurements (5.12 s on the 100 MiB/s link), and
    `report` says its times were not measured instead of making them up."""
    from tests.planning.test_live_migration import _daemon_until_the_ar

    store, cfg, driver = _daemon_until_the_ar(tmp_path)
    moved = driver.migrate("lw-1-0", "host5")
    with store:
        Daemon(store, cfg, driver, SimulatedClock(at("13:15"))).run(until_idle=True)
        skipped = [e.detail for e in store.events(lease_id=1) if e.kind == "enactment-skipped"]
        report = build_report(store.events(lease_id=1))
    assert len(skipped) == 1 and skipped[0]["operation"] == "migrate" and skipped[0]["measured"] is True
    assert skipped[0]["total_seconds"] == pytest.approx(moved.total_seconds) == pytest.approx(5.12)
    assert "enacted_start" not in skipped[0]
    row, = [r for r in report.rows if r.kind == "live-migrate"]
    assert row.found_done and row.measured_seconds == pytest.approx(5.12) and row.predicted_seconds == pytest.approx(40.96)
    assert row.enacted_start is None and row.enacted_end is None


def test_host_check_s_probe_rates_seed_the_pairs_not_yet_learned(tmp_path):
    """The "peer link" rows' measured rates become the pairs' first learned rates; a pair the daemon learned
    from its own migrations keeps its rate; rows without a measurement seed nothing."""
    from orchestrator.runtime.host_admin import seed_links

    store = _store(tmp_path, ("a", "b"))
    rows = [{"source": "a", "destination": "b", "check": "peer link", "status": "PASS", "detail": "", "link_mib_s": 300.0},
            {"source": "a", "destination": "b", "check": "cpu", "status": "PASS", "detail": ""},
            {"source": "b", "destination": "a", "check": "peer link", "status": "PASS", "detail": "", "link_mib_s": 250.0},
            {"source": "b", "destination": "a", "check": "migration port", "status": "FAIL", "detail": "port"}]
    with store:
        record_observation(store, "live-migrate", "b>a", 12.5, 20.0, T0)
        assert seed_links(store, rows, T0) == {"a>b": 300.0}
        rates = learned_rates(store)
    assert rates.live("a", "b", 12.5) == 300.0 and rates.live("b", "a", 12.5) == pytest.approx(20.0)
