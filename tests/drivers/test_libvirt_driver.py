"""The libvirt driver against libvirt's in-process test hypervisor (`test:///`), no daemon, no mocks.

Host "a" is `test:///default` (state shared by every open connection in the process, with a stock
"test" domain); host "b" is a `test:///<file>` node of our own, whose state is private to its connection.
Save images are real files: the test driver writes them. Moving them between hosts goes over SFTP to
paramiko servers run in this process, one per host with its own root directory.

Migration cannot be exercised here (the test driver has no virDomainMigrate3); the lab covers it.
"""

import hashlib
import logging
import os
import posixpath
import socket
import sys
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import libvirt  # a hard requirement here: these tests must fail, not vanish, without libvirt-python
import paramiko
import pytest

from drivers.base import HOST_CHECKS, VMSpec
from drivers.deadline import answer_within
from drivers.domain_xml import LEASEWISE_NS, lease_id_from_xml, render_domain_xml
from drivers.errors import (
    DriverConfigError,
    DriverError,
    DriverUnavailable,
    HostUnreachable,
    MigrationFailed,
    OperationFailed,
    UnknownHost,
    VMAlreadyExists,
    VMNotFound,
)
from drivers.inventory import (
    HostConfig,
    dump_inventory,
    load_inventory,
    resolve_inventory_path,
)
from drivers.libvirt import LibvirtDriver
from drivers.libvirt.connection import INSTALL_HINT
from drivers.libvirt.host import format_version
from drivers.registry import create_driver
from orchestrator.planning.precopy import predict_precopy
from tests.support.sshserver import SSHServer

NODE_B = """<node><cpu><nodes>1</nodes><sockets>1</sockets><cores>8</cores><threads>1</threads>
<mhz>2000</mhz><model>x86_64</model></cpu><memory>16777216</memory></node>"""


def name(prefix: str = "vm") -> str:
    """Unique per test: test:///default keeps domains while any connection to it is open."""
    return f"lwt-{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def hosts(tmp_path: Path) -> list[HostConfig]:
    node = tmp_path / "node-b.xml"
    node.write_text(NODE_B)
    return [
        HostConfig("a", "test:///default", domain_type="qemu", state_dir=str(tmp_path)),
        HostConfig("b", f"test://{node}", domain_type="kvm", state_dir=str(tmp_path)),
    ]


@pytest.fixture
def driver(hosts):
    drv = LibvirtDriver(hosts, retry_wait_s=0.0, poll_interval_s=0.05)
    yield drv
    for host in drv.hosts():
        for info in drv.list_vms(host):
            if info.name.startswith("lwt-"):
                drv.stop(info.name, graceful_timeout=0)
    drv.close()


# -- lifecycle ------------------------------------------------------------------------------------


def test_start_list_stop(driver):
    vm = name()
    report = driver.start(VMSpec(vm, 2, 128, lease_id="lease-42"), "a")
    assert (report.operation, report.vm, report.host) == ("start", vm, "a")
    assert report.wall_seconds >= 0
    [info] = [i for i in driver.list_vms("a") if i.name == vm]
    assert (info.state, info.vcpus, info.memory_mib, info.lease_id, info.host) == ("running", 2, 128, "lease-42", "a")
    assert driver.locate(vm) == "a"
    assert all(i.name != vm for i in driver.list_vms("b"))

    assert driver.stop(vm, graceful_timeout=1).operation == "stop"
    assert all(i.name != vm for i in driver.list_vms("a"))
    assert driver.locate(vm) is None


def test_domains_leasewise_did_not_create_have_no_lease_id(driver):
    stock = {i.name: i for i in driver.list_vms("a")}["test"]
    assert stock.lease_id is None and stock.state == "running"


def test_start_twice_raises_vm_already_exists_on_any_host(driver):
    vm = name()
    driver.start(VMSpec(vm, 1, 64), "a")
    with pytest.raises(VMAlreadyExists):
        driver.start(VMSpec(vm, 1, 64), "a")
    with pytest.raises(VMAlreadyExists):
        driver.start(VMSpec(vm, 1, 64), "b")
    assert [i.state for i in driver.list_vms("a") if i.name == vm] == ["running"]


def test_unknown_vm_and_unknown_host_map_to_driver_errors(driver, caplog):
    caplog.set_level(logging.WARNING, logger="drivers.libvirt")
    with pytest.raises(VMNotFound):
        driver.stop("lwt-no-such-vm")
    with pytest.raises(VMNotFound):
        driver.suspend("lwt-no-such-vm", "/tmp/x.save")
    with pytest.raises(VMNotFound):
        driver.migrate("lwt-no-such-vm", "b")
    with pytest.raises(UnknownHost):
        driver.list_vms("nowhere")
    with pytest.raises(UnknownHost):
        driver.start(VMSpec(name(), 1, 64), "nowhere")
    assert not [r for r in caplog.records if "retrying" in r.getMessage()]  # permanent errors are not retried


def test_host_info_reports_the_hypervisor_and_the_configured_domain_type(driver):
    a, b = driver.host_info("a"), driver.host_info("b")
    assert (a.vcpus, a.memory_mib, a.domain_type, a.reachable) == (16, 3072, "qemu", True)
    assert (b.vcpus, b.memory_mib, b.domain_type) == (8, 16384, "kvm")
    assert a.hypervisor.startswith("TEST ")
    assert a.libvirt_version == format_version(libvirt.getVersion())
    assert format_version(9_002_001) == "9.2.1"


def test_unreachable_host_is_retried_then_reported_not_raised(caplog):
    caplog.set_level(logging.WARNING, logger="drivers.libvirt")
    with socket.socket() as probe:  # a local port with nothing listening: connection refused at once
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    drv = LibvirtDriver([HostConfig("down", f"qemu+tcp://127.0.0.1:{port}/system")], retry_attempts=3, retry_wait_s=0.0)
    try:
        info = drv.host_info("down")
        assert not info.reachable and "refused" in info.error.lower()
        retries = [r for r in caplog.records if "retrying" in r.getMessage()]
        assert len(retries) == 2
        with pytest.raises(HostUnreachable):
            drv.list_vms("down")
        # a host known to be down is tried once per call until it answers: no backoff for each caller
        assert len([r for r in caplog.records if "retrying" in r.getMessage()]) == 2
    finally:
        drv.close()


def test_a_dropped_connection_is_reopened(driver):
    vm = name()
    driver.start(VMSpec(vm, 1, 64), "b")
    # What libvirt's close callback (and a transient error) does when the link drops. A test:///<file>
    # node lives only as long as its connection, so the re-opened connection sees a fresh, empty host.
    driver._connections.mark_dropped("b")
    assert all(i.name != vm for i in driver.list_vms("b"))
    driver.start(VMSpec(vm, 1, 64), "b")
    assert [i.name for i in driver.list_vms("b")] == [vm]


def test_a_host_that_does_not_answer_holds_up_neither_the_others_nor_close(hosts):
    with socket.socket() as silent:   # accepts connections (the kernel does) and never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        drv = LibvirtDriver([HostConfig("silent", f"qemu+tcp://127.0.0.1:{silent.getsockname()[1]}/system"),
                             hosts[0]], retry_attempts=1)
        check = drv.check_host("silent", timeout_s=0.5)
        connect = {item.check: item for item in check.items}["connect"]
        assert connect.status == "FAIL"
        assert connect.detail.endswith("no answer within 0.5 s")
        # the connect to "silent" still waits in its thread; the other host and close do not wait for it
        other = answer_within(lambda: drv.host_info("a"), 5)
        assert not other.timed_out and other.value.reachable
        assert not answer_within(drv.close, 5).timed_out


def test_a_call_to_a_host_that_does_not_answer_fails_after_the_connect_timeout_and_then_at_once(hosts):
    """libvirt has no connect timeout: without one, this call would wait for the silent host for ever (a
    host that drops every packet: minutes of SYN retries, then tenacity's). The connect goes on in its own
    thread; the calls after the first fail at once instead of starting another."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        drv = LibvirtDriver([HostConfig("silent", f"qemu+tcp://127.0.0.1:{silent.getsockname()[1]}/system"),
                             hosts[0]], retry_attempts=4, retry_wait_s=0.0, connect_timeout_s=0.5)
        try:
            first = answer_within(lambda: drv.list_vms("silent"), 10)
            assert isinstance(first.error, HostUnreachable), first
            # (the listing, a question, and the connect under it give up at the same time: either says so)
            assert str(first.error).startswith("list domains on silent: no answer")
            assert str(first.error).endswith("within 0.5 s")
            connects = [t for t in threading.enumerate() if t.name == "leasewise-connect-silent"]
            assert len(connects) == 1
            again = answer_within(lambda: drv.host_info("silent"), 0.4)   # (less than the connect timeout)
            assert not again.timed_out and not again.value.reachable and "no answer" in again.value.error
            assert [t for t in threading.enumerate() if t.name == "leasewise-connect-silent"] == connects
            assert drv.list_vms("a") is not None   # the other host answers meanwhile
        finally:
            assert not answer_within(drv.close, 5).timed_out


def test_questions_to_many_hosts_give_each_hosts_answer_and_raise_a_fault_that_is_no_hosts(driver):
    """`Connections.ask_each`: a host's own error is its answer; an error of the question itself (a bug, not
    the host) is raised, once every host's question is accounted for."""
    connections = driver._connections
    answers = connections.ask_each("read", {"a": lambda conn: conn.getHostname(),
                                            "b": lambda conn: conn.lookupByName("lwt-no-such-vm")}, vm="lwt-no-such-vm")
    assert list(answers) == ["a", "b"]
    assert isinstance(answers["a"], str) and isinstance(answers["b"], VMNotFound)
    with pytest.raises(ZeroDivisionError):
        connections.ask_each("divide", {"a": lambda conn: 1 / 0, "b": lambda conn: conn.getHostname()})
    assert connections.ask_each("read", {"b": lambda conn: conn.getHostname()})["b"]   # (nothing left open)


def test_every_host_is_asked_at_once_and_silent_hosts_hold_the_look_up_once(hosts):
    """The daemon's look: three hosts that never answer cost the look one connect timeout, not three, and
    the host that answers is listed; while their questions and connects are open, the next look does not
    wait for them."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        mute = [HostConfig(f"mute{i}", f"qemu+tcp://127.0.0.1:{silent.getsockname()[1]}/system") for i in range(3)]
        drv = LibvirtDriver([*mute, hosts[0]], retry_attempts=4, retry_wait_s=0.0, connect_timeout_s=0.5)
        try:
            vm = name()
            for look in range(2):
                began = time.monotonic()
                every = drv.list_every_host()
                took = time.monotonic() - began
                assert list(every) == ["mute0", "mute1", "mute2", "a"]
                assert [v.name for v in every["a"] if v.name == vm] == ([vm] if look else [])
                for host in ("mute0", "mute1", "mute2"):
                    assert isinstance(every[host], HostUnreachable), every[host]
                    assert str(every[host]).startswith(f"list domains on {host}: ")
                assert (0.5 <= took < 1.5) if look == 0 else took < 0.4, (look, took)
                if look == 0:
                    drv.start(VMSpec(vm, 1, 64), "a")   # (the silent hosts are not waited for here either)
        finally:
            assert not answer_within(drv.close, 5).timed_out


# -- host checks ------------------------------------------------------------------------------------


def test_check_host_on_the_test_hypervisor(driver, tmp_path):
    check = driver.check_host("a", timeout_s=10)
    details = {item.check: (item.status, item.detail) for item in check.items}
    assert [item.check for item in check.items] == list(HOST_CHECKS) and check.ok
    assert details["connect"] == ("PASS", "test:///default: 16 vCPUs, 3072 MiB")
    assert details["versions"] == ("PASS", f"libvirt {format_version(libvirt.getVersion())}, TEST 0.0.2")
    assert details["domain type"][0] == "SKIP"   # the test hypervisor has no domain capabilities
    assert details["image directory"] == ("PASS", f"{tmp_path} writable (local)")
    assert details["ssh"][0] == "SKIP" and details["clock skew"] == ("PASS", "local host: same clock")
    with pytest.raises(UnknownHost):
        driver.check_host("nowhere")


def test_check_host_over_ssh_looks_at_the_image_directory_and_the_clock(ssh_hosts):
    servers, configs, _ = ssh_hosts
    (servers["src"].root / "save").mkdir()
    config = HostConfig("src", configs[0].uri, ssh=configs[0].ssh, ssh_key=configs[0].ssh_key,
                        known_hosts=configs[0].known_hosts, state_dir="/save")
    drv = LibvirtDriver([config], retry_attempts=1)
    try:
        check = drv.check_host("src", timeout_s=10)
        assert check.ok, check
        details = {item.check: item.detail for item in check.items}
        assert details["ssh"] == f"{config.ssh}: connected, host key known"
        assert details["image directory"] == "/save writable over SFTP"
        assert list((servers["src"].root / "save").iterdir()) == []   # the probe file is gone
        servers["src"].skew = 30.0
        skewed = drv.check_host("src", timeout_s=10)
        assert skewed.failed == ["clock skew"]
        missing = HostConfig("dst", configs[1].uri, ssh=configs[1].ssh, ssh_key=configs[1].ssh_key,
                             known_hosts=configs[1].known_hosts, state_dir="/nowhere")
    finally:
        drv.close()
    drv = LibvirtDriver([missing], retry_attempts=1)
    try:
        assert drv.check_host("dst", timeout_s=10).failed == ["image directory"]
    finally:
        drv.close()


# -- save / restore --------------------------------------------------------------------------------


def test_suspend_and_resume_on_the_same_host(driver, tmp_path):
    vm = name()
    path = str(tmp_path / f"{vm}.save")
    driver.start(VMSpec(vm, 1, 64, lease_id="L1"), "a")
    saved = driver.suspend(vm, path)
    assert saved.operation == "suspend" and saved.host == "a"
    assert saved.bytes == os.path.getsize(path) > 0  # the test driver writes a real (small) image
    assert [(i.state, i.lease_id) for i in driver.list_vms("a") if i.name == vm] == [("saved", "L1")]

    resumed = driver.resume(vm, path, "a")
    assert (resumed.operation, resumed.host) == ("resume", "a")
    assert [(i.state, i.lease_id) for i in driver.list_vms("a") if i.name == vm] == [("running", "L1")]
    with pytest.raises(VMAlreadyExists):
        driver.resume(vm, path, "a")


def test_resume_on_another_host_moves_the_definition(driver, tmp_path):
    vm = name()
    path = str(tmp_path / f"{vm}.save")
    driver.start(VMSpec(vm, 1, 64, lease_id="L2"), "a")
    driver.suspend(vm, path)
    driver.resume(vm, path, "b")
    assert [(i.state, i.lease_id) for i in driver.list_vms("b") if i.name == vm] == [("running", "L2")]
    assert all(i.name != vm for i in driver.list_vms("a"))  # the stale saved definition is gone
    assert driver.locate(vm) == "b"
    driver.stop(vm, graceful_timeout=0)
    assert all(i.name != vm for i in driver.list_vms("b"))  # persistent on b, so stop undefined it


def test_resume_refuses_a_missing_image_or_an_image_of_another_vm(driver, tmp_path):
    vm, other = name(), name()
    path = str(tmp_path / f"{vm}.save")
    with pytest.raises(OperationFailed, match="cannot read"):
        driver.resume(vm, str(tmp_path / "missing.save"), "a")
    driver.start(VMSpec(vm, 1, 64), "a")
    driver.suspend(vm, path)
    with pytest.raises(OperationFailed, match="holds VM"):
        driver.resume(other, path, "b")
    assert driver.locate(other) is None


def test_stopping_a_saved_vm_undefines_it(driver, tmp_path):
    vm = name()
    driver.start(VMSpec(vm, 1, 64), "a")
    driver.suspend(vm, str(tmp_path / "s.save"))
    driver.stop(vm)
    assert driver.locate(vm) is None


def test_permanent_error_maps_to_operation_failed_and_leaves_the_vm_running(driver, tmp_path):
    vm = name()
    driver.start(VMSpec(vm, 1, 64), "a")
    # The test hypervisor does not implement VIR_DOMAIN_SAVE_BYPASS_CACHE (QEMU does).
    with pytest.raises(OperationFailed, match="unsupported flags"):
        driver.suspend(vm, str(tmp_path / "x.save"), bypass_cache=True)
    assert [i.state for i in driver.list_vms("a") if i.name == vm] == ["running"]


def test_migration_on_the_test_hypervisor_fails_cleanly_with_the_vm_on_the_source(driver):
    vm = name()
    driver.start(VMSpec(vm, 1, 64), "a")
    with pytest.raises(MigrationFailed, match="not supported") as caught:
        driver.migrate(vm, "b", max_downtime_ms=100, timeout_s=5)
    report = caught.value.report
    assert (report.success, report.outcome, report.source, report.destination) == (False, "failed", "a", "b")
    assert report.memory_total == 64 * 2**20
    assert driver.locate(vm) == "a"
    assert [i.state for i in driver.list_vms("a") if i.name == vm] == ["running"]
    with pytest.raises(ValueError, match="on_timeout"):
        driver.migrate(vm, "b", on_timeout="later")  # type: ignore[arg-type]


# -- libvirt-python missing -------------------------------------------------------------------------


def test_missing_libvirt_python_gives_driver_unavailable_with_install_hint(monkeypatch, hosts):
    monkeypatch.setitem(sys.modules, "libvirt", None)  # makes `import libvirt` raise ImportError
    with pytest.raises(DriverUnavailable) as caught:
        LibvirtDriver(hosts)
    assert str(caught.value) == INSTALL_HINT
    assert "pip install 'leasewise[libvirt]'" in str(caught.value)
    with pytest.raises(DriverUnavailable):
        create_driver("libvirt", hosts=hosts)


def test_registry_builds_by_name_and_rejects_unknown_names(hosts):
    drv = create_driver("libvirt", hosts=hosts)
    try:
        assert isinstance(drv, LibvirtDriver) and drv.hosts() == ["a", "b"]
    finally:
        drv.close()
    assert create_driver("simulated", hosts={"h": (1, 1)}, migration_model=predict_precopy).hosts() == ["h"]
    with pytest.raises(DriverConfigError, match="unknown driver 'xen'"):
        create_driver("xen")


# -- domain XML -------------------------------------------------------------------------------------


def test_domain_xml_escapes_user_values_and_round_trips_the_lease_id():
    spec = VMSpec(
        'a<b>&"c', 2, 256, disk_image="/img/disk one.qcow2", kernel="/boot/vmlinuz", initrd="/boot/initrd",
        cmdline='console=ttyS0 x="<y>"', network="br-lab", lease_id="L&<1>",
    )
    xml = render_domain_xml(spec, "kvm", uuid="6b3c5a4e-2f3c-4b6d-9a55-000000000001")
    root = ET.fromstring(xml)
    assert root.get("type") == "kvm"
    assert root.findtext("name") == 'a<b>&"c'
    assert root.find("memory").get("unit") == "MiB" and root.findtext("memory") == "256"
    assert root.findtext("vcpu") == "2"
    assert root.findtext("os/kernel") == "/boot/vmlinuz" and root.findtext("os/cmdline") == 'console=ttyS0 x="<y>"'
    disk = root.find("devices/disk")
    assert disk.find("source").get("file") == "/img/disk one.qcow2"
    assert disk.find("target").get("bus") == "virtio" and disk.find("driver").get("type") == "qcow2"
    assert root.find("devices/interface").get("type") == "bridge"
    assert root.find("devices/interface/source").get("bridge") == "br-lab"
    assert root.find("devices/serial") is not None
    assert root.find(f"metadata/{{{LEASEWISE_NS}}}lease") is not None
    assert lease_id_from_xml(xml) == "L&<1>"


def test_domain_xml_without_optional_parts():
    root = ET.fromstring(render_domain_xml(VMSpec("plain", 1, 64, disk_image="/d.img"), "qemu"))
    assert root.find("metadata") is None and root.find("devices/interface") is None
    assert root.find("os/boot").get("dev") == "hd"
    assert root.find("devices/disk/driver").get("type") == "raw"
    assert lease_id_from_xml("<domain type='kvm'><name>x</name></domain>") is None
    with pytest.raises(ValueError, match="domain_type"):
        render_domain_xml(VMSpec("x", 1, 64), "xen")
    with pytest.raises(ValueError, match="kernel"):
        render_domain_xml(VMSpec("x", 1, 64, cmdline="quiet"), "kvm")


def test_lease_id_survives_libvirt_rewriting_the_xml(driver):
    vm = name()
    driver.start(VMSpec(vm, 1, 64, lease_id="lease-xyz"), "b")
    conn = libvirt.open("test:///default")
    try:
        # libvirt re-serialises (reindents, adds defaults); the parser must still find our metadata.
        dom = conn.defineXML(render_domain_xml(VMSpec(name(), 1, 64, lease_id="lease-abc"), "qemu"))
        assert lease_id_from_xml(dom.XMLDesc(0)) == "lease-abc"
        dom.undefine()
    finally:
        conn.close()
    assert [i.lease_id for i in driver.list_vms("b")] == ["lease-xyz"]


# -- inventory --------------------------------------------------------------------------------------

LAB = """
[[host]]
name = "lab1"
uri = "qemu+tcp://10.77.0.11/system"
domain_type = "qemu"
ssh = "root@10.77.0.11"
ssh_key = "/keys/id_ed25519"
known_hosts = "/keys/known_hosts"
migration_uri = "tcp://10.77.0.11"
state_dir = "/var/lib/libvirt/qemu/save"
shared_storage = ["/var/lib/libvirt/images"]

[[host]]
name = "lab2"
uri = "qemu+tcp://10.77.0.12/system"
"""


def test_inventory_loads_defaults_and_round_trips(tmp_path):
    path = tmp_path / "inventory.toml"
    path.write_text(LAB)
    lab1, lab2 = load_inventory(path)
    assert lab1 == HostConfig(
        "lab1", "qemu+tcp://10.77.0.11/system", "qemu", "root@10.77.0.11", "/keys/id_ed25519",
        "/keys/known_hosts", "tcp://10.77.0.11", "/var/lib/libvirt/qemu/save", ("/var/lib/libvirt/images",),
    )
    assert (lab2.domain_type, lab2.ssh, lab2.shared_storage) == ("kvm", None, ())
    assert lab1.is_remote and lab1.is_shared("/var/lib/libvirt/images/x.save")
    assert not lab1.is_shared("/var/lib/libvirt/images-other/x.save")
    again = tmp_path / "again.toml"
    again.write_text(dump_inventory([lab1, lab2]))
    assert load_inventory(again) == [lab1, lab2]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (LAB.replace('domain_type = "qemu"', 'domain_type = "xen"'), "host 'lab1'.domain_type: must be one of kvm, qemu"),
        (LAB.replace('migration_uri', 'migrate_uri'), "host 'lab1'.migrate_uri: unknown key"),
        (LAB.replace('"lab2"', '"lab1"'), "host 'lab1'.name: duplicate host name"),
        (LAB.replace('uri = "qemu+tcp://10.77.0.12/system"', ""), "host 'lab2'.uri: is required"),
        (LAB.replace('state_dir = "/var/lib/libvirt/qemu/save"', 'state_dir = "save"'), "state_dir: must be an absolute path"),
        (LAB.replace('["/var/lib/libvirt/images"]', '"/var/lib/libvirt/images"'), "shared_storage: must be a list"),
        ("[[host]]\nname = 3\nuri = 'test:///default'\n", "host[0].name: must be a string"),
        (LAB.replace('ssh_key = "/keys/id_ed25519"', 'peer_ssh_key = "keys/copy"'),
         "host 'lab1'.peer_ssh_key: must be an absolute path on the host"),
        (LAB.replace('ssh_key = "/keys/id_ed25519"', 'peer_known_hosts = "/keys/known_hosts"'),
         "host 'lab1'.peer_known_hosts: needs peer_ssh_key"),
        ("title = 'lab'\n" + LAB, "title: unknown top-level key"),
        ("", "host: no [[host]] entries"),
        ("[[host]\n", "inventory: is not valid TOML"),
    ],
)
def test_inventory_errors_are_one_line_naming_the_key(tmp_path, text, message):
    path = tmp_path / "inventory.toml"
    path.write_text(text)
    with pytest.raises(DriverConfigError) as caught:
        load_inventory(path)
    assert message in str(caught.value)
    assert str(caught.value).startswith(str(path))
    assert "\n" not in str(caught.value)


def test_inventory_path_resolution(tmp_path):
    assert resolve_inventory_path("x.toml", env={"LEASEWISE_INVENTORY": "y.toml"}) == Path("x.toml")
    assert resolve_inventory_path(None, env={"LEASEWISE_INVENTORY": "y.toml"}, cwd=tmp_path) == Path("y.toml")
    assert resolve_inventory_path(None, env={}, cwd=tmp_path) is None
    lab = tmp_path / "deploy/lab/run/inventory.toml"
    lab.parent.mkdir(parents=True)
    lab.write_text(LAB)
    assert resolve_inventory_path(None, env={}, cwd=tmp_path) == lab


# -- move_state over SFTP ---------------------------------------------------------------------------


@pytest.fixture
def ssh_hosts(tmp_path):
    client_key = paramiko.ECDSAKey.generate()
    key_file = tmp_path / "id_ecdsa"
    client_key.write_private_key_file(str(key_file))
    servers = {n: SSHServer(client_key, root=tmp_path / f"root-{n}") for n in ("src", "dst")}
    known = paramiko.HostKeys()
    for server in servers.values():
        server.root.mkdir()
        known.add(f"[127.0.0.1]:{server.port}", server.host_key.get_name(), server.host_key)
    known_file = tmp_path / "known_hosts"
    known.save(str(known_file))
    configs = [
        HostConfig(n, "test:///default", ssh=f"tester@127.0.0.1:{s.port}", ssh_key=str(key_file),
                   known_hosts=str(known_file), shared_storage=("/shared",))
        for n, s in servers.items()
    ]
    yield servers, configs, tmp_path
    for server in servers.values():
        server.close()


def test_move_state_copies_the_image_over_sftp(ssh_hosts):
    servers, configs, _ = ssh_hosts
    image = os.urandom(3 * 1024 * 1024 + 17)
    (servers["src"].root / "save").mkdir()
    (servers["dst"].root / "save").mkdir()
    (servers["src"].root / "save/vm.save").write_bytes(image)
    drv = LibvirtDriver(configs, retry_wait_s=0.0)
    try:
        report = drv.move_state("/save/vm.save", "src", "dst")
    finally:
        drv.close()
    assert (report.operation, report.host, report.bytes, report.route) == ("move_state", "dst", len(image), "relay")
    assert (servers["dst"].root / "save/vm.save").read_bytes() == image
    assert sorted(p.name for p in (servers["dst"].root / "save").iterdir()) == ["vm.save"]  # no partial file left


def test_move_state_rejects_unknown_host_keys(ssh_hosts):
    servers, configs, tmp_path = ssh_hosts
    (servers["src"].root / "vm.save").write_bytes(b"image")
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    strangers = [HostConfig(c.name, c.uri, ssh=c.ssh, ssh_key=c.ssh_key, known_hosts=str(empty)) for c in configs]
    drv = LibvirtDriver(strangers, retry_wait_s=0.0)
    try:
        with pytest.raises(OperationFailed, match="not found in known_hosts"):
            drv.move_state("/vm.save", "src", "dst")
    finally:
        drv.close()
    assert not (servers["dst"].root / "vm.save").exists()


def test_move_state_without_copy_or_without_ssh(ssh_hosts, hosts):
    servers, configs, _ = ssh_hosts
    drv = LibvirtDriver(configs, retry_wait_s=0.0)
    try:
        assert drv.move_state("/shared/vm.save", "src", "dst").bytes == 0   # shared storage: nothing to copy
        assert drv.move_state("/save/vm.save", "src", "src").bytes == 0
        with pytest.raises(OperationFailed, match="no save image"):
            drv.move_state("/missing.save", "src", "dst")
    finally:
        drv.close()
    plain = LibvirtDriver(hosts, retry_wait_s=0.0)  # no ssh settings
    try:
        with pytest.raises(OperationFailed, match="no ssh setting"):
            plain.move_state("/var/x.save", "a", "b")
    finally:
        plain.close()


def test_remove_state_over_sftp_here_or_not_at_all(ssh_hosts, hosts, tmp_path):
    servers, configs, _ = ssh_hosts
    (servers["src"].root / "vm.save").write_bytes(b"image")
    # a remote URI (never contacted here): the host's files are not this machine's
    far = [HostConfig(c.name, "qemu+tcp://127.0.0.1:1/system", ssh=c.ssh, ssh_key=c.ssh_key,
                      known_hosts=c.known_hosts) for c in configs]
    drv = LibvirtDriver(far, retry_wait_s=0.0)
    try:
        drv.remove_state("/vm.save", "src")             # over SFTP
        assert not (servers["src"].root / "vm.save").exists()
        drv.remove_state("/vm.save", "src")             # not there: nothing to do
    finally:
        drv.close()
    local = tmp_path / "local.save"
    local.write_bytes(b"image")
    here = LibvirtDriver(hosts, retry_wait_s=0.0)       # test:/// hosts: their files are this machine's
    try:
        here.remove_state(str(local), "a")
        assert not local.exists()
    finally:
        here.close()
    remote = LibvirtDriver([HostConfig("far", "qemu+tcp://127.0.0.1:1/system")], retry_wait_s=0.0)
    try:
        with pytest.raises(OperationFailed, match=r"left /x.save on far \(no ssh setting to remove it\)"):
            remote.remove_state("/x.save", "far")
    finally:
        remote.close()


# -- base images on hosts without shared storage ---------------------------------------------------


def test_local_storage_image_checksum_is_computed_on_the_host_over_ssh(ssh_hosts):
    servers, configs, _ = ssh_hosts
    data = os.urandom(2 * 1024 * 1024 + 5)
    (servers["src"].root / "images").mkdir()
    (servers["src"].root / "images" / "base img.qcow2").write_bytes(data)
    drv = LibvirtDriver(configs, retry_attempts=1)
    try:
        assert drv.image_checksum("src", "/images/base img.qcow2") == hashlib.sha256(data).hexdigest()
        assert drv.image_checksum("dst", "/images/base img.qcow2") is None   # (no such file there)
        with pytest.raises(OperationFailed, match="not an absolute path"):
            drv.image_checksum("src", "images/base.qcow2")
    finally:
        drv.close()


def test_local_storage_an_upload_the_host_cannot_take_fails_and_leaves_no_volume(driver, tmp_path):
    # (libvirt's test hypervisor has no volume upload: the copy fails as on a host whose libvirt refuses it)
    source = tmp_path / "base.qcow2"
    source.write_bytes(os.urandom(4096))
    target = f"/default-pool/{name('img')}.qcow2"
    with pytest.raises(DriverError, match="virStorageVolUpload"):
        driver.upload_image("a", target, str(source))
    conn = libvirt.open("test:///default")
    try:
        pool = conn.storagePoolLookupByName("default-pool")
        pool.refresh(0)
        assert posixpath.basename(target) not in pool.listVolumes()
    finally:
        conn.close()


def test_a_migration_s_bandwidth_limit_is_libvirt_s_bandwidth_parameter(driver, hosts):
    """What `[scheduling] live_migration_bandwidth_limit` becomes: VIR_MIGRATE_PARAM_BANDWIDTH in whole
    MiB/s (rounded up, at least 1); none given, none set (libvirt's unlimited)."""
    import libvirt

    src, dst = hosts[0], hosts[1]
    migrations = driver._migrations
    _, params = migrations._flags_and_params(src, dst, 12.3)
    assert params[libvirt.VIR_MIGRATE_PARAM_BANDWIDTH] == 13
    _, params = migrations._flags_and_params(src, dst, 0.2)
    assert params[libvirt.VIR_MIGRATE_PARAM_BANDWIDTH] == 1
    _, params = migrations._flags_and_params(src, dst, None)
    assert libvirt.VIR_MIGRATE_PARAM_BANDWIDTH not in params
