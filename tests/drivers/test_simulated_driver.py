"""The simulated driver: costs in simulated time, reproducible failures, and the same rules as libvirt."""

import threading
import time
from datetime import datetime, timedelta

import pytest

from drivers.base import PAIR_CHECKS, DiskSpec, MigrationProgress, VMSpec
from drivers.clock import RealClock, SimulatedClock
from drivers.errors import (
    HostUnreachable,
    MigrationFailed,
    OperationFailed,
    UnknownHost,
    VMAlreadyExists,
)
from drivers.inventory import HostConfig
from drivers.simulated import SimulatedDriver, SimulatedDriverConfig
from orchestrator.model.timeutil import UTC
from orchestrator.planning.precopy import predict_precopy

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SHARED = "/srv/shared"


def make(config: SimulatedDriverConfig | None = None, **hosts: tuple[int, int]) -> tuple[SimulatedDriver, SimulatedClock]:
    clock = SimulatedClock(T0)
    capacities = hosts or {"a": (8, 8192), "b": (8, 8192)}
    return SimulatedDriver(capacities, clock, config or SimulatedDriverConfig(), migration_model=predict_precopy), clock


def elapsed(clock: SimulatedClock) -> float:
    return (clock.now() - T0).total_seconds()


def test_operations_advance_the_clock_by_their_configured_cost():
    config = SimulatedDriverConfig(
        start_time=timedelta(seconds=7), stop_time=timedelta(seconds=3), suspend_rate_mib_s=256,
        suspend_overhead=timedelta(seconds=2), resume_rate_mib_s=128, resume_overhead=timedelta(seconds=1),
        transfer_rate_mib_s=64, transfer_overhead=timedelta(seconds=0.5),
    )
    driver, clock = make(config)
    spec = VMSpec("vm1", 2, 1024)
    assert driver.start(spec, "a").wall_seconds == 7 and elapsed(clock) == 7
    report = driver.suspend("vm1", "/local/vm1.save")
    assert report.wall_seconds == 2 + 1024 / 256 and report.bytes == 1024 * 2**20
    assert elapsed(clock) == 7 + 6
    moved = driver.move_state("/local/vm1.save", "a", "b")
    assert moved.wall_seconds == 0.5 + 1024 / 64 and moved.bytes == 1024 * 2**20
    assert elapsed(clock) == 13 + 16.5
    assert driver.resume("vm1", "/local/vm1.save", "b").wall_seconds == 1 + 1024 / 128
    assert elapsed(clock) == 29.5 + 9
    assert driver.stop("vm1").wall_seconds == 3
    assert clock.now() == T0 + timedelta(seconds=41.5)


def test_a_shutdown_is_cut_at_the_graceful_timeout_as_libvirts_destroy_cuts_it():
    driver, clock = make(SimulatedDriverConfig(stop_time=timedelta(seconds=20)))
    for name in ("slow", "killed", "patient", "off"):
        driver.start(VMSpec(name, 1, 256), "a")
    started = clock.now()
    assert driver.stop("slow", graceful_timeout=5).wall_seconds == 5         # destroyed after 5 s
    assert driver.stop("killed", graceful_timeout=0).wall_seconds == 0       # a kill
    assert driver.stop("patient", graceful_timeout=60).wall_seconds == 20    # shut down by itself
    driver.guest_poweroff("off")
    assert driver.stop("off", graceful_timeout=60).wall_seconds == 0         # nothing left to shut down
    assert clock.now() == started + timedelta(seconds=25)
    assert driver.list_vms("a") == []


def test_start_refuses_duplicates_and_hosts_without_room():
    driver, clock = make(a=(4, 4096), b=(4, 4096))
    driver.start(VMSpec("big", 3, 3000), "a")
    with pytest.raises(VMAlreadyExists):
        driver.start(VMSpec("big", 1, 10), "b")
    with pytest.raises(OperationFailed, match="free vCPUs"):
        driver.start(VMSpec("more", 2, 512), "a")
    with pytest.raises(OperationFailed, match="MiB free"):
        driver.start(VMSpec("more", 1, 2000), "a")
    with pytest.raises(UnknownHost):
        driver.start(VMSpec("more", 1, 10), "zzz")
    before = clock.now()
    with pytest.raises(OperationFailed):
        driver.start(VMSpec("more", 1, 2000), "a")
    assert clock.now() == before  # a refusal costs no time
    # A saved VM no longer holds CPU or memory.
    driver.suspend("big", "/x/big.save")
    driver.start(VMSpec("more", 4, 4096), "a")


def test_resume_elsewhere_needs_move_state_unless_on_shared_storage():
    driver, _ = make(SimulatedDriverConfig(shared_storage=(SHARED,)))
    driver.start(VMSpec("local", 1, 512), "a")
    driver.start(VMSpec("shared", 1, 512), "a")
    driver.suspend("local", "/var/save/local.save")
    driver.suspend("shared", f"{SHARED}/shared.save")

    assert not driver.state_file_exists("b", "/var/save/local.save")
    with pytest.raises(OperationFailed, match="no save image"):
        driver.resume("local", "/var/save/local.save", "b")
    assert driver.move_state("/var/save/local.save", "a", "b").bytes == 512 * 2**20
    driver.resume("local", "/var/save/local.save", "b")

    assert driver.state_file_exists("b", f"{SHARED}/shared.save")
    assert driver.move_state(f"{SHARED}/shared.save", "a", "b").bytes == 0
    driver.resume("shared", f"{SHARED}/shared.save", "b")
    assert {v.name: v.state for v in driver.list_vms("b")} == {"local": "running", "shared": "running"}
    assert driver.list_vms("a") == []


def test_suspended_vm_stays_listed_as_saved_until_resumed():
    driver, _ = make()
    driver.start(VMSpec("vm", 1, 256, lease_id="L7"), "a")
    driver.suspend("vm", "/s/vm.save")
    [info] = driver.list_vms("a")
    assert (info.state, info.lease_id) == ("saved", "L7")
    with pytest.raises(OperationFailed, match="not running"):
        driver.suspend("vm", "/s/vm.save")
    driver.resume("vm", "/s/vm.save", "a")
    assert driver.list_vms("a")[0].state == "running"
    with pytest.raises(VMAlreadyExists):
        driver.resume("vm", "/s/vm.save", "a")


def outcomes(seed: int) -> list[str]:
    driver, _ = make(SimulatedDriverConfig(failure_probability=0.5, seed=seed))
    results = []
    for i in range(30):
        try:
            driver.start(VMSpec(f"vm{i}", 1, 1), "a")
            results.append("ok")
            driver.stop(f"vm{i}")
        except OperationFailed:
            results.append("failed")
    return results


def test_failure_injection_is_reproducible_per_seed_and_per_instance():
    first, again, other = outcomes(42), outcomes(42), outcomes(7)
    assert first == again
    assert first != other
    assert 5 < first.count("failed") < 25


def test_injected_failure_changes_nothing_but_time():
    config = SimulatedDriverConfig(failure_probability=1.0, failing_operations=frozenset({"start"}),
                                    start_time=timedelta(seconds=4))
    driver, clock = make(config)
    with pytest.raises(OperationFailed, match="injected"):
        driver.start(VMSpec("vm", 1, 1), "a")
    assert driver.list_vms("a") == []
    assert elapsed(clock) == 4


def test_host_down_from_a_given_time():
    config = SimulatedDriverConfig(host_down_at={"b": T0 + timedelta(seconds=10)}, start_time=timedelta(seconds=6))
    driver, clock = make(config)
    driver.start(VMSpec("one", 1, 1), "b")
    assert driver.host_info("b").reachable
    driver.start(VMSpec("two", 1, 1), "a")   # the clock is now at 12 s
    assert not driver.host_info("b").reachable
    with pytest.raises(HostUnreachable):
        driver.start(VMSpec("three", 1, 1), "b")
    with pytest.raises(HostUnreachable):
        driver.list_vms("b")
    with pytest.raises(HostUnreachable):
        driver.stop("one")
    assert driver.locate("one") is None


def test_a_host_that_answers_again_has_kept_its_vms():
    config = SimulatedDriverConfig(host_down_at={"b": T0 + timedelta(seconds=10)},
                                   host_up_at={"b": T0 + timedelta(seconds=70)})
    driver, clock = make(config)
    driver.start(VMSpec("one", 1, 1), "b")
    clock.advance_to(T0 + timedelta(seconds=30))
    with pytest.raises(HostUnreachable):
        driver.stop("one")
    clock.advance_to(T0 + timedelta(seconds=70))
    assert [(v.name, v.state) for v in driver.list_vms("b")] == [("one", "running")]
    assert driver.stop("one", host="b").host == "b"


def test_host_up_at_needs_a_host_down_at_before_it():
    with pytest.raises(ValueError, match="host_up_at"):
        SimulatedDriverConfig(host_up_at={"b": T0})
    with pytest.raises(ValueError, match="host_up_at"):
        SimulatedDriverConfig(host_down_at={"b": T0}, host_up_at={"b": T0})


def test_host_check_is_simulated_and_a_down_host_fails_to_connect():
    config = SimulatedDriverConfig(host_down_at={"b": T0})
    driver, _ = make(config)
    up, down = driver.check_host("a"), driver.check_host("b")
    assert up.ok and {item.status for item in up.items} == {"simulated"}
    assert not down.ok and down.failed == ["connect", "versions", "domain type"]
    assert {i.check: i for i in down.items}["connect"].detail == "simulated:///b: host b is down"
    pair = driver.check_pair("a", "b")
    assert [i.check for i in pair.items] == list(PAIR_CHECKS) and pair.failed == ["peer link"]
    assert {i.status for i in driver.check_pair("a", "a").items} == {"simulated"}


def test_remove_state_forgets_the_image_on_that_host_only():
    driver, _ = make()
    driver.start(VMSpec("vm", 1, 64), "a")
    driver.suspend("vm", "/var/save/vm.save")
    driver.move_state("/var/save/vm.save", "a", "b")
    driver.remove_state("/var/save/vm.save", "a")
    assert not driver.state_file_exists("a", "/var/save/vm.save")
    assert driver.state_file_exists("b", "/var/save/vm.save")   # host-local storage: b's copy stays
    driver.remove_state("/var/save/vm.save", "a")               # nothing there: nothing to do


def test_measured_dirty_rate_is_the_rate_migrations_see():
    driver, _ = make(SimulatedDriverConfig(dirty_factor=1.5))
    driver.start(VMSpec("vm", 1, 256, dirty_rate_mib_s=10), "a")
    assert driver.measured_dirty_rate("vm") == 15


def test_migrate_report_matches_the_precopy_prediction_and_reports_each_round():
    config = SimulatedDriverConfig(migration_overhead=timedelta(seconds=2), dirty_factor=1.5,
                                   migration_bandwidth_mib_s=200)   # (the link: the 120 MiB/s limit is lower)
    driver, clock = make(config)
    driver.start(VMSpec("vm", 2, 2048, dirty_rate_mib_s=10, working_set_mib=512), "a")
    t_start = clock.now()
    samples: list[MigrationProgress] = []
    report = driver.migrate("vm", "b", max_downtime_ms=200, bandwidth_mib_s=120, progress=samples.append)

    expected = predict_precopy(2048, 120, 10, 200, working_set_mib=512, timeout_s=600, overhead_s=2.0,
                               dirty_factor=1.5)
    assert report.success and report.outcome == "completed"
    assert report.total_seconds == pytest.approx(expected.total_seconds)
    assert report.downtime_ms == pytest.approx(expected.downtime_ms)
    assert report.iterations == expected.passes
    assert report.bytes_transferred == round(expected.transferred_mib * 2**20)
    assert report.memory_total == 2048 * 2**20
    assert (clock.now() - t_start).total_seconds() == pytest.approx(expected.total_seconds)
    assert len(samples) == len(expected.rounds)
    assert [s.iteration for s in samples] == list(range(1, len(samples) + 1))
    assert samples[-1].memory_remaining == 0
    assert [s.elapsed_seconds for s in samples] == sorted(s.elapsed_seconds for s in samples)
    assert samples[-1].elapsed_seconds == pytest.approx(expected.total_seconds)
    assert samples[0].dirty_rate_bytes_s == pytest.approx(15 * 2**20)
    assert report.samples == tuple(samples)
    assert driver.locate("vm") == "b"


def test_a_block_migration_copies_the_overlay_first_timed_by_the_same_model():
    """Hosts keeping overlays on their own storage: the overlay's allocation goes first, at the migration's
    bandwidth, then memory, as the planner predicts with the same `disk_mib`; a VM without a disk has none."""
    config = SimulatedDriverConfig(migration_overhead=timedelta(seconds=1), local_vm_disks=True, overlay_mib=300.0)
    driver, clock = make(config)
    driver.start(VMSpec("vm", 1, 1024, dirty_rate_mib_s=5, disk=DiskSpec(base="/img/base.qcow2")), "a")
    driver.start(VMSpec("bare", 1, 256), "a")
    assert driver.disk_allocation("vm") == 300 * 2**20 and driver.disk_allocation("bare") is None
    assert not driver.shares_vm_storage("a", "b")
    t_start = clock.now()
    samples: list[MigrationProgress] = []
    report = driver.migrate("vm", "b", max_downtime_ms=300, bandwidth_mib_s=100, progress=samples.append)
    expected = predict_precopy(1024, 100, 5, 300, timeout_s=600, overhead_s=1.0, disk_mib=300.0)
    assert expected.disk_seconds == pytest.approx(3.0)
    assert report.total_seconds == pytest.approx(expected.total_seconds)
    assert (clock.now() - t_start).total_seconds() == pytest.approx(expected.total_seconds)
    assert report.disk_bytes == 300 * 2**20
    assert samples[0].iteration == 0 and samples[0].memory_processed == 0
    assert samples[0].elapsed_seconds == pytest.approx(1.0 + 3.0)   # (the fixed cost, then the disk)
    assert samples[-1].elapsed_seconds == pytest.approx(expected.total_seconds)


def test_a_disk_the_spec_says_is_written_is_what_a_block_migration_copies():
    """`disk_written_mib` (a calibration guest's disk, filled before it starts) replaces `overlay_mib`, also
    for a disk attached as a file; on shared storage nothing is copied; a negative amount is refused."""
    config = SimulatedDriverConfig(local_vm_disks=True, overlay_mib=300.0)
    driver, _ = make(config)
    driver.start(VMSpec("file", 1, 256, disk_image="/vms/file.qcow2", disk_written_mib=64.0), "a")
    driver.start(VMSpec("overlay", 1, 256, disk=DiskSpec(base="/img/base.qcow2"), disk_written_mib=16.0), "a")
    assert driver.disk_allocation("file") == 64 * 2**20 and driver.disk_allocation("overlay") == 16 * 2**20
    assert driver.migrate("file", "b", bandwidth_mib_s=100).disk_bytes == 64 * 2**20
    with pytest.raises(ValueError, match="disk_written_mib"):
        driver.start(VMSpec("bad", 1, 256, disk_image="/vms/bad.qcow2", disk_written_mib=-1.0), "a")
    shared, _ = make()
    shared.start(VMSpec("file", 1, 256, disk_image="/vms/file.qcow2", disk_written_mib=64.0), "a")
    assert shared.disk_allocation("file") is None and shared.migrate("file", "b").disk_bytes == 0


def test_migrate_timeout_abort_raises_with_report_and_leaves_vm_on_source():
    driver, clock = make()
    driver.start(VMSpec("hot", 1, 1024, dirty_rate_mib_s=500), "a")
    t_start = clock.now()
    with pytest.raises(MigrationFailed) as caught:
        driver.migrate("hot", "b", bandwidth_mib_s=100, timeout_s=30, on_timeout="abort")
    report = caught.value.report
    assert report.outcome == "aborted" and not report.success
    assert report.total_seconds == 30
    assert clock.now() - t_start == timedelta(seconds=30)
    assert driver.locate("hot") == "a"
    assert driver.list_vms("a")[0].state == "running"


def test_migrate_timeout_force_completes_with_long_downtime():
    driver, _ = make()
    driver.start(VMSpec("hot", 1, 1024, dirty_rate_mib_s=500), "a")
    report = driver.migrate("hot", "b", bandwidth_mib_s=100, timeout_s=30, on_timeout="force")
    assert report.success and report.outcome == "forced"
    assert report.downtime_ms == pytest.approx(1024 * 0.9 / 100 * 1000)
    assert driver.locate("hot") == "b"


def test_migrate_refusals_keep_the_vm_running_on_the_source():
    driver, _ = make(a=(4, 4096), b=(1, 1024))
    driver.start(VMSpec("vm", 2, 512), "a")
    for dst, reason in (("a", "already on"), ("b", "free vCPUs")):
        with pytest.raises(MigrationFailed, match=reason) as caught:
            driver.migrate("vm", dst)
        assert caught.value.report.outcome == "failed"
        assert driver.locate("vm") == "a"
    with pytest.raises(ValueError, match="max_downtime_ms"):
        driver.migrate("vm", "b", max_downtime_ms=-1)


def test_config_rejects_bad_values_naming_the_field():
    with pytest.raises(ValueError, match="start_time"):
        SimulatedDriverConfig(start_time=5)  # type: ignore[arg-type]  (a duration is a timedelta)
    with pytest.raises(ValueError, match="suspend_rate_mib_s"):
        SimulatedDriverConfig(suspend_rate_mib_s=0)
    with pytest.raises(ValueError, match="failure_probability"):
        SimulatedDriverConfig(failure_probability=1.5)
    with pytest.raises(ValueError, match="failing_operations"):
        SimulatedDriverConfig(failing_operations=frozenset({"reboot"}))
    with pytest.raises(ValueError, match="no timezone"):
        SimulatedDriverConfig(host_down_at={"a": datetime(2026, 1, 1)})


def test_an_operation_that_waited_on_the_clock_while_its_host_was_removed_did_not_happen(tmp_path):
    """On a clock that moves by itself the driver lets go of its lock while an operation takes its time,
    so a host can be removed under it: the operation then fails and leaves nothing on the removed host
    (the state file never names a host the driver does not manage)."""
    config = SimulatedDriverConfig(start_time=timedelta(seconds=1))
    driver = SimulatedDriver({"a": (8, 8192)}, RealClock(), config, state_file=tmp_path / "hosts.json",
                             migration_model=predict_precopy)
    driver.add_host(HostConfig("c", "test:///default"), 8, 8192)
    outcome: list[BaseException | None] = []

    def start() -> None:
        try:
            driver.start(VMSpec("late", 1, 64), "c")
            outcome.append(None)
        except BaseException as exc:   # noqa: BLE001 - looked at below
            outcome.append(exc)

    thread = threading.Thread(target=start)
    thread.start()
    time.sleep(0.3)   # (the start is under way, waiting on the clock)
    driver.remove_host("c")
    thread.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], UnknownHost), outcome
    assert driver.hosts() == ["a"] and driver.locate("late") is None
    assert SimulatedDriver({"a": (8, 8192)}, RealClock(), config, state_file=tmp_path / "hosts.json",
                           migration_model=predict_precopy).locate("late") is None
