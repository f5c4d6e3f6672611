"""One behavioural contract for every `Driver`: what the orchestrator may rely on whichever driver runs.

How it is built
---------------
`DriverContract` holds the tests and is not collected itself (its name does not start with "Test").
Each test receives a `ContractTarget` from the `contract_driver` fixture: the driver, two host names,
a directory for save images that both hosts see, how to build a bootable `VMSpec` there, and a third host
it does not manage yet (to add while it runs).
`TestDriverContract` below runs the contract against the simulated driver and against the libvirt
driver on libvirt's in-process test hypervisor.

Live-migration cases take `migrating_driver` instead. A target that cannot migrate says why in
`ContractTarget.migration_unsupported`; its migration cases then run as *strict* expected failures
(`xfail(raises=MigrationFailed, strict=True)`): they are reported with that reason, and they fail the
run if that target ever starts migrating (time to drop the exclusion). The test hypervisor is such a
target: it has no virDomainMigrate3.

Running the contract on the real lab
------------------------------------
Add a module under tests/lab/ (tests/ is a package, so the suite imports by its full name), then::

    # tests/lab/test_lab_contract.py
    import pytest
    from tests.drivers.test_driver_contract import ContractTarget, DriverContract
    from drivers.base import VMSpec
    from drivers.inventory import load_inventory
    from drivers.libvirt import LibvirtDriver

    @pytest.mark.lab
    class TestLabContract(DriverContract):
        @pytest.fixture
        def contract_driver(self, lab_inventory_path):        # a fixture of tests/lab/conftest.py
            driver = LibvirtDriver(load_inventory(lab_inventory_path))
            target = ContractTarget(
                "lab", driver, "lab1", "lab2", state_dir="/var/lib/libvirt/images/leasewise-contract",
                make_spec=lambda name, lease: VMSpec(name, 1, 256, kernel="/var/lib/libvirt/images/vmlinuz",
                                                     initrd=".../initrd", cmdline="console=ttyS0",
                                                     lease_id=lease),
                graceful_timeout=10, slow_bandwidth_mib_s=1, slow_timeout_s=3,
            )
            yield target
            target.cleanup()

`state_dir` must be on storage both lab hosts share (listed in their `shared_storage`). The slow-migration
settings must make the guest's migration outlast the timeout (a guest of mostly zero pages migrates fast
even at 1 MiB/s: give it memory it has written to).
"""

import posixpath
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest

from drivers.base import HOST_CHECKS, PAIR_CHECKS, Driver, MigrationProgress, VMSpec
from drivers.clock import SimulatedClock
from drivers.errors import (
    MigrationFailed,
    OperationFailed,
    UnknownHost,
    VMAlreadyExists,
    VMNotFound,
)
from drivers.inventory import HostConfig
from drivers.libvirt import LibvirtDriver
from drivers.simulated import SimulatedDriver, SimulatedDriverConfig
from orchestrator.model.timeutil import UTC
from orchestrator.planning.precopy import predict_precopy

MIB = 1024 * 1024


def small_vm(name: str, lease_id: str | None) -> VMSpec:
    return VMSpec(name, 1, 64, lease_id=lease_id)


@dataclass
class ContractTarget:
    """A driver under test and what the contract needs to know about its hosts."""

    label: str
    driver: Driver
    host_a: str
    host_b: str
    state_dir: str                                   # on storage both hosts see
    make_spec: Callable[[str, str | None], VMSpec] = small_vm
    migration_unsupported: str | None = None         # why this target cannot live-migrate
    graceful_timeout: float = 5.0
    slow_bandwidth_mib_s: float = 1.0                # with slow_timeout_s: a migration that cannot finish in time
    slow_timeout_s: float = 2.0
    # waits until a VM just started on a host has written its memory, so that the slow cases have memory to move
    # (a booting guest has little, and moves within the timeout); None: a target whose VMs have it from the start
    wait_until_written: Callable[[str, str], None] | None = None
    new_host: HostConfig | None = None               # a host to add while the driver runs (None: none to add)
    prefix: str = field(default_factory=lambda: f"lwct-{uuid.uuid4().hex[:6]}")

    def vm(self, tag: str) -> str:
        """A VM name unique to this test, so leftovers never collide and cleanup finds only ours."""
        return f"{self.prefix}-{tag}"

    def spec(self, tag: str, lease_id: str | None = None) -> VMSpec:
        return self.make_spec(self.vm(tag), lease_id)

    def state_path(self, tag: str) -> str:
        return posixpath.join(self.state_dir, f"{self.vm(tag)}.state")

    def start_written(self, tag: str) -> str:
        """Starts the VM `tag` on host_a and waits until its memory is written; returns its name."""
        self.driver.start(self.spec(tag), self.host_a)
        if self.wait_until_written is not None:
            self.wait_until_written(self.vm(tag), self.host_a)
        return self.vm(tag)

    def names_on(self, host: str) -> dict[str, str]:
        """Our VMs on `host`: name -> state."""
        return {i.name: i.state for i in self.driver.list_vms(host) if i.name.startswith(self.prefix)}

    def cleanup(self) -> None:
        for host in (self.host_a, self.host_b):
            for name in self.names_on(host):
                self.driver.stop(name, graceful_timeout=0)
        self.driver.close()


class DriverContract:
    """The shared behaviour; subclasses provide the `contract_driver` fixture."""

    @pytest.fixture
    def migrating_driver(self, contract_driver: ContractTarget, request: pytest.FixtureRequest) -> ContractTarget:
        if contract_driver.migration_unsupported:
            request.applymarker(pytest.mark.xfail(
                reason=contract_driver.migration_unsupported, raises=MigrationFailed, strict=True,
            ))
        return contract_driver

    # -- hosts ----------------------------------------------------------------------------------

    def test_hosts_are_listed_with_capacity(self, contract_driver: ContractTarget):
        t = contract_driver
        assert {t.host_a, t.host_b} <= set(t.driver.hosts())
        for host in (t.host_a, t.host_b):
            info = t.driver.host_info(host)
            assert info.name == host and info.reachable and not info.error
            assert info.vcpus >= 1 and info.memory_mib >= 64
            assert info.domain_type in ("kvm", "qemu")

    def test_unknown_host_raises_unknown_host(self, contract_driver: ContractTarget):
        t = contract_driver
        with pytest.raises(UnknownHost):
            t.driver.host_info("no-such-host")
        with pytest.raises(UnknownHost):
            t.driver.list_vms("no-such-host")
        with pytest.raises(UnknownHost):
            t.driver.start(t.spec("x"), "no-such-host")

    def test_host_check_answers_every_check_in_order_and_passes_on_a_ready_host(self, contract_driver: ContractTarget):
        t = contract_driver
        for host in (t.host_a, t.host_b):
            check = t.driver.check_host(host, timeout_s=10)
            assert check.host == host
            assert [item.check for item in check.items] == list(HOST_CHECKS)
            assert all(item.status in ("PASS", "SKIP", "simulated") and item.detail for item in check.items), check
            assert check.ok and check.failed == []
        with pytest.raises(UnknownHost):
            t.driver.check_host("no-such-host")

    def test_a_host_added_while_it_runs_takes_vms_and_a_removed_one_is_gone(self, contract_driver: ContractTarget):
        t = contract_driver
        if t.new_host is None:
            pytest.skip(f"{t.label}: no host to add")
        new = t.new_host.name
        assert new not in t.driver.hosts()
        t.driver.start(t.spec("stays"), t.host_a)

        t.driver.add_host(t.new_host, 8, 8192)
        assert t.driver.hosts().count(new) == 1 and {t.host_a, t.host_b} <= set(t.driver.hosts())
        info = t.driver.host_info(new)
        assert info.reachable and info.vcpus >= 1 and info.memory_mib >= 64
        with pytest.raises(ValueError):
            t.driver.add_host(t.new_host, 8, 8192)   # managed already
        spec = t.spec("newcomer", lease_id="lease-new")
        report = t.driver.start(spec, new)
        assert (report.operation, report.host) == ("start", new)
        assert [(i.name, i.state, i.lease_id) for i in t.driver.list_vms(new)] == [(spec.name, "running", "lease-new")]
        assert t.driver.locate(spec.name) == new

        t.driver.remove_host(new)
        assert new not in t.driver.hosts() and {t.host_a, t.host_b} <= set(t.driver.hosts())
        for call in (lambda: t.driver.host_info(new), lambda: t.driver.list_vms(new),
                     lambda: t.driver.start(t.spec("late"), new), lambda: t.driver.remove_host(new)):
            with pytest.raises(UnknownHost):
                call()
        assert t.driver.locate(spec.name) is None   # not reached any more
        assert t.names_on(t.host_a) == {t.vm("stays"): "running"}   # the others go on as they were

        t.driver.add_host(t.new_host, 8, 8192)   # and it can come back
        t.driver.start(t.spec("again"), new)
        assert t.driver.locate(t.vm("again")) == new
        t.driver.stop(t.vm("again"), graceful_timeout=0)

    def test_every_host_listed_at_once_is_each_hosts_own_listing(self, contract_driver: ContractTarget):
        """The daemon's look (`list_every_host`) says what `list_vms` says of each host, in host order."""
        t = contract_driver
        t.driver.start(t.spec("on-a", lease_id="lease-a"), t.host_a)
        t.driver.start(t.spec("on-b", lease_id="lease-b"), t.host_b)
        every = t.driver.list_every_host()
        assert list(every) == t.driver.hosts()

        def ours(listing: object) -> list[tuple[str, str, str | None]]:
            assert isinstance(listing, list), listing
            return sorted((i.name, i.state, i.lease_id) for i in listing if i.name.startswith(t.prefix))

        assert ours(every[t.host_a]) == [(t.vm("on-a"), "running", "lease-a")]
        assert ours(every[t.host_b]) == [(t.vm("on-b"), "running", "lease-b")]
        for host in t.driver.hosts():
            assert ours(every[host]) == ours(t.driver.list_vms(host))

    # -- lifecycle ------------------------------------------------------------------------------

    def test_started_vm_is_listed_running_with_its_lease(self, contract_driver: ContractTarget):
        t = contract_driver
        spec = t.spec("one", lease_id="lease-1")
        report = t.driver.start(spec, t.host_a)
        assert (report.operation, report.vm, report.host) == ("start", spec.name, t.host_a)
        [info] = [i for i in t.driver.list_vms(t.host_a) if i.name == spec.name]
        assert (info.state, info.lease_id, info.vcpus, info.memory_mib) == ("running", "lease-1", spec.vcpus, spec.memory_mib)
        assert t.driver.locate(spec.name) == t.host_a
        assert spec.name not in t.names_on(t.host_b)

    def test_starting_an_existing_name_raises_vm_already_exists(self, contract_driver: ContractTarget):
        t = contract_driver
        t.driver.start(t.spec("dup"), t.host_a)
        with pytest.raises(VMAlreadyExists):
            t.driver.start(t.spec("dup"), t.host_a)
        with pytest.raises(VMAlreadyExists):
            t.driver.start(t.spec("dup"), t.host_b)
        assert t.names_on(t.host_a) == {t.vm("dup"): "running"}

    def test_stop_removes_the_vm(self, contract_driver: ContractTarget):
        t = contract_driver
        t.driver.start(t.spec("gone"), t.host_a)
        report = t.driver.stop(t.vm("gone"), graceful_timeout=t.graceful_timeout)
        assert (report.operation, report.host) == ("stop", t.host_a)
        assert t.names_on(t.host_a) == {}
        assert t.driver.locate(t.vm("gone")) is None

    def test_stop_on_a_given_host_stops_only_the_copy_there(self, contract_driver: ContractTarget):
        t = contract_driver
        t.driver.start(t.spec("here"), t.host_a)
        with pytest.raises(VMNotFound):
            t.driver.stop(t.vm("here"), graceful_timeout=t.graceful_timeout, host=t.host_b)
        assert t.names_on(t.host_a) == {t.vm("here"): "running"}
        report = t.driver.stop(t.vm("here"), graceful_timeout=t.graceful_timeout, host=t.host_a)
        assert (report.operation, report.host) == ("stop", t.host_a)
        assert t.names_on(t.host_a) == {}

    def test_operations_on_an_unknown_vm_raise_vm_not_found(self, contract_driver: ContractTarget):
        t = contract_driver
        with pytest.raises(VMNotFound):
            t.driver.stop(t.vm("ghost"))
        with pytest.raises(VMNotFound):
            t.driver.suspend(t.vm("ghost"), t.state_path("ghost"))
        with pytest.raises(VMNotFound):
            t.driver.migrate(t.vm("ghost"), t.host_b)
        assert t.driver.locate(t.vm("ghost")) is None

    # -- suspend / resume -----------------------------------------------------------------------

    def test_suspend_then_resume_on_the_same_host(self, contract_driver: ContractTarget):
        t = contract_driver
        t.driver.start(t.spec("nap", lease_id="lease-nap"), t.host_a)
        saved = t.driver.suspend(t.vm("nap"), t.state_path("nap"))
        assert (saved.operation, saved.host) == ("suspend", t.host_a)
        assert saved.bytes > 0 and saved.wall_seconds >= 0
        assert t.names_on(t.host_a) == {t.vm("nap"): "saved"}
        with pytest.raises(OperationFailed):
            t.driver.suspend(t.vm("nap"), t.state_path("nap"))  # not running any more

        resumed = t.driver.resume(t.vm("nap"), t.state_path("nap"), t.host_a)
        assert (resumed.operation, resumed.host) == ("resume", t.host_a)
        [info] = [i for i in t.driver.list_vms(t.host_a) if i.name == t.vm("nap")]
        assert (info.state, info.lease_id) == ("running", "lease-nap")

    def test_resume_on_the_other_host_through_shared_storage(self, contract_driver: ContractTarget):
        t = contract_driver
        t.driver.start(t.spec("trip", lease_id="lease-trip"), t.host_a)
        t.driver.suspend(t.vm("trip"), t.state_path("trip"))
        moved = t.driver.move_state(t.state_path("trip"), t.host_a, t.host_b)
        assert (moved.operation, moved.bytes) == ("move_state", 0)  # shared: nothing to copy
        t.driver.resume(t.vm("trip"), t.state_path("trip"), t.host_b)
        assert t.names_on(t.host_b) == {t.vm("trip"): "running"}
        assert t.names_on(t.host_a) == {}
        assert t.driver.locate(t.vm("trip")) == t.host_b

    def test_resume_without_an_image_fails_and_creates_nothing(self, contract_driver: ContractTarget):
        t = contract_driver
        with pytest.raises(OperationFailed):
            t.driver.resume(t.vm("never"), t.state_path("never"), t.host_b)
        assert t.driver.locate(t.vm("never")) is None

    def test_a_removed_image_cannot_be_resumed_and_removing_it_again_is_harmless(self, contract_driver: ContractTarget):
        t = contract_driver
        t.driver.start(t.spec("drop"), t.host_a)
        t.driver.suspend(t.vm("drop"), t.state_path("drop"))
        t.driver.stop(t.vm("drop"))
        t.driver.remove_state(t.state_path("drop"), t.host_a)
        t.driver.remove_state(t.state_path("drop"), t.host_a)  # not there any more: nothing to do
        with pytest.raises(OperationFailed):
            t.driver.resume(t.vm("drop"), t.state_path("drop"), t.host_a)
        assert t.driver.locate(t.vm("drop")) is None
        with pytest.raises(UnknownHost):
            t.driver.remove_state(t.state_path("drop"), "no-such-host")

    def test_stopping_a_suspended_vm_removes_it(self, contract_driver: ContractTarget):
        t = contract_driver
        t.driver.start(t.spec("cold"), t.host_a)
        t.driver.suspend(t.vm("cold"), t.state_path("cold"))
        t.driver.stop(t.vm("cold"))
        assert t.names_on(t.host_a) == {} and t.driver.locate(t.vm("cold")) is None

    def test_discard_removes_a_vm_on_one_host_running_or_not(self, contract_driver: ContractTarget):
        """What the daemon does with the VMs a lost host kept when it answers again (a saved one stands in for
        a VM a power cut shut off: defined, not running)."""
        t = contract_driver
        t.driver.start(t.spec("kept"), t.host_a)
        t.driver.start(t.spec("ran-on"), t.host_a)
        assert t.driver.discard(t.vm("kept"), t.host_b) is False   # not there
        t.driver.suspend(t.vm("kept"), t.state_path("kept"))
        assert t.names_on(t.host_a) == {t.vm("kept"): "saved", t.vm("ran-on"): "running"}
        assert t.driver.discard(t.vm("kept"), t.host_a) is True
        assert t.driver.discard(t.vm("ran-on"), t.host_a) is True
        assert t.names_on(t.host_a) == {} and t.driver.discard(t.vm("kept"), t.host_a) is False
        t.driver.remove_state(t.state_path("kept"), t.host_a)
        with pytest.raises(UnknownHost):
            t.driver.discard(t.vm("kept"), "no-such-host")

    def test_pair_check_answers_every_check_in_order(self, contract_driver: ContractTarget):
        """A live migration's path between two hosts, both ways: it passes where the target migrates (the
        lab: a real probe migration), its link fails where the target cannot migrate at all."""
        t = contract_driver
        for source, destination in ((t.host_a, t.host_b), (t.host_b, t.host_a)):
            pair = t.driver.check_pair(source, destination, timeout_s=60)
            assert (pair.source, pair.destination) == (source, destination)
            assert [item.check for item in pair.items] == list(PAIR_CHECKS) and all(i.detail for i in pair.items)
            if t.migration_unsupported:
                assert pair.failed == ["peer link"], pair
            else:
                assert all(item.status in ("PASS", "simulated") for item in pair.items), pair
        assert t.names_on(t.host_a) == {} and t.names_on(t.host_b) == {}   # (no probe guest left)
        assert not any(i.name.startswith("leasewise-check-") for h in (t.host_a, t.host_b)
                       for i in t.driver.list_vms(h))
        with pytest.raises(UnknownHost):
            t.driver.check_pair(t.host_a, "no-such-host")

    # -- live migration -------------------------------------------------------------------------

    def test_measured_dirty_rate_is_a_rate_or_none_and_needs_the_vm(self, contract_driver: ContractTarget):
        t = contract_driver
        t.driver.start(t.spec("dirty"), t.host_a)
        rate = t.driver.measured_dirty_rate(t.vm("dirty"))
        assert rate is None or rate >= 0
        with pytest.raises(VMNotFound):
            t.driver.measured_dirty_rate(t.vm("ghost"))

    def test_disk_allocation_is_none_without_a_disk_of_its_hosts_own_and_needs_the_vm(
            self, contract_driver: ContractTarget):
        t = contract_driver
        t.driver.start(t.spec("bare"), t.host_a)
        assert t.driver.disk_allocation(t.vm("bare")) is None   # (its disks, if any, are shared or read-only)
        with pytest.raises(VMNotFound):
            t.driver.disk_allocation(t.vm("ghost"))

    def test_migrating_to_its_own_host_fails_and_keeps_it_running(self, contract_driver: ContractTarget):
        t = contract_driver
        t.driver.start(t.spec("stay"), t.host_a)
        with pytest.raises(MigrationFailed) as caught:
            t.driver.migrate(t.vm("stay"), t.host_a)
        assert not caught.value.report.success and caught.value.report.outcome == "failed"
        assert t.names_on(t.host_a) == {t.vm("stay"): "running"}

    def test_live_migration_moves_the_vm(self, migrating_driver: ContractTarget):
        t = migrating_driver
        spec = t.spec("mover", lease_id="lease-mv")
        t.driver.start(spec, t.host_a)
        assert t.driver.completed_migration(spec.name, t.host_a) is None   # (started, never migrated)
        samples: list[MigrationProgress] = []
        report = t.driver.migrate(spec.name, t.host_b, max_downtime_ms=500, timeout_s=300, progress=samples.append)
        assert report.success and report.outcome == "completed"
        assert (report.vm, report.source, report.destination) == (spec.name, t.host_a, t.host_b)
        assert report.memory_total == spec.memory_mib * MIB
        assert report.bytes_transferred > 0 and report.iterations >= 1
        assert report.total_seconds > 0 and report.downtime_ms >= 0
        assert all(0 <= s.percent <= 100 for s in samples)
        assert t.names_on(t.host_b) == {spec.name: "running"}
        assert t.names_on(t.host_a) == {}
        assert [i.lease_id for i in t.driver.list_vms(t.host_b) if i.name == spec.name] == ["lease-mv"]
        # what a daemon started again after the migration finds of it: the same measurements
        kept = t.driver.completed_migration(spec.name, t.host_a)
        assert kept is not None and kept.success and kept.destination == t.host_b
        assert kept.total_seconds == pytest.approx(report.total_seconds, rel=0.05)
        assert kept.downtime_ms == pytest.approx(report.downtime_ms, abs=1)

    def test_migration_timeout_abort_leaves_the_vm_on_the_source(self, migrating_driver: ContractTarget):
        t = migrating_driver
        t.start_written("slow")
        with pytest.raises(MigrationFailed) as caught:
            t.driver.migrate(t.vm("slow"), t.host_b, bandwidth_mib_s=t.slow_bandwidth_mib_s,
                             timeout_s=t.slow_timeout_s, on_timeout="abort")
        if caught.value.report.outcome != "aborted":
            raise caught.value  # it failed, but not by the timeout: show why
        assert not caught.value.report.success
        assert t.names_on(t.host_a) == {t.vm("slow"): "running"}
        assert t.names_on(t.host_b) == {}

    def test_a_migration_given_a_bandwidth_moves_no_faster(self, migrating_driver: ContractTarget):
        """`bandwidth_mib_s` is a limit (libvirt's VIR_MIGRATE_PARAM_BANDWIDTH): what the report says was
        sent took at least as long as the limit allows (a quarter's slack for QEMU's rate limiter, which
        lets a burst through at the start of each of its 100 ms windows)."""
        t = migrating_driver
        limit = 16.0
        spec = t.spec("capped")
        t.driver.start(spec, t.host_a)
        report = t.driver.migrate(spec.name, t.host_b, max_downtime_ms=500, bandwidth_mib_s=limit, timeout_s=300)
        assert report.success and report.total_seconds > 0
        assert report.bytes_transferred / MIB / report.total_seconds <= limit * 1.25
        assert t.names_on(t.host_b) == {spec.name: "running"}

    def test_migration_timeout_force_completes_on_the_destination(self, migrating_driver: ContractTarget):
        t = migrating_driver
        t.start_written("pushed")
        report = t.driver.migrate(t.vm("pushed"), t.host_b, bandwidth_mib_s=t.slow_bandwidth_mib_s,
                                  timeout_s=t.slow_timeout_s, on_timeout="force")
        assert report.success and report.outcome == "forced"
        assert t.names_on(t.host_b) == {t.vm("pushed"): "running"}
        assert t.names_on(t.host_a) == {}


NODE = """<node><cpu><nodes>1</nodes><sockets>1</sockets><cores>8</cores><threads>1</threads>
<mhz>2000</mhz></cpu><memory>16777216</memory></node>"""


def simulated_target(tmp_path: Path) -> ContractTarget:
    shared = "/srv/leasewise/shared"
    config = SimulatedDriverConfig(shared_storage=(shared,), domain_type="kvm")
    clock = SimulatedClock(datetime(2026, 1, 5, tzinfo=UTC))
    driver = SimulatedDriver({"sim-a": (8, 8192), "sim-b": (8, 8192)}, clock, config, migration_model=predict_precopy)
    return ContractTarget("simulated", driver, "sim-a", "sim-b", state_dir=shared,
                          new_host=HostConfig("sim-c", "test:///default", shared_storage=(shared,)))


def libvirt_test_target(tmp_path: Path) -> ContractTarget:
    node = tmp_path / "node-b.xml"
    node.write_text(NODE)
    node_c = tmp_path / "node-c.xml"   # (a file of its own: test:///default's state is shared in the process)
    node_c.write_text(NODE)
    shared = (str(tmp_path),)
    driver = LibvirtDriver(
        [
            HostConfig("test-a", "test:///default", domain_type="qemu", state_dir=str(tmp_path), shared_storage=shared),
            HostConfig("test-b", f"test://{node}", domain_type="qemu", state_dir=str(tmp_path), shared_storage=shared),
        ],
        retry_wait_s=0.0,
        poll_interval_s=0.05,
    )
    return ContractTarget(
        "libvirt-test", driver, "test-a", "test-b", state_dir=str(tmp_path),
        new_host=HostConfig("test-c", f"test://{node_c}", domain_type="qemu", state_dir=str(tmp_path),
                            shared_storage=shared),
        migration_unsupported=(
            "libvirt's test hypervisor (test:///) implements no live migration (virDomainMigrate3 -> "
            "VIR_ERR_NO_SUPPORT); the lab run of this contract (tests/lab) covers it"
        ),
    )


class TestDriverContract(DriverContract):
    @pytest.fixture(params=["simulated", "libvirt-test"])
    def contract_driver(self, request: pytest.FixtureRequest, tmp_path: Path):
        build = {"simulated": simulated_target, "libvirt-test": libvirt_test_target}[request.param]
        target = build(tmp_path)
        yield target
        target.cleanup()
