"""The driver-backed enactor: the scheduler's operations done on (simulated or libvirt test) hosts.

Leases and reservations are built by hand, as the scheduler would hand them over; the simulated driver
and libvirt's in-process test hypervisor (`test:///`) are real drivers, nothing is mocked.
"""

import random
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from drivers.base import DiskSpec, VMSpec
from orchestrator.model.guest import GuestSetup
from drivers.clock import SimulatedClock
from drivers.inventory import HostConfig
from drivers.libvirt import LibvirtDriver
from drivers.simulated import SimulatedDriver, SimulatedDriverConfig
from orchestrator.config import DaemonConfig
from orchestrator.model.lease import Lease, LeaseRequest, LeaseType, VMImage
from orchestrator.model.reservations import Reservation, ReservationKind
from orchestrator.model.resources import Resources
from orchestrator.planning.enactment import EnactmentError, Enactor
from orchestrator.planning.precopy import predict_precopy
from orchestrator.runtime.driver_enactor import (
    DriverEnactor,
    UnreachableHosts,
    lease_vm_names,
    parse_vm_name,
    vm_name,
    vm_spec,
)
from tests.support.times import DRIVER_T0 as T0

HOUR = timedelta(hours=1)
NODE = Resources(cpu=150, memory=512)          # 1.5 CPUs -> 2 vCPUs


def make_lease(lease_id: int, *nodes: Resources, image: VMImage | None = None) -> Lease:
    request = LeaseRequest(type=LeaseType.BEST_EFFORT, nodes=tuple(nodes or (NODE, NODE)), duration=HOUR,
                           submit_time=T0, image=image)
    return Lease(id=lease_id, request=request)


def held(lease: Lease, nodes: dict[int, str]) -> dict[str, Resources]:
    per_host: dict[str, Resources] = {}
    for vnode, host in nodes.items():
        r = lease.request.nodes[vnode]
        old = per_host.get(host, Resources())
        per_host[host] = Resources(old.cpu + r.cpu, old.memory + r.memory)
    return per_host


def vm_rr(lease: Lease, nodes: dict[int, str], start: datetime = T0) -> Reservation:
    rr = Reservation(lease.id, ReservationKind.VM, start, start + HOUR, held(lease, nodes), nodes=dict(nodes))
    lease.reservations.append(rr)
    return rr


def overhead(lease: Lease, kind: ReservationKind, vm: Reservation, nodes=None, transfers=None) -> Reservation:
    rr = Reservation(lease.id, kind, vm.start, vm.start, {}, nodes=dict(nodes or {}),
                     transfers=dict(transfers or {}), vm=vm)
    (vm.post if kind in (ReservationKind.SUSPEND, ReservationKind.SHUTDOWN) else vm.pre).append(rr)
    return rr


class Log:
    """The `record` callback: keeps what it is given."""

    def __init__(self):
        self.entries: list[tuple[str, int, dict]] = []

    def __call__(self, kind: str, lease_id: int, detail: dict) -> None:
        self.entries.append((kind, lease_id, detail))

    def of(self, kind: str, operation: str | None = None) -> list[dict]:
        return [d for k, _, d in self.entries if k == kind and (operation is None or d["operation"] == operation)]


# -- the simulated driver -----------------------------------------------------------------------------


class StopSpy(SimulatedDriver):
    """A real simulated driver that also remembers the graceful timeout of each stop."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.timeouts: list[float] = []

    def stop(self, vm: str, graceful_timeout: float = 30.0, host: str | None = None):
        self.timeouts.append(graceful_timeout)
        return super().stop(vm, graceful_timeout, host)


def sim(config: SimulatedDriverConfig | None = None, hosts=None, **capacities):
    clock = SimulatedClock(T0)
    driver = StopSpy(capacities or {"h1": (8, 8192), "h2": (8, 8192), "h3": (8, 8192)}, clock,
                     config or SimulatedDriverConfig(), migration_model=predict_precopy)
    log = Log()
    daemon = DaemonConfig(state_dir="/var/lw/state", graceful_timeout=timedelta(seconds=42))
    return DriverEnactor(driver, hosts, daemon, log), driver, log


def vms_on(driver, host: str) -> dict[str, tuple[str, int, int, str | None]]:
    return {i.name: (i.state, i.vcpus, i.memory_mib, i.lease_id) for i in driver.list_vms(host)}


def test_a_guest_setup_gives_each_vm_its_seed_mac_and_disk_size():
    guest = GuestSetup(ssh_keys=("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFvboQNZtwefN4L+HjRQtDNq3IXxjfcrFoSfUPrceJOx test",), user_data="#cloud-config\n",
                       hostname_prefix="web", disk_size_mib=4096, keep_disks=True,
                       macs=("52:54:00:00:00:07", "52:54:00:00:00:08"))
    request = LeaseRequest(type=LeaseType.BEST_EFFORT, nodes=(NODE, NODE), duration=HOUR, submit_time=T0,
                           image=VMImage(disk="/img/deb.raw", format="raw", login_user="debian"), guest=guest)
    specs = [vm_spec(Lease(id=9, request=request), v) for v in (0, 1)]
    assert [s.mac for s in specs] == ["52:54:00:00:00:07", "52:54:00:00:00:08"]
    assert [s.seed.hostname for s in specs] == ["web-0", "web-1"]
    assert {s.seed.instance_id for s in specs} == {"lw-9-0", "lw-9-1"}
    assert specs[0].seed.ssh_keys == guest.ssh_keys and specs[0].seed.user_data == "#cloud-config\n"
    assert specs[1].disk == DiskSpec(base="/img/deb.raw", base_format="raw", size_bytes=4096 * 2**20, keep=True)
    no_net = LeaseRequest(type=LeaseType.BEST_EFFORT, nodes=(NODE,), duration=HOUR, submit_time=T0,
                          image=VMImage(disk="/img/deb.qcow2"), guest=GuestSetup(network=False))
    assert vm_spec(Lease(id=10, request=no_net), 0).mac is None


def test_names_and_specs():
    assert vm_name(12, 3) == "lw-12-3"
    assert parse_vm_name("lw-12-3") == (12, 3)
    assert parse_vm_name("lw-x-3") is None and parse_vm_name("lwt-1-2") is None and parse_vm_name("lw-1-2-3") is None
    image = VMImage(kernel="/img/vmlinuz", initrd="/img/initrd", cmdline="console=ttyS0")
    lease = make_lease(7, Resources(cpu=100, memory=256), Resources(cpu=201, memory=1000.5), image=image)
    assert lease_vm_names(lease) == ["lw-7-0", "lw-7-1"]
    one, two = vm_spec(lease, 0), vm_spec(lease, 1)
    assert (one.name, one.vcpus, one.memory_mib, one.lease_id) == ("lw-7-0", 1, 256, "7")
    assert (two.vcpus, two.memory_mib) == (3, 1001)
    assert (one.kernel, one.initrd, one.cmdline, one.disk_image) == ("/img/vmlinuz", "/img/initrd", "console=ttyS0", None)
    disk = vm_spec(make_lease(8, image=VMImage(disk="/img/guest.qcow2")), 0)
    # the base image is never the VM's disk: the VM gets an overlay of its own, and no seed or NIC
    # without a guest setup
    assert disk.disk_image is None and disk.kernel is None
    assert disk.disk == DiskSpec(base="/img/guest.qcow2", base_format="qcow2", size_bytes=None, keep=False)
    assert disk.seed is None and disk.mac is None
    enactor, _, _ = sim()
    for operation in ("start_vms", "stop_vms", "suspend_vms", "resume_vms", "migrate_images", "kill_vms"):
        assert callable(getattr(enactor, operation)) and hasattr(Enactor, operation)


def test_start_puts_each_vm_on_its_planned_host_with_its_size_and_records_the_measured_time():
    enactor, driver, log = sim()
    lease = make_lease(1)
    rr = vm_rr(lease, {0: "h1", 1: "h2"})
    enactor.start_vms(lease, rr)
    assert vms_on(driver, "h1") == {"lw-1-0": ("running", 2, 512, "1")}
    assert vms_on(driver, "h2") == {"lw-1-1": ("running", 2, 512, "1")}
    assert vms_on(driver, "h3") == {}
    started = log.of("enacted", "start")
    assert [(d["vm"], d["vnode"], d["host"]) for d in started] == [("lw-1-0", 0, "h1"), ("lw-1-1", 1, "h2")]
    assert all(d["wall_seconds"] == 5.0 and d["bytes"] == 0 for d in started)  # the simulated start time
    assert all(lease_id == 1 for _, lease_id, _ in log.entries)


def test_stop_removes_the_vms_with_the_configured_graceful_timeout_and_kill_with_none():
    enactor, driver, log = sim()
    lease = make_lease(2)
    rr = vm_rr(lease, {0: "h1", 1: "h1"})
    shutdown = overhead(lease, ReservationKind.SHUTDOWN, rr, nodes=rr.nodes)
    enactor.start_vms(lease, rr)
    enactor.stop_vms(lease, shutdown)
    assert vms_on(driver, "h1") == {}
    assert driver.timeouts == [42.0, 42.0]
    assert [d["vm"] for d in log.of("enacted", "stop")] == ["lw-2-0", "lw-2-1"]

    other = make_lease(3)
    rr3 = vm_rr(other, {0: "h2", 1: "h3"})
    enactor.start_vms(other, rr3)
    driver.timeouts.clear()
    enactor.kill_vms(other, rr3)
    assert driver.timeouts == [0.0, 0.0]
    assert vms_on(driver, "h2") == vms_on(driver, "h3") == {}
    assert all(d["killed"] for d in log.of("enacted", "stop")[2:])


def test_a_cleanup_skips_a_host_removed_since_and_cleans_the_others():
    """A lease that ended on a host an admin removed before its cleanup ran: what is left there is not the
    driver's any more; the cleanup does the other hosts and is done (not tried again and again)."""
    enactor, driver, log = sim()
    lease = make_lease(5)
    rr = vm_rr(lease, {0: "h1", 1: "h2"})
    enactor.start_vms(lease, rr)
    driver.remove_host("h2")
    assert enactor.release(lease) == ["h1:lw-5-0"]
    assert vms_on(driver, "h1") == {}


def test_every_operation_is_idempotent():
    enactor, driver, log = sim()
    lease = make_lease(4)
    rr = vm_rr(lease, {0: "h1", 1: "h2"})
    enactor.start_vms(lease, rr)
    enactor.start_vms(lease, rr)  # the daemon crashed after starting, before saving that it did
    assert vms_on(driver, "h1") == {"lw-4-0": ("running", 2, 512, "4")}
    assert vms_on(driver, "h2") == {"lw-4-1": ("running", 2, 512, "4")}
    assert len(log.of("enacted", "start")) == 2
    assert [(d["vm"], d["host"]) for d in log.of("enactment-skipped", "start")] == [("lw-4-0", "h1"), ("lw-4-1", "h2")]

    suspend = overhead(lease, ReservationKind.SUSPEND, rr, nodes=rr.nodes)
    enactor.suspend_vms(lease, suspend)
    enactor.suspend_vms(lease, suspend)
    assert vms_on(driver, "h1") == {"lw-4-0": ("saved", 2, 512, "4")}
    assert len(log.of("enacted", "suspend")) == 2 and len(log.of("enactment-skipped", "suspend")) == 2

    again = vm_rr(lease, {0: "h1", 1: "h2"}, start=T0 + 2 * HOUR)
    resume = overhead(lease, ReservationKind.RESUME, again, nodes=again.nodes)
    enactor.resume_vms(lease, resume)
    enactor.resume_vms(lease, resume)
    assert vms_on(driver, "h1") == {"lw-4-0": ("running", 2, 512, "4")}
    assert vms_on(driver, "h2") == {"lw-4-1": ("running", 2, 512, "4")}
    assert len(log.of("enacted", "resume")) == 2 and len(log.of("enactment-skipped", "resume")) == 2

    enactor.stop_vms(lease, again)
    enactor.stop_vms(lease, again)
    enactor.kill_vms(lease, again)
    assert all(vms_on(driver, h) == {} for h in ("h1", "h2", "h3"))
    assert len(log.of("enacted", "stop")) == 2
    assert len(log.of("enactment-skipped", "stop")) == 2 and len(log.of("enactment-skipped", "kill")) == 2
    assert log.of("enactment-failed") == []


def test_suspend_and_resume_on_the_same_host_uses_the_host_state_dir():
    hosts = {"h1": HostConfig("h1", "test:///default", state_dir="/srv/h1-save")}
    enactor, driver, log = sim(hosts=hosts)
    lease = make_lease(5)
    rr = vm_rr(lease, {0: "h1", 1: "h2"})
    enactor.start_vms(lease, rr)
    suspend = overhead(lease, ReservationKind.SUSPEND, rr, nodes=rr.nodes)
    enactor.suspend_vms(lease, suspend)
    # h1 has its own state dir; h2 has no HostConfig, so [daemon] state_dir applies
    assert driver.state_file_exists("h1", "/srv/h1-save/lw-5-0.state")
    assert driver.state_file_exists("h2", "/var/lw/state/lw-5-1.state")
    assert [(d["path"], d["bytes"]) for d in log.of("enacted", "suspend")] == [
        ("/srv/h1-save/lw-5-0.state", 512 * 2**20), ("/var/lw/state/lw-5-1.state", 512 * 2**20)]
    assert all(d["wall_seconds"] > 0 for d in log.of("enacted", "suspend"))

    again = vm_rr(lease, dict(rr.nodes), start=T0 + 2 * HOUR)
    enactor.resume_vms(lease, overhead(lease, ReservationKind.RESUME, again, nodes=again.nodes))
    assert vms_on(driver, "h1") == {"lw-5-0": ("running", 2, 512, "5")}
    assert vms_on(driver, "h2") == {"lw-5-1": ("running", 2, 512, "5")}


def test_resume_on_another_host_after_migrating_the_images():
    hosts = {h: HostConfig(h, "test:///default", state_dir=f"/srv/{h}") for h in ("h1", "h2", "h3")}
    enactor, driver, log = sim(hosts=hosts)
    lease = make_lease(6)
    rr = vm_rr(lease, {0: "h1", 1: "h2"})
    enactor.start_vms(lease, rr)
    enactor.suspend_vms(lease, overhead(lease, ReservationKind.SUSPEND, rr, nodes=rr.nodes))

    again = vm_rr(lease, {0: "h3", 1: "h2"}, start=T0 + 2 * HOUR)
    migrate = overhead(lease, ReservationKind.MIGRATE, again, transfers={0: ("h1", "h3")})
    resume = overhead(lease, ReservationKind.RESUME, again, nodes=again.nodes)
    with pytest.raises(EnactmentError, match=r"resume lw-6-0 on h3: .*no save image at /srv/h1/lw-6-0.state"):
        enactor.resume_vms(lease, resume)  # not copied yet
    enactor.migrate_images(lease, migrate)
    enactor.migrate_images(lease, migrate)  # a second copy is harmless
    # the image keeps its path (that of h1's state dir) on h3
    assert driver.state_file_exists("h3", "/srv/h1/lw-6-0.state")
    moved = log.of("enacted", "move_state")
    assert [(d["vm"], d["src"], d["dst"], d["path"]) for d in moved] == [("lw-6-0", "h1", "h3", "/srv/h1/lw-6-0.state")] * 2
    assert moved[0]["bytes"] == 512 * 2**20 and moved[0]["wall_seconds"] == pytest.approx(512 / 100)
    assert moved[0]["route"] == "direct"   # (the event says which way the bytes went)

    enactor.resume_vms(lease, resume)
    assert vms_on(driver, "h3") == {"lw-6-0": ("running", 2, 512, "6")}
    assert vms_on(driver, "h2") == {"lw-6-1": ("running", 2, 512, "6")}
    assert vms_on(driver, "h1") == {}
    assert enactor.running_vms(lease) == {0: "h3", 1: "h2"}


def test_no_copy_on_shared_storage():
    enactor, driver, log = sim(SimulatedDriverConfig(shared_storage=("/var/lw",)))
    lease = make_lease(7)
    rr = vm_rr(lease, {0: "h1", 1: "h1"})
    enactor.start_vms(lease, rr)
    enactor.suspend_vms(lease, overhead(lease, ReservationKind.SUSPEND, rr, nodes=rr.nodes))
    again = vm_rr(lease, {0: "h2", 1: "h3"}, start=T0 + 2 * HOUR)
    before = driver.clock.now()
    enactor.migrate_images(lease, overhead(lease, ReservationKind.MIGRATE, again,
                                           transfers={0: ("h1", "h2"), 1: ("h1", "h3")}))
    assert driver.clock.now() == before
    assert [(d["bytes"], d["route"]) for d in log.of("enacted", "move_state")] == [(0, "shared")] * 2
    enactor.resume_vms(lease, overhead(lease, ReservationKind.RESUME, again, nodes=again.nodes))
    assert enactor.running_vms(lease) == {0: "h2", 1: "h3"}


def first_seed_failing_second_start(p: float = 0.5) -> int:
    for seed in range(1000):
        rng = random.Random(seed)
        if rng.random() >= p and rng.random() < p:
            return seed
    raise AssertionError("no seed")


def test_a_failed_start_stops_what_was_started_and_names_the_vm_and_host():
    config = SimulatedDriverConfig(failure_probability=0.5, failing_operations=frozenset({"start"}),
                                   seed=first_seed_failing_second_start())
    enactor, driver, log = sim(config)
    lease = make_lease(8)
    with pytest.raises(EnactmentError) as caught:
        enactor.start_vms(lease, vm_rr(lease, {0: "h1", 1: "h2"}))
    message = str(caught.value)
    assert message.startswith("start lw-8-1 on h2: injected failure") and "\n" not in message
    assert "stopped the 1 VM already started" in message
    assert all(vms_on(driver, h) == {} for h in ("h1", "h2", "h3"))
    assert [d["vm"] for d in log.of("enacted", "start")] == ["lw-8-0"]
    assert [(d["vm"], d.get("rollback")) for d in log.of("enacted", "stop")] == [("lw-8-0", True)]
    assert driver.timeouts == [0]
    failed = log.of("enactment-failed")
    assert [(d["operation"], d["vm"], d["host"], d["error_type"]) for d in failed] == [
        ("start", "lw-8-1", "h2", "OperationFailed")]


def test_a_start_on_a_host_that_is_down_starts_the_others_and_names_the_silent_host():
    """Not a failure yet: the daemon tries the start again (the VMs already up are then found running)."""
    enactor, driver, log = sim(SimulatedDriverConfig(host_down_at={"h3": T0}))
    lease = make_lease(9, NODE, NODE, NODE)
    with pytest.raises(UnreachableHosts, match=r"^start lw-9-2 on h3: host h3 is down") as caught:
        enactor.start_vms(lease, vm_rr(lease, {0: "h1", 1: "h2", 2: "h3"}))
    assert caught.value.hosts == ["h3"]
    assert set(vms_on(driver, "h1")) == {"lw-9-0"} and set(vms_on(driver, "h2")) == {"lw-9-1"}
    assert [d["vm"] for d in log.of("enactment-waits")] == ["lw-9-2"] and log.of("enactment-failed") == []


def test_start_refuses_a_vm_of_the_same_name_elsewhere_and_a_bad_image():
    enactor, driver, _ = sim()
    driver.start(VMSpec("lw-10-0", 1, 64), "h3")
    lease = make_lease(10)
    with pytest.raises(EnactmentError, match="^start lw-10-0 on h1: already exists on h3$"):
        enactor.start_vms(lease, vm_rr(lease, {0: "h1", 1: "h2"}))
    bad = make_lease(11, image=VMImage(initrd="/img/initrd"))  # an initrd without a kernel
    with pytest.raises(EnactmentError, match="^start lw-11-0 on h1: initrd and cmdline need kernel"):
        enactor.start_vms(bad, vm_rr(bad, {0: "h1", 1: "h2"}))


def test_stop_tries_every_vm_before_reporting_a_failure():
    enactor, driver, log = sim(SimulatedDriverConfig(host_down_at={"h2": T0 + timedelta(minutes=1)}))
    lease = make_lease(12, NODE, NODE, NODE)
    rr = vm_rr(lease, {0: "h1", 1: "h2", 2: "h3"})
    enactor.start_vms(lease, rr)
    driver.clock.advance_to(T0 + HOUR)
    with pytest.raises(UnreachableHosts, match=r"^stop lw-12-1 on h2: host h2 is down"):
        enactor.stop_vms(lease, rr)
    assert vms_on(driver, "h1") == vms_on(driver, "h3") == {}
    assert [d["vm"] for d in log.of("enactment-waits")] == ["lw-12-1"] and log.of("enactment-failed") == []


def test_suspend_and_resume_failures_are_one_line_enactment_errors():
    enactor, driver, log = sim()
    lease = make_lease(13)
    rr = vm_rr(lease, {0: "h1", 1: "h2"})
    suspend = overhead(lease, ReservationKind.SUSPEND, rr, nodes=rr.nodes)
    with pytest.raises(EnactmentError, match=r"^suspend lw-13-0 on h1: VM 'lw-13-0' not found"):
        enactor.suspend_vms(lease, suspend)  # never started: nothing to save
    enactor.start_vms(lease, rr)
    enactor.suspend_vms(lease, suspend)
    # a saved VM whose image is not where the plan says is not "already suspended"
    elsewhere = DriverEnactor(driver, None, DaemonConfig(state_dir="/elsewhere"), log)
    with pytest.raises(EnactmentError, match=r"^suspend lw-13-0 on h1: .*not running \(saved\)"):
        elsewhere.suspend_vms(lease, suspend)
    assert log.of("enactment-failed", "suspend")[-1]["path"] == "/elsewhere/lw-13-0.state"


def test_running_vms_tells_which_vnodes_really_run():
    enactor, driver, _ = sim(SimulatedDriverConfig(host_down_at={"h3": T0 + HOUR}))
    lease = make_lease(14, NODE, NODE, NODE)
    rr = vm_rr(lease, {0: "h1", 1: "h2", 2: "h3"})
    assert enactor.running_vms(lease) == {0: None, 1: None, 2: None}  # lost (e.g. the hosts rebooted)
    enactor.start_vms(lease, rr)
    assert enactor.running_vms(lease) == {0: "h1", 1: "h2", 2: "h3"}
    driver.stop("lw-14-1")  # ended by itself
    driver.suspend("lw-14-0", "/tmp/x.save")  # not running either
    assert enactor.running_vms(lease) == {0: None, 1: None, 2: "h3"}
    driver.guest_poweroff("lw-14-2")  # shut down by itself: still defined, not running
    assert enactor.running_vms(lease) == {0: None, 1: None, 2: None}
    # a start finding a VM of that name defined but not running refuses rather than discard it
    with pytest.raises(EnactmentError, match=r"^start lw-14-0 on h1: a VM of that name is already defined there \(saved\)$"):
        enactor.start_vms(lease, rr)
    driver.clock.advance_to(T0 + HOUR)
    with pytest.raises(UnreachableHosts, match="h3 is down") as caught:
        enactor.running_vms(lease)
    assert caught.value.hosts == ["h3"]
    assert enactor.running_vms(make_lease(15)) == {0: None, 1: None}  # no plan at all


def test_unknown_domains_are_reported_and_left_alone():
    enactor, driver, _ = sim(SimulatedDriverConfig(host_down_at={"h3": T0 + HOUR}))
    lease = make_lease(16)
    enactor.start_vms(lease, vm_rr(lease, {0: "h1", 1: "h2"}))
    driver.start(VMSpec("lw-99-0", 1, 64), "h2")
    driver.start(VMSpec("lw-98-0", 1, 64), "h3")
    driver.start(VMSpec("someone-elses", 1, 64), "h1")
    assert enactor.unknown_domains(lease_vm_names(lease)) == [("h2", "lw-99-0"), ("h3", "lw-98-0")]
    assert "lw-99-0" in vms_on(driver, "h2")  # untouched
    driver.clock.advance_to(T0 + HOUR)
    assert enactor.unknown_domains(lease_vm_names(lease)) == [("h2", "lw-99-0")]  # h3 cannot be asked


def test_a_failing_record_callback_does_not_fail_the_operation():
    def broken(kind, lease_id, detail):
        raise RuntimeError("log is full")

    driver = SimulatedDriver({"h1": (4, 4096)}, SimulatedClock(T0), migration_model=predict_precopy)
    enactor = DriverEnactor(driver, None, DaemonConfig(), broken)
    lease = make_lease(17)
    enactor.start_vms(lease, vm_rr(lease, {0: "h1", 1: "h1"}))
    assert len(driver.list_vms("h1")) == 2


# -- libvirt's test hypervisor --------------------------------------------------------------------------

NODE_B = """<node><cpu><nodes>1</nodes><sockets>1</sockets><cores>8</cores><threads>1</threads>
<mhz>2000</mhz></cpu><memory>16777216</memory></node>"""


@pytest.fixture
def libvirt_enactor(tmp_path: Path):
    node = tmp_path / "node-b.xml"
    node.write_text(NODE_B)
    shared = (str(tmp_path),)
    hosts = [
        HostConfig("a", "test:///default", domain_type="qemu", state_dir=str(tmp_path), shared_storage=shared),
        HostConfig("b", f"test://{node}", domain_type="qemu", state_dir=str(tmp_path), shared_storage=shared),
    ]
    driver = LibvirtDriver(hosts, retry_wait_s=0.0, poll_interval_s=0.05)
    log = Log()
    enactor = DriverEnactor(driver, {h.name: h for h in hosts}, DaemonConfig(graceful_timeout=timedelta(seconds=2)), log)
    # test:///default keeps domains while any connection to it is open: lease ids no other test uses
    base = 10_000_000 + uuid.uuid4().int % 10_000_000
    yield enactor, driver, log, base
    for host in driver.hosts():
        for info in driver.list_vms(host):
            parsed = parse_vm_name(info.name)
            if parsed and base <= parsed[0] < base + 100:
                driver.stop(info.name, graceful_timeout=0)
    driver.close()


def test_libvirt_start_stop_with_sizes_and_idempotency(libvirt_enactor):
    enactor, driver, log, base = libvirt_enactor
    lease = make_lease(base, Resources(cpu=200, memory=128), Resources(cpu=100, memory=64))
    rr = vm_rr(lease, {0: "a", 1: "b"})
    enactor.start_vms(lease, rr)
    enactor.start_vms(lease, rr)
    mine = lambda host: {n: v for n, v in vms_on(driver, host).items() if n.startswith(f"lw-{base}-")}
    assert mine("a") == {f"lw-{base}-0": ("running", 2, 128, str(base))}
    assert mine("b") == {f"lw-{base}-1": ("running", 1, 64, str(base))}
    assert len(log.of("enacted", "start")) == 2 and len(log.of("enactment-skipped", "start")) == 2
    assert all(d["wall_seconds"] >= 0 for d in log.of("enacted", "start"))
    assert enactor.running_vms(lease) == {0: "a", 1: "b"}
    stray = make_lease(base + 1)
    driver.start(vm_spec(stray, 0), "b")
    assert ("b", f"lw-{base + 1}-0") in enactor.unknown_domains(lease_vm_names(lease))
    assert not {("a", n) for n in lease_vm_names(lease)} & set(enactor.unknown_domains(lease_vm_names(lease)))

    enactor.stop_vms(lease, rr)
    enactor.stop_vms(lease, rr)
    assert mine("a") == mine("b") == {}
    assert len(log.of("enacted", "stop")) == 2 and len(log.of("enactment-skipped", "stop")) == 2
    assert enactor.running_vms(lease) == {0: None, 1: None}


def test_libvirt_suspend_resume_same_host_and_other_host(libvirt_enactor, tmp_path):
    enactor, driver, log, base = libvirt_enactor
    lease = make_lease(base + 2, Resources(cpu=100, memory=64), Resources(cpu=100, memory=64))
    rr = vm_rr(lease, {0: "a", 1: "b"})
    enactor.start_vms(lease, rr)
    suspend = overhead(lease, ReservationKind.SUSPEND, rr, nodes=rr.nodes)
    enactor.suspend_vms(lease, suspend)
    enactor.suspend_vms(lease, suspend)
    names = lease_vm_names(lease)
    assert [i.state for i in driver.list_vms("a") if i.name == names[0]] == ["saved"]
    assert (tmp_path / f"{names[0]}.state").is_file() and (tmp_path / f"{names[1]}.state").is_file()
    saved = log.of("enacted", "suspend")
    assert len(saved) == 2 and all(d["bytes"] > 0 for d in saved)
    assert len(log.of("enactment-skipped", "suspend")) == 2

    # vnode 0 stays on a, vnode 1 moves b -> a (shared storage: the driver copies nothing)
    again = vm_rr(lease, {0: "a", 1: "a"}, start=T0 + 2 * HOUR)
    enactor.migrate_images(lease, overhead(lease, ReservationKind.MIGRATE, again, transfers={1: ("b", "a")}))
    assert [d["bytes"] for d in log.of("enacted", "move_state")] == [0]
    resume = overhead(lease, ReservationKind.RESUME, again, nodes=again.nodes)
    enactor.resume_vms(lease, resume)
    enactor.resume_vms(lease, resume)
    assert enactor.running_vms(lease) == {0: "a", 1: "a"}
    assert not any(i.name in names for i in driver.list_vms("b"))
    assert len(log.of("enacted", "resume")) == 2 and len(log.of("enactment-skipped", "resume")) == 2
    enactor.kill_vms(lease, again)
    assert not any(i.name in names for i in driver.list_vms("a"))
    assert log.of("enactment-failed") == []
