"""Hosts, images and manual migration through a real `leasewise serve` (simulated hosts, a temporary Unix
socket, real Unix users): the same output and exit codes as the CLI on a store of its own, admins only
(exit 4, nothing changed, for anyone else), one line and exit 2 for bad input; and `run` and `calibrate`
refusing, in one line, while a server is configured."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import rich.status  # noqa: F401  (`migrate` through a server shows one: a test user's child cannot import it)
from typer.testing import CliRunner

from drivers.base import VMSpec
from drivers.clock import RealClock
from drivers.errors import UnknownHost
from drivers.inventory import HostConfig, dump_inventory
from orchestrator.cli import app
from orchestrator.runtime.driver_factory import make_driver
from orchestrator.state.store import Store
from tests.service.conftest import as_user, make_store, start_server
from drivers.simulated.state_file import read_state


def _cli(*args: str, env: dict | None = None):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", **(env or {})})


def _cli_as(user: str, *args: str) -> tuple[int, str, str]:
    """The command line run by `user` (a forked child that dropped root): exit code, stdout, stderr."""
    _cli(*args[:2], "--help")   # (imports what the command needs here: the child cannot read root's files)

    def call():
        result = _cli(*args)
        return result.exit_code, result.stdout, result.stderr

    return as_user(user, call)


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.fixture
def local(tmp_path) -> Path:
    """A store of the CLI's own with the server's two hosts: what the local answers are compared with."""
    return make_store(tmp_path / "local" / "state.sqlite")


def _hosts(path: Path) -> dict[str, tuple[int, int, bool]]:
    with Store.open(path) as store:
        return {h.name: (h.vcpus, h.memory_mib, h.available) for h in store.hosts()}


@pytest.fixture
def shared() -> Path:
    """A folder the test's users may read (pytest's own is root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="leasewise-test-files-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _image(folder: Path) -> Path:
    """A real 1 GiB (virtual) qcow2 (the simulated hosts see this machine's files)."""
    path = folder / "base.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(path), "1G"], check=True)
    path.chmod(0o644)
    return path


# -- host add / import ------------------------------------------------------------------------------------
def test_host_add_through_the_server(running, local, unix_users):
    add = ("host", "add", "h3", "--uri", "sim://h3", "--cpus", "4", "--memory", "8192")
    here = _cli(*add, "--state", str(local))
    there = _cli(*add, "--server", running.url)
    assert here.exit_code == there.exit_code == 0, (here.output, there.output)
    assert here.stdout == there.stdout == "host h3 added: 4 vCPUs, 8192 MiB (given)\n"
    assert here.stderr == there.stderr == ""
    # available at once: the scheduler in memory plans on it, the daemon's driver reaches it
    assert _hosts(running.store_path)["h3"] == (4, 8192, True)
    listed = json.loads(_cli("host", "list", "--json", "--server", running.url).stdout)
    assert [(h["name"], h["available"]) for h in listed] == [("h1", True), ("h2", True), ("h3", True)]
    assert running.server.driver.hosts() == ["h1", "h2", "h3"]
    assert running.server.driver.host_info("h3").vcpus == 4

    # not an admin: one line, exit 4, nothing added
    code, out, err = _cli_as("lwalice", "host", "add", "h4", "--uri", "sim://h4", "--cpus", "4", "--memory", "8192",
                             "--server", running.url)
    assert code == 4 and out == "" and _lines(err) == ["error: adding hosts is for admins (lwalice is not one)"]
    assert "h4" not in _hosts(running.store_path)

    # bad input: one line, exit 2, the same here and there
    for args, line in ((("h5", "--uri", "sim://h5"), "error: --cpus and --memory: required with the simulated "
                                                     "driver (it cannot ask a host its capacity; [daemon] driver = "
                                                     "\"libvirt\" reads it from libvirt)"),
                       (("h1", "--uri", "sim://h1", "--cpus", "4", "--memory", "8192"), "error: host 'h1' already exists"),
                       (("h5", "--uri", "nope", "--cpus", "4", "--memory", "8192"),
                        "error: --uri: 'nope' is not a libvirt URI (e.g. qemu+tcp://10.77.0.11/system)"),
                       (("h5", "--uri", "sim://h5", "--cpus", "0", "--memory", "8192"), None)):
        here = _cli("host", "add", *args, "--state", str(local))
        there = _cli("host", "add", *args, "--server", running.url)
        assert here.exit_code == there.exit_code == 2, (args, here.output, there.output)
        assert _lines(here.output) == _lines(there.output) and len(_lines(there.output)) == 1, (args, there.output)
        assert line is None or _lines(there.output) == [line]
    assert set(_hosts(running.store_path)) == {"h1", "h2", "h3"}


def test_a_host_the_daemon_reaches_is_planned_on_at_once(tmp_path, unix_users):
    """With a driver that reaches h3 too, the new host is available and the scheduler in memory plans on it."""
    configs = [HostConfig(name=f"h{i}", uri="test:///default") for i in (1, 2, 3)]
    driver = make_driver("simulated", configs, capacities={c.name: (8, 16384) for c in configs})
    driver.clock = RealClock()
    served = start_server(tmp_path, driver=driver)
    try:
        added = _cli("host", "add", "h3", "--uri", "test:///default", "--cpus", "8", "--memory", "16384",
                     "--server", served.url)
        assert added.exit_code == 0 and added.stdout == "host h3 added: 8 vCPUs, 16384 MiB (given)\n"
        assert added.stderr == ""
        submitted = _cli("lease", "submit", "--nodes", "3", "--cpus", "8", "--memory", "1024", "--duration", "1h",
                         "--start", "2030-01-01T00:00:00Z", "--json", "--server", served.url)
        assert submitted.exit_code == 0, submitted.output
        assert json.loads(submitted.stdout)["hosts"] == ["h1", "h2", "h3"]
    finally:
        served.stop()


# -- a host added or removed while the server runs: its daemon's at once, and forgotten ----------------------
def _until(running, lease_id: int, done, what: str, timeout: float = 30.0):
    """The lease (and its events) once `done(lease, kinds of its events)`: the server's daemon runs on the
    wall clock."""
    deadline = time.monotonic() + timeout
    while True:
        with Store.open(running.store_path) as store:
            lease = store.lease(lease_id)
            kinds = [e.kind for e in store.events(lease_id=lease_id)]
        if done(lease, kinds):
            return lease
        assert time.monotonic() < deadline, f"lease {lease_id} is {lease.state.value}, not {what} ({kinds})"
        time.sleep(0.1)


def _active(running, lease_id: int):
    """The lease once active and its VMs' start enacted: the store says active from the planned start,
    while the start itself is an operation of its own that may still be under way (a full run once read
    the driver's VMs in between and found none)."""
    return _until(running, lease_id, lambda lease, kinds: lease.state.value == "active" and "enacted" in kinds,
                  "active with its start enacted")


def _submit_now(running, cpus: int):
    """An immediate 10-minute lease of one VM of `cpus` vCPUs (h1 and h2 have 8 each)."""
    return _cli("lease", "submit", "--cpus", str(cpus), "--memory", "1024", "--duration", "10m", "--start", "now",
                "--json", "--server", running.url)


def test_a_host_added_through_the_server_runs_a_lease_submitted_right_after(running, tmp_path, unix_users):
    driver = running.server.driver
    too_big = _submit_now(running, 16)
    assert too_big.exit_code == 2, too_big.output   # neither h1 nor h2 has 16 vCPUs

    code, out, err = _cli_as("lwadm", "host", "add", "h3", "--uri", "sim://h3", "--cpus", "16", "--memory", "32768",
                             "--server", running.url)
    assert (code, out, err) == (0, "host h3 added: 16 vCPUs, 32768 MiB (given)\n", "")
    submitted = _submit_now(running, 16)
    assert submitted.exit_code == 0, submitted.output
    answer = json.loads(submitted.stdout)
    assert answer["hosts"] == ["h3"]
    lease = _active(running, answer["id"])
    vm = f"lw-{answer['id']}-0"
    assert lease.last_vm.nodes == {0: "h3"}
    assert [(i.name, i.state, i.vcpus) for i in driver.list_vms("h3")] == [(vm, "running", 16)]
    # the simulated hosts' file keeps it on h3, as it keeps the VMs of the hosts the server started with
    kept = read_state(running.store_path.with_suffix(".hosts.json"))
    assert kept["vms"][vm]["host"] == "h3"

    # an imported host the same: h3 is full, so the next such lease runs on h4
    inventory = tmp_path / "more.toml"
    inventory.write_text(dump_inventory([HostConfig(name="h4", uri="sim://h4")]))
    imported = _cli("host", "import", str(inventory), "--cpus", "16", "--memory", "32768", "--server", running.url)
    assert imported.exit_code == 0 and imported.stderr == "", imported.output
    second = json.loads(_submit_now(running, 16).stdout)
    assert second["hosts"] == ["h4"]
    assert _active(running, second["id"]).last_vm.nodes == {0: "h4"}
    assert [i.name for i in driver.list_vms("h4")] == [f"lw-{second['id']}-0"]


def test_a_host_removed_through_the_server_is_forgotten_by_its_daemon(running, unix_users):
    driver = running.server.driver
    add = ("host", "add", "h3", "--uri", "sim://h3", "--cpus", "16", "--memory", "32768", "--server", running.url)
    assert _cli(*add).exit_code == 0
    answer = json.loads(_submit_now(running, 16).stdout)
    _active(running, answer["id"])
    assert _cli("lease", "cancel", str(answer["id"]), "--server", running.url).exit_code == 0
    _until(running, answer["id"], lambda _, kinds: "released" in kinds, "released")   # its VM stopped

    code, out, err = _cli_as("lwadm", "host", "remove", "h3", "--server", running.url)
    assert (code, out, err) == (0, "host h3 removed\n", "")
    assert driver.hosts() == ["h1", "h2"]
    with pytest.raises(UnknownHost):
        driver.list_vms("h3")
    assert _submit_now(running, 16).exit_code == 2   # no host has room for it any more

    # added again, with other hardware: the driver takes it as it is now
    again = _cli("host", "add", "h3", "--uri", "sim://h3", "--cpus", "12", "--memory", "16384", "--server", running.url)
    assert again.exit_code == 0, again.output
    assert driver.host_info("h3").vcpus == 12
    answer = json.loads(_submit_now(running, 12).stdout)
    assert _active(running, answer["id"]).last_vm.nodes == {0: "h3"}


def test_host_import_through_the_server(running, local, shared, unix_users):
    tmp_path = shared
    inventory = tmp_path / "inventory.toml"
    inventory.write_text(dump_inventory([HostConfig(name="h1", uri="test:///default"),
                                         HostConfig(name="h3", uri="sim://h3")]))
    inventory.chmod(0o644)
    here = _cli("host", "import", str(inventory), "--cpus", "4", "--memory", "8192", "--state", str(local))
    there = _cli("host", "import", str(inventory), "--cpus", "4", "--memory", "8192", "--server", running.url)
    assert here.exit_code == there.exit_code == 0, (here.output, there.output)
    assert here.stdout == there.stdout == ("host h3 added: 4 vCPUs, 8192 MiB\n"
                                           "host h1 skipped: already present with the same settings\n"
                                           "1 added, 1 skipped\n")
    assert here.stderr == there.stderr == ""
    assert _hosts(running.store_path) == {"h1": (8, 16384, True), "h2": (8, 16384, True), "h3": (4, 8192, True)}
    assert running.server.driver.hosts() == ["h1", "h2", "h3"]

    other = tmp_path / "other.toml"
    other.write_text(dump_inventory([HostConfig(name="h4", uri="sim://h4")]))
    other.chmod(0o644)
    code, out, err = _cli_as("lwbob", "host", "import", str(other), "--cpus", "4", "--memory", "8192",
                             "--server", running.url)
    assert code == 4 and out == "" and _lines(err) == ["error: importing hosts is for admins (lwbob is not one)"]
    assert "h4" not in _hosts(running.store_path)

    clash = tmp_path / "clash.toml"
    clash.write_text(dump_inventory([HostConfig(name="h4", uri="sim://h4"), HostConfig(name="h2", uri="sim://other")]))
    here = _cli("host", "import", str(clash), "--cpus", "4", "--memory", "8192", "--state", str(local))
    there = _cli("host", "import", str(clash), "--cpus", "4", "--memory", "8192", "--server", running.url)
    assert here.exit_code == there.exit_code == 2
    assert _lines(here.output) == _lines(there.output) == [
        f"error: host 'h2' is already in the store with different settings (uri differ): remove it first or "
        f"fix {clash}"]
    assert "h4" not in _hosts(running.store_path)   # nothing of it was added


# -- host remove / check ----------------------------------------------------------------------------------
def test_host_remove_through_the_server(running, local, unix_users):
    code, out, err = _cli_as("lwalice", "host", "remove", "h2", "--server", running.url)
    assert code == 4 and out == "" and _lines(err) == ["error: removing hosts is for admins (lwalice is not one)"]
    assert set(_hosts(running.store_path)) == {"h1", "h2"}
    for name in ("nosuch",):
        here = _cli("host", "remove", name, "--state", str(local))
        there = _cli("host", "remove", name, "--server", running.url)
        assert here.exit_code == there.exit_code == 2
        assert _lines(here.output) == _lines(there.output) == ["error: no host named 'nosuch'"]
    # a lease planned on both hosts: refused, naming it, nothing changed
    later = "2030-01-01T00:00:00Z"
    for where in (("--state", str(local)), ("--server", running.url)):
        submitted = _cli("lease", "submit", "--nodes", "2", "--cpus", "8", "--memory", "1024", "--duration", "1h",
                         "--start", later, *where)
        assert submitted.exit_code == 0, submitted.output
    here = _cli("host", "remove", "h2", "--state", str(local))
    there = _cli("host", "remove", "h2", "--server", running.url)
    assert here.exit_code == there.exit_code == 2
    assert _lines(here.output) == _lines(there.output) == [
        "error: host 'h2' has reservations planned for lease(s) 1: cancel them, or use --drain to requeue them on "
        "other hosts"]
    for where in (("--state", str(local)), ("--server", running.url)):
        assert _cli("lease", "cancel", "1", *where).exit_code == 0
    here = _cli("host", "remove", "h2", "--state", str(local))
    there = _cli("host", "remove", "h2", "--server", running.url)
    assert here.exit_code == there.exit_code == 0 and here.stdout == there.stdout == "host h2 removed\n"
    assert set(_hosts(running.store_path)) == {"h1"}
    listed = json.loads(_cli("host", "list", "--json", "--server", running.url).stdout)
    assert [h["name"] for h in listed] == ["h1"]   # the scheduler in memory forgot it too
    submitted = _cli("lease", "submit", "--nodes", "2", "--cpus", "8", "--memory", "1024", "--duration", "1h",
                     "--start", later, "--server", running.url)
    assert submitted.exit_code == 2 and "cannot fit on 1 hosts" in submitted.output   # h1 alone is left


def test_host_check_through_the_server(running, local, unix_users):
    here = _cli("host", "check", "h1", "--state", str(local))
    there = _cli("host", "check", "h1", "--server", running.url)
    assert here.exit_code == there.exit_code == 0, (here.output, there.output)
    assert here.stdout == there.stdout and "simulated driver: nothing to check" in there.stdout
    here = _cli("host", "check", "h1", "--json", "--state", str(local))
    there = _cli("host", "check", "h1", "--json", "--server", running.url)
    assert json.loads(here.stdout) == json.loads(there.stdout)
    code, out, err = _cli_as("lwbob", "host", "check", "h1", "--server", running.url)
    assert code == 4 and out == "" and _lines(err) == ["error: checking hosts is for admins (lwbob is not one)"]
    for args in (("nosuch",), ("h1", "--timeout", "0")):
        here = _cli("host", "check", *args, "--state", str(local))
        there = _cli("host", "check", *args, "--server", running.url)
        assert here.exit_code == there.exit_code == 2
        assert _lines(here.output) == _lines(there.output) and len(_lines(there.output)) == 1


# -- image add ---------------------------------------------------------------------------------------------
def test_image_add_through_the_server(running, local, shared, tmp_path, unix_users):
    image = _image(shared)
    here = _cli("image", "add", "deb", str(image), "--state", str(local))
    there = _cli("image", "add", "deb", str(image), "--server", running.url)
    assert here.exit_code == there.exit_code == 0, (here.output, there.output)
    # (the hosts name no shared storage: each is given a copy of its own)
    assert here.stdout == there.stdout == (f"image deb added: {image} (qcow2, 1.0 GiB; copied to or held by 2 hosts)\n"
                                           "  h1: copied, checksum verified on the host\n"
                                           "  h2: copied, checksum verified on the host\n")
    with Store.open(running.store_path) as store:
        assert [(i.name, i.added_by) for i in store.images()] == [("deb", "root")]

    code, out, err = _cli_as("lwalice", "image", "add", "mine", str(image), "--server", running.url)
    assert code == 4 and out == "" and _lines(err) == [
        "error: adding an image to the catalogue is for admins (lwalice is not one)"]
    with Store.open(running.store_path) as store:
        assert [i.name for i in store.images()] == ["deb"]

    for args in (("deb", str(image)), ("other", str(image), "--format", "vmdk"), ("other", "relative.qcow2"),
                 ("other", str(tmp_path / "missing.qcow2")), ("other", str(image), "--format", "raw")):
        here = _cli("image", "add", *args, "--state", str(local))
        there = _cli("image", "add", *args, "--server", running.url)
        assert here.exit_code == there.exit_code == 2, (args, here.output, there.output)
        assert _lines(here.output) == _lines(there.output) and len(_lines(there.output)) == 1, (args, there.output)
    with Store.open(running.store_path) as store:
        assert [i.name for i in store.images()] == ["deb"]
    # image sync through the server: admins only; a host that lost its copy is given one again
    synced = _cli("image", "sync", "deb", "--host", "h2", "--server", running.url)
    assert synced.exit_code == 0 and "image deb: held by 1 of 1 host" in synced.stdout, synced.output
    code, out, err = _cli_as("lwalice", "image", "sync", "deb", "--server", running.url)
    assert (code, _lines(err)) == (4, ["error: copying images to hosts is for admins (lwalice is not one)"])
    unknown = _cli("image", "sync", "nope", "--server", running.url)
    assert unknown.exit_code == 2 and "NAME: no image named 'nope'" in unknown.output


# -- migrate -------------------------------------------------------------------------------------------------
def _started(running, name: str, host: str) -> None:
    """A VM that is no lease's, started on the server's own (simulated) hosts."""
    running.server.driver.start(VMSpec(name=name, vcpus=1, memory_mib=64), host)


def test_migrate_through_the_server(running, unix_users):
    driver = running.server.driver
    _started(running, "scratch", "h1")
    code, out, err = _cli_as("lwalice", "migrate", "scratch", "--to", "h2", "--server", running.url)
    assert code == 4 and out == "" and _lines(err) == ["error: migrating a VM by hand is for admins (lwalice is not one)"], (code, out, err)
    assert driver.locate("scratch") == "h1"

    moved = _cli("migrate", "scratch", "--to", "h2", "--json", "--server", running.url)
    assert moved.exit_code == 0, moved.output
    report = json.loads(moved.stdout)
    assert (report["vm"], report["source"], report["destination"], report["success"], report["outcome"]) == (
        "scratch", "h1", "h2", True, "completed")
    assert report["memory_mib"] == 64 and report["passes"] >= 1 and report["error"] is None
    assert driver.locate("scratch") == "h2"
    shown = _cli("migrate", "scratch", "--to", "h1", "--server", running.url)
    assert shown.exit_code == 0 and "Migration of scratch: h2 -> h1" in shown.stdout and "completed" in shown.stdout

    # a VM of a lease the plan holds: the plan moves it (host drain), not a hand
    answer = json.loads(_cli("lease", "submit", "--cpus", "1", "--memory", "256", "--duration", "10m",
                             "--start", "now", "--json", "--server", running.url).stdout)
    lease_vm = f"lw-{answer['id']}-0"
    for args, line in (((lease_vm, "--to", "h2"), f"error: VM: {lease_vm} is lease {answer['id']}'s, which the plan "
                                                  "places: move it with `leasewise host drain HOST` (the plan moves "
                                                  "with it)"),
                       (("scratch", "--to", "h2", "--inventory", "x.toml"),
                        "error: --inventory: not with a server (the server migrates on its own hosts)"),
                       (("scratch", "--to", "h2", "--max-downtime", "0"), None),
                       (("scratch", "--to", "nosuch"), None),
                       (("nosuch", "--to", "h2"), None),
                       (("scratch", "--to", "h2", "--dry-run", "--bandwidth", "100"), None)):
        result = _cli("migrate", *args, "--server", running.url)
        assert result.exit_code == 2 and len(_lines(result.output)) == 1, (args, result.output)
        assert line is None or _lines(result.output) == [line]
    assert driver.locate("scratch") == "h1"
    # a prediction needs no VM and no server: the same here and there
    predict = ("migrate", "scratch", "--to", "h2", "--dry-run", "--bandwidth", "100", "--memory", "1024",
               "--dirty-rate", "10", "--json")
    assert json.loads(_cli(*predict).stdout) == json.loads(_cli(*predict, "--server", running.url).stdout)


# -- run and calibrate: no server runs them -------------------------------------------------------------------
def test_run_and_calibrate_refuse_while_a_server_is_configured(running, local):
    before = local.stat().st_mtime_ns
    served = (("--server", running.url), None), ((), {"LEASEWISE_SERVER": running.url})
    for args, env in served:
        result = _cli("run", "--until-idle", "--state", str(local), *args, env=env)
        assert result.exit_code == 2 and _lines(result.output) == [
            f"error: run: the server at {running.url} runs the daemon; stop it to run one here, with --server '' "
            "for the local store"]
        for command in (("calibrate", "migration", "--host", "h1", "--host", "h2", "--dry-run"),
                        ("calibrate", "suspend", "--host", "h1", "--dry-run")):
            result = _cli(*command, "--state", str(local), *args, env=env)
            assert result.exit_code == 2 and _lines(result.output) == [
                f"error: calibrate: the server at {running.url} owns the hosts and the store (calibrate boots VMs "
                "of its own and stores the fit); stop it to calibrate here, with --server '' for the local store"]
    time.sleep(0.01)
    assert local.stat().st_mtime_ns == before   # nothing touched
    # `--server ''` is no server: the local store's own daemon runs
    alone = _cli("run", "--until-idle", "--fast", "--state", str(local), "--server", "",
                 env={"LEASEWISE_SERVER": running.url})
    assert alone.exit_code == 0, alone.output
