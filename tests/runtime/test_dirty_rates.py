"""Measured dirty rates: the daemon's sampler on the simulated driver, the store keeping the last one, and
the planner using it (with the margin) in place of the declared rate when it plans a live migration."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from drivers.base import DiskSpec, VMSpec
from drivers.clock import SimulatedClock
from drivers.inventory import HostConfig
from drivers.simulated import SimulatedDriver, SimulatedDriverConfig
from orchestrator.config import config_from_dict
from orchestrator.model.resources import Resources
from orchestrator.planning.precopy import predict_precopy
from orchestrator.runtime.daemon import Daemon
from orchestrator.runtime.dirty_rates import DirtyRateSampler, RunningVM
from orchestrator.state.cluster import Cluster
from orchestrator.state.store import Store, StoreError
from tests.support.scenario import ar, at, be
from tests.support.times import T0

S = timedelta(seconds=1)


def _driver(dirty_factor: float = 1.0) -> SimulatedDriver:
    driver = SimulatedDriver.for_hosts({"h1": (4, 4096)}, SimulatedClock(T0),
                                       config=SimulatedDriverConfig(dirty_factor=dirty_factor),
                                       migration_model=predict_precopy)
    for name, rate in (("lw-1-0", 2.0), ("lw-2-0", 0.5)):
        driver.start(VMSpec(name=name, vcpus=1, memory_mib=512, dirty_rate_mib_s=rate), "h1")
    return driver


def test_a_measurement_is_read_once_its_sample_is_over_and_repeated_only_after_the_interval():
    driver = _driver(dirty_factor=1.5)
    sampler = DirtyRateSampler(driver, interval=timedelta(minutes=5), sample=5 * S)
    vms = [RunningVM(1, 0, "lw-1-0"), RunningVM(2, 0, "lw-2-0")]
    recorded: list[tuple[str, object, float]] = []

    def record(vm, at_, rate):
        recorded.append((vm.name, at_, rate))

    sampler.step(T0, vms, record)                      # both start
    sampler.step(T0 + 4 * S, vms, record)              # still sampling
    assert recorded == []
    sampler.step(T0 + 5 * S, vms, record)              # done: the guests' rates as the driver sees them
    assert recorded == [("lw-1-0", T0 + 5 * S, 3.0), ("lw-2-0", T0 + 5 * S, 0.75)]
    for seconds in (10, 60, 299):                       # nothing new within the interval
        sampler.step(T0 + seconds * S, vms, record)
    assert len(recorded) == 2
    sampler.step(T0 + 300 * S, vms, record)
    sampler.step(T0 + 305 * S, vms, record)
    assert [r[1] for r in recorded[2:]] == [T0 + 305 * S] * 2


def test_a_vm_that_stops_running_meanwhile_gives_no_answer_and_a_failed_start_is_not_retried_at_once():
    driver = _driver()
    sampler = DirtyRateSampler(driver, interval=timedelta(minutes=5), sample=5 * S)
    recorded = []
    sampler.step(T0, [RunningVM(1, 0, "lw-1-0"), RunningVM(3, 0, "lw-3-0")],   # lw-3-0 does not exist
                 lambda vm, at_, rate: recorded.append(vm.name))
    sampler.step(T0 + 10 * S, [RunningVM(3, 0, "lw-3-0")], lambda vm, at_, rate: recorded.append(vm.name))
    assert recorded == []


def test_an_interval_of_zero_turns_it_off():
    driver = _driver()
    sampler = DirtyRateSampler(driver, interval=timedelta(0), sample=5 * S)
    recorded = []
    for seconds in (0, 5, 10):
        sampler.step(T0 + seconds * S, [RunningVM(1, 0, "lw-1-0")], lambda *a: recorded.append(a))
    assert recorded == [] and not sampler.enabled


def _one_lease(store: Store) -> None:
    """One host and lease 1 (one VM) in `store`."""
    store.add_host(HostConfig(name="h1", uri="sim://", domain_type="qemu"), 4, 4096)
    with store.transaction():
        cluster = Cluster(store, config_from_dict({}))
        cluster.submit(be("13:00", 60, memory=512), T0)
        cluster.save(T0)


def test_the_store_keeps_the_last_rate_per_vm_and_refuses_nonsense(tmp_path):
    with Store.open(tmp_path / "s.sqlite") as store:
        _one_lease(store)
        store.record_dirty_rate(1, 0, T0, 4.0)
        store.record_dirty_rate(1, 0, T0 + S, 6.5)
        assert store.dirty_rates(1) == {0: (T0 + S, 6.5)}
        assert store.lease(1).measured_dirty_rates == {0: 6.5}
        for bad in (-1.0, float("nan"), float("inf")):
            with pytest.raises(StoreError, match="dirty rate"):
                store.record_dirty_rate(1, 0, T0, bad)
        # the sampler's batch: all of it, or none when one value is nonsense
        with pytest.raises(StoreError, match="disk allocation of lease 1 VM 0"):
            store.record_measurements([(1, 0, T0 + 2 * S, 9.0)], [(1, 0, T0 + 2 * S, float("nan"))])
        assert store.dirty_rates(1) == {0: (T0 + S, 6.5)}
        store.record_measurements([(1, 0, T0 + 2 * S, 9.0)], [(1, 0, T0 + 2 * S, 64.0)])
        assert store.dirty_rates(1) == {0: (T0 + 2 * S, 9.0)} and store.lease(1).measured_dirty_rates == {0: 9.0}


def test_the_daemon_measures_and_the_planner_plans_the_evacuation_with_the_measured_rate(tmp_path):
    """The lease declares 1 MiB/s; its guest really dirties 2 MiB/s (the simulated driver's factor). Once the
    daemon has measured it, the evacuation is planned at 2 x 1.25 MiB/s, not the factor-scaled declaration."""
    small = ("host5", Resources.of(1, 512))
    config = config_from_dict({"scheduling": {"live_migration_dirty_factor": 1.0}})
    with Store.open(tmp_path / "s.sqlite") as store:
        for name, cap in [(f"host{i}", Resources.of(1, 1024)) for i in range(1, 5)] + [small]:
            store.add_host(HostConfig(name=name, uri="sim://", domain_type="qemu"), int(cap.cpu // 100), int(cap.memory))
        driver = SimulatedDriver.for_hosts({h.name: (h.vcpus, h.memory_mib) for h in store.hosts()},
                                           SimulatedClock(T0), config=SimulatedDriverConfig(dirty_factor=2.0),
                                           migration_model=predict_precopy)
        with store.transaction():
            cluster = Cluster(store, config)
            cluster.submit(dataclasses.replace(be("13:00", 60, memory=512), dirty_rate_mib_s=1.0), T0)
            cluster.save(T0)
        Daemon(store, config, driver, SimulatedClock(T0)).run(until=at("13:15"))
        assert store.dirty_rates(1)[0][1] == pytest.approx(2.0)
        with store.transaction():
            cluster = Cluster(store, config)
            cluster.submit(ar("13:15", "13:30", 30, nodes=4), at("13:15"))
            cluster.save(at("13:15"))
        [migration] = [r for vm in store.lease(1).reservations for r in vm.all_parts()
                       if r.kind.value == "live-migrate"]
        predicted = migration.extra["predicted"]["0"]
    expected = predict_precopy(512, 12.5, 2.5, 300.0)
    assert predicted["seconds"] == pytest.approx(expected.total_seconds)
    assert predicted["passes"] == expected.passes
    assert expected.total_seconds != pytest.approx(predict_precopy(512, 12.5, 1.0, 300.0).total_seconds)


def test_a_vm_due_has_its_overlays_allocation_read_and_the_store_gives_it_to_the_lease(tmp_path):
    """Hosts keeping VMs' overlays on their own storage: a VM with a disk has what its overlay holds read with
    its dirty rate (one without a disk: nothing); the store keeps the last one per VM, and refuses nonsense."""
    config = SimulatedDriverConfig(local_vm_disks=True, overlay_mib=96.0)
    driver = SimulatedDriver.for_hosts({"h1": (4, 4096)}, SimulatedClock(T0), config=config,
                                       migration_model=predict_precopy)
    driver.start(VMSpec(name="lw-1-0", vcpus=1, memory_mib=512, disk=DiskSpec(base="/img/base.qcow2")), "h1")
    driver.start(VMSpec(name="lw-2-0", vcpus=1, memory_mib=512), "h1")
    sampler = DirtyRateSampler(driver, interval=timedelta(minutes=5), sample=5 * S)
    disks: list[tuple[str, float]] = []
    sampler.step(T0, [RunningVM(1, 0, "lw-1-0"), RunningVM(2, 0, "lw-2-0")], lambda *a: None,
                 lambda vm, at_, mib: disks.append((vm.name, mib)))
    assert disks == [("lw-1-0", 96.0)]
    # a VM not running yet when it is first due is read again at the next step, not an interval later
    sampler.step(T0 + S, [RunningVM(1, 0, "lw-1-0"), RunningVM(3, 0, "lw-3-0")], lambda *a: None,
                 lambda vm, at_, mib: disks.append((vm.name, mib)))
    driver.start(VMSpec(name="lw-3-0", vcpus=1, memory_mib=512, disk=DiskSpec(base="/img/base.qcow2")), "h1")
    sampler.step(T0 + 2 * S, [RunningVM(1, 0, "lw-1-0"), RunningVM(3, 0, "lw-3-0")], lambda *a: None,
                 lambda vm, at_, mib: disks.append((vm.name, mib)))
    assert disks == [("lw-1-0", 96.0), ("lw-3-0", 96.0)]
    with Store.open(tmp_path / "s.sqlite") as store:
        _one_lease(store)
        store.record_disk_allocation(1, 0, T0, 96.0)
        store.record_disk_allocation(1, 0, T0 + S, 130.5)
        assert store.lease(1).measured_disk_mib == {0: 130.5}
        for bad in (-1.0, float("nan")):
            with pytest.raises(StoreError, match="disk allocation"):
                store.record_disk_allocation(1, 0, T0, bad)


def test_the_daemon_writes_a_steps_measurements_in_one_transaction(tmp_path):
    """Each write takes the scheduler's lock and a flush to disk: the rates read in one step are written
    together (four VMs measured at once: one transaction holds all four)."""
    config = config_from_dict({"scheduling": {"live_migration_dirty_factor": 1.0}})
    with Store.open(tmp_path / "s.sqlite") as store:
        for i in range(1, 5):
            store.add_host(HostConfig(name=f"host{i}", uri="sim://", domain_type="qemu"), 1, 1024)
        driver = SimulatedDriver.for_hosts({h.name: (h.vcpus, h.memory_mib) for h in store.hosts()},
                                           SimulatedClock(T0), migration_model=predict_precopy)
        with store.transaction():
            cluster = Cluster(store, config)
            for _ in range(4):
                cluster.submit(dataclasses.replace(be("13:00", 60, memory=512), dirty_rate_mib_s=1.0), T0)
            cluster.save(T0)
        statements: list[str] = []
        store._conn.set_trace_callback(statements.append)
        Daemon(store, config, driver, SimulatedClock(T0)).run(until=at("13:15"))
    writes_per_transaction, inserted = [], 0
    for sql in statements:
        if sql.startswith("BEGIN"):
            inserted = 0
        elif sql.startswith("INSERT INTO dirty_rates"):
            inserted += 1
        elif sql == "COMMIT" and inserted:
            writes_per_transaction.append(inserted)
    assert writes_per_transaction and all(n == 4 for n in writes_per_transaction), writes_per_transaction
