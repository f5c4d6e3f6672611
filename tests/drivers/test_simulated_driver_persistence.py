"""Simulated hosts that outlive the process: the `state_file` of `SimulatedDriver`."""

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from drivers.base import VMSpec
from drivers.clock import SimulatedClock
from drivers.errors import OperationFailed, UnknownHost, VMNotFound
from drivers.inventory import HostConfig
from drivers.simulated import SimulatedDriver, SimulatedDriverConfig
from drivers.simulated.state_file import read_state
from orchestrator.model.timeutil import UTC
from orchestrator.planning.precopy import predict_precopy

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SHARED = "/srv/shared"
HOSTS = {"a": (8, 8192), "b": (8, 8192)}
CONFIG = SimulatedDriverConfig(shared_storage=(SHARED,))


def make(state_file, clock: SimulatedClock | None = None, hosts=HOSTS) -> SimulatedDriver:
    return SimulatedDriver(hosts, clock or SimulatedClock(T0), CONFIG, state_file=state_file, migration_model=predict_precopy)


def snapshot(driver: SimulatedDriver) -> dict:
    return {h: sorted((i.name, i.state, i.vcpus, i.memory_mib, i.lease_id) for i in driver.list_vms(h))
            for h in driver.hosts()}


def test_vms_and_save_images_survive_a_new_driver_on_the_same_file(tmp_path):
    path = tmp_path / "hosts.json"
    first = make(path)
    assert not path.exists()  # nothing changed yet
    first.start(VMSpec("run", 2, 1024, lease_id="1", dirty_rate_mib_s=3.5, working_set_mib=100.0), "a")
    first.start(VMSpec("local", 1, 256, lease_id="2"), "a")
    first.start(VMSpec("shared", 1, 128, lease_id="3"), "b")
    first.suspend("local", "/var/save/local.save")
    first.move_state("/var/save/local.save", "a", "b")
    first.suspend("shared", f"{SHARED}/shared.save")
    assert path.is_file()

    second = make(path, SimulatedClock(T0 + timedelta(days=1)))
    assert snapshot(second) == snapshot(first) == {
        "a": [("local", "saved", 1, 256, "2"), ("run", "running", 2, 1024, "1")],
        "b": [("shared", "saved", 1, 128, "3")],
    }
    assert second.state_file_exists("a", "/var/save/local.save") and second.state_file_exists("b", "/var/save/local.save")
    assert second.state_file_exists("a", f"{SHARED}/shared.save")  # shared storage: every host sees it
    assert second.clock.now() == T0 + timedelta(days=1)  # the clock is the caller's, never stored
    assert second._state.vms["run"].spec == first._state.vms["run"].spec  # the whole spec, dirty rate included

    # the restored state behaves like the original: resumption elsewhere, capacity, stop
    second.resume("local", "/var/save/local.save", "b")
    second.resume("shared", f"{SHARED}/shared.save", "a")
    with pytest.raises(OperationFailed, match="free vCPUs"):
        second.start(VMSpec("big", 6, 10), "a")  # run (2) + shared (1) already hold 3 of 8
    second.stop("run")

    third = make(path)
    assert snapshot(third) == {"a": [("shared", "running", 1, 128, "3")], "b": [("local", "running", 1, 256, "2")]}
    third.stop("shared")
    third.stop("local")
    assert snapshot(make(path)) == {"a": [], "b": []}


def test_migration_is_persisted(tmp_path):
    path = tmp_path / "hosts.json"
    first = make(path)
    first.start(VMSpec("m", 1, 64), "a")
    first.migrate("m", "b")
    assert make(path).locate("m") == "b"


def test_a_removed_save_image_is_gone_for_a_new_driver_too(tmp_path):
    path = tmp_path / "hosts.json"
    first = make(path)
    first.start(VMSpec("r", 1, 64), "a")
    first.suspend("r", "/var/save/r.save")
    first.remove_state("/var/save/r.save", "a")
    assert not make(path).state_file_exists("a", "/var/save/r.save")


def test_a_guest_that_powers_off_stays_defined_as_shutoff_and_frees_its_host(tmp_path):
    path = tmp_path / "hosts.json"
    first = make(path, hosts={"a": (1, 1024), "b": (1, 1024)})
    first.start(VMSpec("g", 1, 512), "a")
    before = first.clock.now()
    first.guest_poweroff("g")
    assert first.clock.now() == before  # the guest did it, not the driver
    with pytest.raises(OperationFailed, match="not running"):
        first.guest_poweroff("g")
    with pytest.raises(VMNotFound):
        first.guest_poweroff("nobody")
    again = make(path, hosts={"a": (1, 1024), "b": (1, 1024)})
    assert snapshot(again) == {"a": [("g", "shutoff", 1, 512, None)], "b": []}
    again.start(VMSpec("h", 1, 512), "a")  # a shut-off VM holds no capacity
    assert again.stop("g").wall_seconds == 0
    assert snapshot(make(path, hosts={"a": (1, 1024), "b": (1, 1024)}))["a"] == [("h", "running", 1, 512, None)]


def test_state_survives_sigkill_of_the_process_that_wrote_it(tmp_path):
    path = tmp_path / "hosts.json"
    script = textwrap.dedent(f"""
        import sys, time
        from datetime import datetime
        from drivers.base import VMSpec
        from drivers.simulated import SimulatedDriver
        from drivers.clock import SimulatedClock
        from orchestrator.model.timeutil import UTC
        from orchestrator.planning.precopy import predict_precopy
        driver = SimulatedDriver({HOSTS!r}, SimulatedClock(datetime(2026, 1, 5, tzinfo=UTC)), state_file={str(path)!r}, migration_model=predict_precopy)
        driver.start(VMSpec("lw-1-0", 1, 64, lease_id="1"), "a")
        driver.start(VMSpec("lw-1-1", 1, 64, lease_id="1"), "b")
        driver.suspend("lw-1-1", "/var/save/lw-1-1.save")
        print("ready", flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[2])
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    restarted = make(path)
    assert snapshot(restarted) == {"a": [("lw-1-0", "running", 1, 64, "1")], "b": [("lw-1-1", "saved", 1, 64, "1")]}
    restarted.resume("lw-1-1", "/var/save/lw-1-1.save", "b")


class Crash(BaseException):
    """The process dies here (not an error anyone handles)."""


def test_an_operation_appends_what_it_changed_and_a_new_driver_reads_it_back(tmp_path):
    path = tmp_path / "hosts.json"
    driver = make(path)
    driver.start(VMSpec("one", 1, 64), "a")
    first = path.read_bytes()
    assert first.count(b"\n") == 1   # the first write is the whole state
    driver.start(VMSpec("two", 1, 64), "b")
    driver.suspend("two", "/var/save/two.save")
    lines = path.read_bytes().split(b"\n")
    assert path.read_bytes().startswith(first) and len(lines) == 4 and lines[-1] == b""
    # each line holds the one operation's change, not every VM
    assert list(json.loads(lines[1])["vms"]) == ["two"] and json.loads(lines[2])["vms"]["two"]["state"] == "saved"
    assert "one" not in lines[2].decode()
    assert snapshot(make(path)) == snapshot(driver) == {"a": [("one", "running", 1, 64, None)],
                                                        "b": [("two", "saved", 1, 64, None)]}
    assert read_state(path)["vms"]["two"]["state"] == "saved"


def test_a_line_cut_short_by_a_crash_is_an_operation_that_did_not_happen(tmp_path):
    path = tmp_path / "hosts.json"
    driver = make(path)
    driver.start(VMSpec("one", 1, 64), "a")
    driver.start(VMSpec("two", 1, 64), "b")
    before = snapshot(make(path))
    driver.stop("one")
    whole = path.read_bytes()
    path.write_bytes(whole[:-7])   # the process died while appending the stop's line
    assert snapshot(make(path)) == before


def test_a_state_file_removed_under_the_driver_is_written_afresh_at_the_next_operation(tmp_path):
    path = tmp_path / "hosts.json"
    driver = make(path)
    driver.start(VMSpec("one", 1, 64), "a")
    driver.start(VMSpec("two", 1, 64), "b")
    path.unlink()   # (an operator cleaning up, or a tmp cleaner)
    driver.stop("two")
    assert path.read_bytes().count(b"\n") == 1   # the whole state again, not a change to a missing file
    assert snapshot(make(path)) == snapshot(driver) == {"a": [("one", "running", 1, 64, None)], "b": []}


def test_many_operations_rewrite_the_file_whole_atomically_and_nothing_is_lost(tmp_path, monkeypatch):
    path = tmp_path / "hosts.json"
    driver = make(path, hosts={"a": (4096, 1 << 30), "b": (4096, 1 << 30)})
    rng = random.Random(5)
    names: list[str] = []
    rewrote = False
    for i in range(400):
        before = path.read_bytes() if path.exists() else b""
        if names and rng.random() < 0.3:
            driver.stop(names.pop(rng.randrange(len(names))))
        else:
            names.append(f"vm{i}")
            driver.start(VMSpec(names[-1], 1, 64), rng.choice("ab"))
        if before and not path.read_bytes().startswith(before):
            rewrote = True
            assert path.read_bytes().count(b"\n") == 1   # written whole: one line again
        if i % 50 == 0:
            assert snapshot(make(path, hosts={"a": (4096, 1 << 30), "b": (4096, 1 << 30)})) == snapshot(driver)
    assert rewrote   # (the journal outgrew the first line)
    assert snapshot(make(path, hosts={"a": (4096, 1 << 30), "b": (4096, 1 << 30)})) == snapshot(driver)

    # a crash while the file is written whole leaves it as it was
    while True:
        before = path.read_bytes()

        def crash(src, dst):
            raise Crash()

        monkeypatch.setattr(os, "replace", crash)
        try:
            names.append(f"x{len(names)}")
            driver.start(VMSpec(names[-1], 1, 64), "a")
        except Crash:
            monkeypatch.undo()
            break
        monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hosts.json"]  # no temporary file left behind
    assert names[-1] not in {i.name for i in make(path, hosts={"a": (4096, 1 << 30), "b": (4096, 1 << 30)}).list_vms("a")}


def test_a_state_file_that_cannot_be_written_fails_the_operation_and_changes_nothing(tmp_path, monkeypatch):
    path = tmp_path / "hosts.json"
    driver = make(path)
    driver.start(VMSpec("one", 1, 64), "a")
    before = path.read_bytes()

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OperationFailed, match=r"^suspend one on a: cannot write the simulated state file .*No space"):
        driver.suspend("one", "/var/save/one.save")
    with pytest.raises(OperationFailed, match="cannot write"):
        driver.stop("one")
    monkeypatch.undo()
    # in memory too, the operations did not happen; the lines written but not known to be on disk are taken back
    assert snapshot(driver) == {"a": [("one", "running", 1, 64, None)], "b": []}
    assert not driver.state_file_exists("a", "/var/save/one.save")
    assert path.read_bytes() == before
    driver.stop("one")
    assert snapshot(make(path)) == {"a": [], "b": []}


def test_bad_state_files_are_refused_naming_the_file(tmp_path):
    path = tmp_path / "hosts.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match=f"simulated state file {path}"):
        make(path)
    path.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ValueError, match="not a leasewise-simulated-hosts file"):
        make(path)
    driver = make(tmp_path / "ok.json")
    driver.start(VMSpec("x", 1, 64), "b")
    with pytest.raises(ValueError, match=r"VM 'x' is on host 'b', which this driver does not manage"):
        make(tmp_path / "ok.json", hosts={"a": (8, 8192)})
    data = json.loads((tmp_path / "ok.json").read_text())
    data["vms"]["x"]["state"] = "dancing"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="unknown state 'dancing'"):
        make(path)
    data["vms"]["x"]["state"] = "saved"
    del data["images"]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="missing key 'images'"):
        make(path)


def test_for_hosts_builds_from_store_capacities(tmp_path):
    clock = SimulatedClock(T0)
    driver = SimulatedDriver.for_hosts({"h1": (4, 4096), "h2": (2, 2048)}, clock, state_file=tmp_path / "s.json",
                                     migration_model=predict_precopy)
    assert driver.hosts() == ["h1", "h2"] and driver.clock is clock
    assert (driver.host_info("h2").vcpus, driver.host_info("h2").memory_mib) == (2, 2048)
    driver.start(VMSpec("v", 1, 64), "h2")
    again = SimulatedDriver.for_hosts({"h1": (4, 4096), "h2": (2, 2048)}, clock, state_file=tmp_path / "s.json",
                                     migration_model=predict_precopy)
    assert again.locate("v") == "h2"
    with pytest.raises(UnknownHost):
        again.list_vms("h3")


def test_a_host_added_while_it_runs_keeps_its_vms_in_the_file_and_a_removed_one_takes_them_along(tmp_path):
    """The file names the VMs' hosts; the hosts are the caller's (the store's): with the added host given
    again its VMs are back, and once it is removed no host of the file is unknown to a driver without it."""
    path = tmp_path / "hosts.json"
    first = make(path)
    first.add_host(HostConfig("c", "test:///default"), 4, 4096)
    first.start(VMSpec("newcomer", 2, 1024, lease_id="7"), "c")
    first.suspend("newcomer", "/var/save/newcomer.save")   # a save image only c sees
    first.start(VMSpec("stays", 1, 256), "a")

    second = make(path, hosts={**HOSTS, "c": (4, 4096)})
    assert snapshot(second)["c"] == [("newcomer", "saved", 2, 1024, "7")]
    assert second.state_file_exists("c", "/var/save/newcomer.save")

    second.remove_host("c")
    third = make(path)   # (a file naming c would be refused: "which this driver does not manage")
    assert snapshot(third) == {"a": [("stays", "running", 1, 256, None)], "b": []}
    assert third.locate("newcomer") is None and not third.state_file_exists("c", "/var/save/newcomer.save")


def test_without_a_state_file_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    driver = SimulatedDriver(HOSTS, SimulatedClock(T0), CONFIG, migration_model=predict_precopy)
    assert driver.state_file is None
    driver.start(VMSpec("v", 1, 64), "a")
    driver.suspend("v", "/var/save/v.save")
    driver.stop("v")
    with pytest.raises(VMNotFound):
        driver.stop("v")
    assert list(tmp_path.iterdir()) == []
    assert snapshot(SimulatedDriver(HOSTS, SimulatedClock(T0), CONFIG, migration_model=predict_precopy)) == {"a": [], "b": []}
