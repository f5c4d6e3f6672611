"""`leasewise host ...`: add (simulated capacities, libvirt's test:///default), import, list, check (libvirt and
an in-process SSH server for the SSH, SFTP and clock checks) and remove (--drain), against a store in a
temporary directory."""

import json
import re
import socket
import time
from datetime import datetime
from pathlib import Path

import libvirt
import paramiko
import pytest

from drivers.clock import SimulatedClock
from drivers.inventory import HostConfig, dump_inventory
from drivers.simulated import SimulatedDriver
from orchestrator.config import Config
from orchestrator.model.states import LeaseState
from orchestrator.model.timeutil import UTC
from orchestrator.planning.precopy import predict_precopy
from orchestrator.runtime.daemon import Daemon
from orchestrator.state.store import Store
from tests.support.sshserver import SSHServer
from tests.support.stores import snapshot
from tests.support.text import has_row, lines
from tests.support.times import CLI_NOW


def _version(number: int) -> str:
    return f"{number // 1_000_000}.{number // 1000 % 1000}.{number % 1000}"


LIBVIRT_VERSION = _version(libvirt.getVersion())


@pytest.fixture
def libvirt_config(tmp_path):
    path = tmp_path / "libvirt.toml"
    path.write_text('[daemon]\ndriver = "libvirt"\n')
    return path


@pytest.fixture
def site(cli):
    for name in ("lab1", "lab2"):
        result = cli("host", "add", name, "--uri", f"qemu+tcp://10.77.0.1{name[-1]}/system", "--domain-type", "qemu",
                     "--cpus", "8", "--memory", "16384")
        assert result.exit_code == 0, result.output
    return cli




def hosts_in(store_path: Path) -> dict:
    with Store.open(store_path) as store:
        return {h.name: h for h in store.hosts()}


def daemon_step(store_path: Path, at: datetime) -> None:
    with Store.open(store_path) as store:
        driver = SimulatedDriver.for_hosts({h.name: (h.vcpus, h.memory_mib) for h in store.hosts()},
                                           SimulatedClock(at), state_file=store_path.with_suffix(".hosts.json"),
                                           migration_model=predict_precopy)
        Daemon(store, Config(), driver, SimulatedClock(at)).step()


# -- add --------------------------------------------------------------------------------------------------------
def test_add_with_the_simulated_driver_stores_every_setting(cli, store_path, tmp_path):
    result = cli("host", "add", "lab1", "--uri", "qemu+tcp://10.77.0.11/system", "--domain-type", "qemu",
                 "--ssh", "root@10.77.0.11", "--ssh-key", "/keys/id", "--known-hosts", "/keys/known_hosts",
                 "--migration-uri", "tcp://10.77.0.11", "--state-dir", "/srv/save", "--shared-storage",
                 "/var/lib/libvirt/images", "--cpus", "8", "--memory", "16384")
    assert result.exit_code == 0, result.output
    assert lines(result.stdout) == ["host lab1 added: 8 vCPUs, 16384 MiB (given)"]
    record = hosts_in(store_path)["lab1"]
    assert record.config == HostConfig(name="lab1", uri="qemu+tcp://10.77.0.11/system", domain_type="qemu",
                                       ssh="root@10.77.0.11", ssh_key="/keys/id", known_hosts="/keys/known_hosts",
                                       migration_uri="tcp://10.77.0.11", state_dir="/srv/save",
                                       shared_storage=("/var/lib/libvirt/images",))
    assert (record.vcpus, record.memory_mib, record.available) == (8, 16384, True)


def test_add_with_the_simulated_driver_needs_the_capacity(cli, store_path):
    result = cli("host", "add", "lab1", "--uri", "test:///default")
    assert result.exit_code == 2
    [line] = lines(result.stderr)
    assert line.startswith("error: --cpus and --memory: required with the simulated driver")
    assert hosts_in(store_path) == {}


def test_add_refuses_a_duplicate_name(cli, store_path):
    assert cli("host", "add", "lab1", "--uri", "test:///default", "--cpus", "2", "--memory", "512").exit_code == 0
    before = snapshot(store_path)
    again = cli("host", "add", "lab1", "--uri", "test:///other", "--cpus", "4", "--memory", "512")
    assert again.exit_code == 2
    assert lines(again.stderr) == ["error: host 'lab1' already exists"]
    assert snapshot(store_path) == before


def test_add_reads_capacity_from_libvirt(cli, store_path, libvirt_config):
    result = cli("host", "add", "t1", "--uri", "test:///default", "--domain-type", "qemu", config=libvirt_config)
    assert result.exit_code == 0, result.output
    # libvirt's test driver describes a 16-CPU, 3 GiB machine
    assert lines(result.stdout) == [f"host t1 added: 16 vCPUs, 3072 MiB (from libvirt: TEST 0.0.2, libvirt "
                                    f"{LIBVIRT_VERSION})"]
    assert (hosts_in(store_path)["t1"].vcpus, hosts_in(store_path)["t1"].memory_mib) == (16, 3072)
    # an explicit value wins; the other one is still read
    partial = cli("host", "add", "t2", "--uri", "test:///default", "--cpus", "4", config=libvirt_config)
    assert partial.exit_code == 0, partial.output
    assert (hosts_in(store_path)["t2"].vcpus, hosts_in(store_path)["t2"].memory_mib) == (4, 3072)


def test_add_an_unreachable_libvirt_host_is_one_line_naming_it(cli, store_path, libvirt_config):
    with socket.socket() as sock:   # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    began = time.monotonic()
    result = cli("host", "add", "gone", "--uri", f"qemu+tcp://127.0.0.1:{port}/system", config=libvirt_config)
    assert time.monotonic() - began < 10
    assert result.exit_code == 2
    [line] = lines(result.stderr)
    assert line.startswith(f"error: host 'gone' (qemu+tcp://127.0.0.1:{port}/system) is unreachable:"), line
    assert hosts_in(store_path) == {}


# -- import -----------------------------------------------------------------------------------------------------
def inventory(tmp_path: Path, *hosts: HostConfig, name: str = "inventory.toml") -> Path:
    path = tmp_path / name
    path.write_text(dump_inventory(hosts))
    return path


LAB1 = HostConfig(name="lab1", uri="qemu+tcp://10.77.0.11/system", domain_type="qemu", ssh="root@10.77.0.11")
LAB2 = HostConfig(name="lab2", uri="qemu+tcp://10.77.0.12/system", domain_type="qemu", ssh="root@10.77.0.12")
LAB3 = HostConfig(name="lab3", uri="qemu+tcp://10.77.0.13/system", domain_type="qemu")


def test_import_adds_skips_same_and_refuses_conflicts_all_or_nothing(cli, store_path, tmp_path):
    first = cli("host", "import", str(inventory(tmp_path, LAB1, LAB2)), "--cpus", "4", "--memory", "8192")
    assert first.exit_code == 0, first.output
    assert lines(first.stdout) == ["host lab1 added: 4 vCPUs, 8192 MiB", "host lab2 added: 4 vCPUs, 8192 MiB",
                                   "2 added, 0 skipped"]
    assert {n: h.config for n, h in hosts_in(store_path).items()} == {"lab1": LAB1, "lab2": LAB2}

    again = cli("host", "import", str(inventory(tmp_path, LAB1, LAB2, LAB3)), "--cpus", "4", "--memory", "8192")
    assert again.exit_code == 0, again.output
    assert lines(again.stdout) == ["host lab3 added: 4 vCPUs, 8192 MiB",
                                   "host lab1 skipped: already present with the same settings",
                                   "host lab2 skipped: already present with the same settings", "1 added, 2 skipped"]

    before = snapshot(store_path)
    lab4 = HostConfig(name="lab4", uri="qemu+tcp://10.77.0.14/system")
    changed = HostConfig(name="lab2", uri="qemu+tcp://10.77.0.99/system", domain_type="qemu")
    conflict = cli("host", "import", str(inventory(tmp_path, lab4, changed, name="conflict.toml")),
                   "--cpus", "4", "--memory", "8192")
    assert conflict.exit_code == 2
    [line] = lines(conflict.stderr)
    assert "host 'lab2' is already in the store with different settings (uri, ssh differ)" in line
    assert snapshot(store_path) == before and "lab4" not in hosts_in(store_path)


def test_import_reads_capacities_from_libvirt(cli, store_path, tmp_path, libvirt_config):
    t1 = HostConfig(name="t1", uri="test:///default", domain_type="qemu")
    t2 = HostConfig(name="t2", uri="test:///default", domain_type="kvm")
    result = cli("host", "import", str(inventory(tmp_path, t1, t2)), config=libvirt_config)
    assert result.exit_code == 0, result.output
    assert {n: (h.vcpus, h.memory_mib) for n, h in hosts_in(store_path).items()} == {"t1": (16, 3072),
                                                                                      "t2": (16, 3072)}


def test_import_with_the_simulated_driver_needs_the_capacity(cli, store_path, tmp_path):
    result = cli("host", "import", str(inventory(tmp_path, LAB1)))
    assert result.exit_code == 2
    assert "--cpus and --memory: required with the simulated driver" in lines(result.stderr)[0]
    assert hosts_in(store_path) == {}


# -- list -------------------------------------------------------------------------------------------------------
def test_list_shows_capacity_and_the_leases_now_and_planned(site, store_path, clock):
    assert site("lease", "submit", "--cpus", "4", "--memory", "1024", "--duration", "2h").exit_code == 0
    assert site("lease", "submit", "--nodes", "2", "--cpus", "8", "--memory", "1024", "--duration", "1h",
                "--start", "2027-03-01T12:00:00Z").exit_code == 0
    result = site("host", "list")
    assert result.exit_code == 0, result.output
    assert "2 hosts" in result.stdout
    assert has_row(result.stdout, "lab1", "qemu+tcp://10.77.0.11/system", "qemu", "8", "16384 MiB", "yes", "1", "2")
    assert has_row(result.stdout, "lab2", "qemu+tcp://10.77.0.12/system", "qemu", "8", "16384 MiB", "yes", "-", "2")
    rows = json.loads(site("host", "list", "--json").stdout)
    assert [(r["name"], r["vcpus"], r["memory_mib"], r["leases_now"], r["leases_planned"]) for r in rows] == [
        ("lab1", 8, 16384, [1], [2]), ("lab2", 8, 16384, [], [2])]
    assert "reachable" not in rows[0]   # the simulated driver has nothing to ask
    clock["now"] = datetime(2027, 3, 1, 12, 30, tzinfo=UTC)   # lease 1 is over, lease 2 holds both hosts now
    later = json.loads(site("host", "list", "--json").stdout)
    assert [(r["leases_now"], r["leases_planned"]) for r in later] == [([2], []), ([2], [])]


def test_list_with_libvirt_says_whether_hosts_answer(cli, store_path, libvirt_config):
    assert cli("host", "add", "t1", "--uri", "test:///default", config=libvirt_config).exit_code == 0
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert cli("host", "add", "gone", "--uri", f"qemu+tcp://127.0.0.1:{port}/system", "--cpus", "2", "--memory", "512",
               config=libvirt_config).exit_code == 0
    result = cli("host", "list", config=libvirt_config)
    assert result.exit_code == 0, result.output
    assert has_row(result.stdout, "t1", "test:///default", "kvm", "16", "3072 MiB", "yes", "-", "-", "yes",
                   f"TEST 0.0.2, libvirt {LIBVIRT_VERSION}")
    assert re.search(r"│ gone\s*│.*│ no: host info on gone: unable to connect", result.stdout)
    rows = {r["name"]: r for r in json.loads(cli("host", "list", "--json", config=libvirt_config).stdout)}
    assert rows["t1"]["reachable"] is True and rows["t1"]["libvirt_version"] == LIBVIRT_VERSION
    assert rows["gone"]["reachable"] is False and "Connection refused" in rows["gone"]["error"]


# -- check ------------------------------------------------------------------------------------------------------
def test_check_with_the_simulated_driver_says_simulated(site):
    result = site("host", "check", "lab1")
    assert result.exit_code == 0, result.output
    for check in ("transport", "host key", "connect", "versions", "domain type", "image directory", "ssh",
                  "clock skew"):
        assert has_row(result.stdout, check, "simulated", "simulated (simulated driver: nothing contacted)")
    assert "simulated driver: nothing to check" in result.stdout
    # every pair with lab1 on either side, both ways
    pairs = json.loads(site("host", "check", "lab1", "--json").stdout)["pairs"]
    others = {p["destination"] for p in pairs if p["source"] == "lab1"}
    assert others and others == {p["source"] for p in pairs if p["destination"] == "lab1"}
    assert {p["check"] for p in pairs} == {"peer link", "migration port", "cpu"}
    assert {p["status"] for p in pairs} == {"simulated"}


def test_check_against_libvirt_test_driver(cli, tmp_path, libvirt_config):
    state_dir = tmp_path / "save"
    state_dir.mkdir()
    assert cli("host", "add", "t1", "--uri", "test:///default", "--domain-type", "qemu", "--state-dir",
               str(state_dir), config=libvirt_config).exit_code == 0
    result = cli("host", "check", "t1", config=libvirt_config)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert has_row(out, "connect", "PASS", "test:///default: 16 vCPUs, 3072 MiB (store: 16 vCPUs, 3072 MiB)")
    assert has_row(out, "versions", "PASS", f"libvirt {LIBVIRT_VERSION}, TEST 0.0.2")
    assert has_row(out, "domain type", "SKIP", "test:///default has no domain capabilities to ask about qemu; its "
                                               "guests can use domain type test (i686)")
    assert has_row(out, "image directory", "PASS", f"{state_dir} writable (local)")
    assert has_row(out, "ssh", "SKIP", "no ssh configured (needed to move save images between hosts)")
    assert has_row(out, "clock skew", "PASS", "local host: same clock")
    assert has_row(out, "transport", "SKIP", "local (test:///default): no network transport")
    assert has_row(out, "host key", "SKIP", "local link: no SSH")
    assert "all checks passed (4 skipped)" in out
    assert list(state_dir.iterdir()) == []   # the probe file is gone
    data = json.loads(cli("host", "check", "t1", "--json", config=libvirt_config).stdout)
    assert data["ok"] is True and [c["status"] for c in data["checks"]] == ["SKIP", "SKIP", "PASS", "PASS", "SKIP",
                                                                            "PASS", "SKIP", "PASS"]
    assert data["pairs"] == []   # (one host: no pair)


def test_check_fails_with_exit_1_when_the_image_directory_is_missing(cli, tmp_path, libvirt_config):
    missing = tmp_path / "nowhere"
    assert cli("host", "add", "t1", "--uri", "test:///default", "--state-dir", str(missing),
               config=libvirt_config).exit_code == 0
    result = cli("host", "check", "t1", config=libvirt_config)
    assert result.exit_code == 1, result.output
    assert has_row(result.stdout, "image directory", "FAIL", f"{missing} does not exist or is not a directory")
    assert "1 check failed: image directory" in result.stdout


def test_check_an_unreachable_host_fails_every_libvirt_row(cli, libvirt_config):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert cli("host", "add", "gone", "--uri", f"qemu+tcp://127.0.0.1:{port}/system", "--cpus", "2", "--memory",
               "512", config=libvirt_config).exit_code == 0
    data = json.loads(cli("host", "check", "gone", "--json", config=libvirt_config).stdout)
    assert data["ok"] is False
    status = {c["check"]: c["status"] for c in data["checks"]}
    assert (status["connect"], status["versions"], status["domain type"]) == ("FAIL", "FAIL", "FAIL")
    assert status["image directory"] == "SKIP" and status["ssh"] == "SKIP"   # remote, no ssh: cannot look


@pytest.fixture(scope="module")
def keys():
    return paramiko.RSAKey.generate(2048), paramiko.RSAKey.generate(2048)


@pytest.fixture
def ssh_host(keys, tmp_path, cli, libvirt_config):
    """Host t1 (test:///default) whose ssh target is the in-process server; known_hosts holds its key."""
    host_key, client_key = keys
    server = SSHServer(client_key, host_key=host_key)
    key_file = tmp_path / "id_rsa"
    client_key.write_private_key_file(str(key_file))
    known = tmp_path / "known_hosts"
    entries = paramiko.HostKeys()
    entries.add(f"[127.0.0.1]:{server.port}", host_key.get_name(), host_key)
    entries.save(str(known))
    state_dir = tmp_path / "remote-save"
    state_dir.mkdir()
    result = cli("host", "add", "t1", "--uri", "test:///default", "--ssh", f"tester@127.0.0.1:{server.port}",
                 "--ssh-key", str(key_file), "--known-hosts", str(known), "--state-dir", str(state_dir),
                 config=libvirt_config)
    assert result.exit_code == 0, result.output
    yield server, known, state_dir
    server.close()


def test_check_over_ssh_passes_with_a_known_host_key(cli, ssh_host, libvirt_config):
    server, _, state_dir = ssh_host
    data = json.loads(cli("host", "check", "t1", "--json", config=libvirt_config).stdout)
    rows = {c["check"]: c for c in data["checks"]}
    assert rows["ssh"] == {"check": "ssh", "status": "PASS",
                           "detail": f"tester@127.0.0.1:{server.port}: connected, host key known"}
    assert rows["image directory"]["status"] == "PASS"
    assert rows["image directory"]["detail"] == f"{state_dir} writable over SFTP"
    assert rows["clock skew"]["status"] == "PASS"
    assert abs(float(rows["clock skew"]["detail"].split()[0])) <= 1.0
    assert data["ok"] is True and list(state_dir.iterdir()) == []


def test_check_over_ssh_fails_on_clock_skew(cli, ssh_host, libvirt_config):
    server, _, _ = ssh_host
    server.skew = 30.0
    result = cli("host", "check", "t1", config=libvirt_config)
    assert result.exit_code == 1, result.output
    assert re.search(r"│ clock skew\s*│ FAIL\s*│ \+(29|30)\.\d s \(limit ±2 s\)", result.stdout), result.stdout
    assert "1 check failed: clock skew" in result.stdout


def test_check_over_ssh_refuses_an_unknown_host_key(cli, ssh_host, libvirt_config):
    server, known, _ = ssh_host
    known.write_text("")   # RejectPolicy: a key we do not know is refused, never added
    data = json.loads(cli("host", "check", "t1", "--json", config=libvirt_config).stdout)
    rows = {c["check"]: c for c in data["checks"]}
    assert rows["ssh"]["status"] == "FAIL"
    assert f"[127.0.0.1]:{server.port}" in rows["ssh"]["detail"] and "not found in known_hosts" in rows["ssh"]["detail"]
    assert rows["image directory"]["status"] == "FAIL" and rows["clock skew"]["status"] == "FAIL"
    assert known.read_text() == ""


# -- remove -----------------------------------------------------------------------------------------------------
def test_remove_a_free_host(site, store_path):
    result = site("host", "remove", "lab2")
    assert result.exit_code == 0, result.output
    assert lines(result.stdout) == ["host lab2 removed"]
    assert list(hosts_in(store_path)) == ["lab1"]


def test_remove_is_refused_while_reservations_are_planned(site, store_path):
    assert site("lease", "submit", "--cpus", "4", "--memory", "1024", "--duration", "1h").exit_code == 0
    assert site("lease", "submit", "--cpus", "4", "--memory", "1024", "--duration", "1h",
                "--start", "2027-03-01T12:00:00Z").exit_code == 0
    before = snapshot(store_path)
    result = site("host", "remove", "lab1")
    assert result.exit_code == 2
    assert lines(result.stderr) == ["error: host 'lab1' has reservations planned for lease(s) 1, 2: cancel them, "
                                    "or use --drain to requeue them on other hosts"]
    assert snapshot(store_path) == before


def test_drain_requeues_best_effort_leases_onto_the_other_hosts(site, store_path):
    assert site("lease", "submit", "--cpus", "4", "--memory", "1024", "--duration", "1h").exit_code == 0
    assert site("lease", "submit", "--cpus", "4", "--memory", "1024", "--duration", "2h").exit_code == 0
    with Store.open(store_path) as store:
        assert [sorted(l.last_vm.resources) for l in store.leases()] == [["lab1"], ["lab2"]]
    result = site("host", "remove", "lab1", "--drain")
    assert result.exit_code == 0, result.output
    assert lines(result.stdout) == [
        "lease 1 requeued: now planned 2027-03-01T09:00:00Z → 2027-03-01T10:00:00Z on lab2",
        "host lab1 removed"]
    assert list(hosts_in(store_path)) == ["lab2"]
    with Store.open(store_path) as store:
        leases = store.leases()
        assert [(l.state, l.requeues, sorted(l.last_vm.resources)) for l in leases] == [
            (LeaseState.SCHEDULED, 1, ["lab2"]), (LeaseState.SCHEDULED, 0, ["lab2"])]
        assert [e.detail for e in store.events() if e.kind == "host-removed"] == [{"host": "lab1", "drained": [1]}]


def test_drain_replans_later_or_leaves_queued_when_the_other_hosts_are_busy(site, store_path):
    for duration in ("1h", "3h"):   # lease 1 on lab1 until 10:00, lease 2 on lab2 until 12:00
        assert site("lease", "submit", "--cpus", "8", "--memory", "1024", "--duration", duration).exit_code == 0
    result = site("host", "remove", "lab2", "--drain")
    assert result.exit_code == 0, result.output
    assert lines(result.stdout) == [
        "lease 2 requeued: now planned 2027-03-01T10:00:00Z → 2027-03-01T13:00:00Z on lab1", "host lab2 removed"]
    assert site("host", "add", "lab3", "--uri", "test:///default", "--cpus", "8", "--memory", "16384").exit_code == 0
    assert site("lease", "submit", "--cpus", "8", "--memory", "1024", "--duration", "1h").exit_code == 0
    with Store.open(store_path) as store:
        assert sorted(store.lease(3).last_vm.resources) == ["lab3"]
    # lease 3 leaves lab3; lease 2 already holds the one future slot backfilling allows: lease 3 waits
    queued = site("host", "remove", "lab3", "--drain")
    assert queued.exit_code == 0, queued.output
    assert lines(queued.stdout) == ["lease 3 requeued: queued until there is room", "host lab3 removed"]
    with Store.open(store_path) as store:
        assert store.lease(3).state is LeaseState.QUEUED and store.lease(3).reservations == []


def test_drain_refuses_running_leases_and_advance_reservations(site, store_path):
    assert site("lease", "submit", "--cpus", "8", "--memory", "1024", "--duration", "1h").exit_code == 0
    daemon_step(store_path, CLI_NOW)   # lease 1 runs on lab1
    assert site("lease", "submit", "--cpus", "8", "--memory", "1024", "--duration", "1h",
                "--start", "2027-03-01T12:00:00Z").exit_code == 0   # lease 2: an AR, on lab1 as well
    before = snapshot(store_path)
    running = site("host", "remove", "lab1", "--drain")
    assert running.exit_code == 2
    assert lines(running.stderr) == ["error: host 'lab1' cannot be drained: lease(s) 1 run there: `leasewise host "
                                     "drain` it first, and remove it once it is empty"]
    assert site("lease", "cancel", "1").exit_code == 0
    before = snapshot(store_path)
    fixed = site("host", "remove", "lab1", "--drain")
    assert fixed.exit_code == 2
    assert lines(fixed.stderr) == ["error: host 'lab1' cannot be drained: lease(s) 2 are advance reservations or "
                                   "immediate leases (fixed start): cancel them first"]
    assert snapshot(store_path) == before and "lab1" in hosts_in(store_path)
