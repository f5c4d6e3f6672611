"""`leasewise lease ...` (and the malformed-input corpus of lease and host commands): every command's
happy path against a store in a temporary directory, rejections with exit code 3, one-line errors with exit
code 2 that leave the store untouched, and two processes submitting at once without double booking."""

import getpass
import json
import os
import shlex
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drivers.clock import SimulatedClock
from drivers.simulated import SimulatedDriver
from orchestrator.cli import app
from orchestrator.config import Config
from orchestrator.model.lease import LeaseType, VMImage
from orchestrator.model.resources import Resources, add, fits
from orchestrator.model.states import LeaseState
from orchestrator.model.timeutil import UTC
from orchestrator.planning.precopy import predict_precopy
from orchestrator.runtime.daemon import Daemon
from orchestrator.state.store import Store
from tests.support.stores import snapshot
from tests.support.text import has_row, lines
from tests.support.times import CLI_NOW

ROOT = Path(__file__).resolve().parents[2]
CORPUS = sorted(p for p in (ROOT / "tests" / "data" / "bad_leases").iterdir() if p.suffix in (".yaml", ".args"))
T = lambda hh, mm=0, ss=0: datetime(2027, 3, 1, hh, mm, ss, tzinfo=UTC)  # noqa: E731




def stored(store_path: Path, lease_id: int):
    with Store.open(store_path) as store:
        return store.lease(lease_id)


def plan_of(lease) -> list[tuple]:
    return [(rr.kind.value, rr.start, rr.end, sorted(rr.resources)) for vm in lease.reservations for rr in vm.all_parts()]


def daemon_step(store_path: Path, at: datetime) -> None:
    """What `leasewise run` does once at `at`, with the simulated driver (its hosts kept in a file next
    to the store, as `leasewise run` keeps them): due reservations are enacted."""
    with Store.open(store_path) as store:
        driver = SimulatedDriver.for_hosts({h.name: (h.vcpus, h.memory_mib) for h in store.hosts()},
                                           SimulatedClock(at), state_file=store_path.with_suffix(".hosts.json"),
                                           migration_model=predict_precopy)
        Daemon(store, Config(), driver, SimulatedClock(at)).step()


# -- submit -----------------------------------------------------------------------------------------------------
def test_submit_advance_reservation_with_flags(site, store_path):
    result = site("lease", "submit", "--nodes", "2", "--cpus", "4", "--memory", "2048", "--duration", "2h",
                  "--start", "2027-03-01T10:00:00Z", "--name", "exp-7", "--user", "alice", "--no-preemptible")
    assert result.exit_code == 0, result.output
    assert lines(result.stdout) == [
        "lease 1 accepted (advance-reservation, scheduled)",
        "  planned 2027-03-01T10:00:00Z → 2027-03-01T12:00:00Z on lab1",
    ]
    lease = stored(store_path, 1)
    assert lease.state is LeaseState.SCHEDULED and lease.type is LeaseType.ADVANCE_RESERVATION
    assert (lease.request.name, lease.request.user, lease.request.preemptible) == ("exp-7", "alice", False)
    assert lease.request.nodes == (Resources.of(4, 2048),) * 2
    assert lease.request.submit_time == CLI_NOW and lease.request.start == T(10)
    assert plan_of(lease) == [("vm", T(10), T(12), ["lab1"]), ("shutdown", T(12), T(12), ["lab1"])]


def test_submit_best_effort_runs_now_then_backfills_then_queues(site, store_path):
    args = ("lease", "submit", "--nodes", "2", "--cpus", "8", "--memory", "1024", "--duration", "2h")
    first = site(*args)
    assert first.exit_code == 0, first.output
    assert lines(first.stdout) == ["lease 1 accepted (best-effort, scheduled)",
                                   "  planned 2027-03-01T09:00:00Z → 2027-03-01T11:00:00Z on lab1, lab2"]
    second = site(*args)   # planned after the first (backfilling keeps one lease in the future)
    assert second.exit_code == 0, second.output
    assert "planned 2027-03-01T11:00:00Z → 2027-03-01T13:00:00Z on lab1, lab2" in second.stdout
    third = site(*args)
    assert third.exit_code == 0, third.output
    assert lines(third.stdout) == ["lease 3 queued (best-effort): no room to plan it now; it is planned when "
                                   "capacity frees up"]
    assert [stored(store_path, i).state for i in (1, 2, 3)] == [LeaseState.SCHEDULED] * 2 + [LeaseState.QUEUED]
    assert stored(store_path, 3).reservations == []
    assert stored(store_path, 1).request.user == getpass.getuser()


def test_submit_immediate_accepted_then_rejected_with_exit_3(site, store_path):
    ok = site("lease", "submit", "--nodes", "2", "--cpus", "8", "--memory", "1024", "--duration", "30m",
              "--start", "now")
    assert ok.exit_code == 0, ok.output
    assert "lease 1 accepted (immediate, scheduled)" in ok.stdout
    assert "planned 2027-03-01T09:00:00Z → 2027-03-01T09:30:00Z" in ok.stdout
    refused = site("lease", "submit", "--cpus", "1", "--memory", "512", "--duration", "10m", "--start", "now")
    assert refused.exit_code == 3, refused.output
    assert lines(refused.stdout) == ["lease 2 rejected (immediate): not enough resources available now"]
    lease = stored(store_path, 2)
    assert lease.state is LeaseState.REJECTED and lease.reason == "not enough resources available now"


def test_advance_reservation_that_does_not_fit_is_rejected_and_stored(site, store_path):
    args = ("lease", "submit", "--nodes", "2", "--cpus", "8", "--memory", "1024", "--duration", "1h",
            "--start", "2027-03-01T12:00:00Z")
    assert site(*args).exit_code == 0
    result = site(*args, "--json")
    assert result.exit_code == 3
    answer = json.loads(result.stdout)
    assert answer["id"] == 2 and answer["state"] == "rejected" and answer["hosts"] == []
    assert answer["reason"] == "not enough resources in the requested interval"
    assert stored(store_path, 2).state is LeaseState.REJECTED


def test_submit_from_a_yaml_file_with_every_key(site, store_path, tmp_path):
    path = tmp_path / "lease.yaml"
    path.write_text(
        "type: advance-reservation\nnodes: 3\ncpus: 2\nmemory: 4096\nduration: 01:30:00\n"
        "start: 2027-03-02T14:00:00+02:00\npreemptible: false\nkernel: /images/vmlinuz\n"
        "initrd: /images/initrd.img\ncmdline: console=ttyS0 dirtier.mib=64\nuser: bob\nname: yaml lease\n"
        "dirty_rate: 20\n")
    result = site("lease", "submit", str(path))
    assert result.exit_code == 0, result.output
    assert "planned 2027-03-02T12:00:00Z → 2027-03-02T13:30:00Z on lab1" in result.stdout
    req = stored(store_path, 1).request
    assert req.type is LeaseType.ADVANCE_RESERVATION and req.numnodes == 3
    assert req.duration == timedelta(minutes=90) and req.start == datetime(2027, 3, 2, 12, tzinfo=UTC)
    assert req.image == VMImage(kernel="/images/vmlinuz", initrd="/images/initrd.img",
                                cmdline="console=ttyS0 dirtier.mib=64")
    assert (req.user, req.name, req.dirty_rate_mib_s, req.preemptible) == ("bob", "yaml lease", 20.0, False)


def test_advance_reservation_preempting_a_running_best_effort_lease(site, store_path, clock):
    be = site("lease", "submit", "--nodes", "2", "--cpus", "8", "--memory", "1024", "--duration", "4h",
              "--image", "/var/lib/libvirt/images/guest.qcow2")
    assert be.exit_code == 0, be.output
    daemon_step(store_path, CLI_NOW)               # the daemon starts its VMs
    assert stored(store_path, 1).state is LeaseState.ACTIVE
    clock["now"] = T(9, 10)
    ar = site("lease", "submit", "--cpus", "8", "--memory", "1024", "--duration", "1h",
              "--start", "2027-03-01T10:00:00Z")
    assert ar.exit_code == 0, ar.output
    # suspending 1024 MiB at 32 MB/s takes 32 s: the BE stops at 09:59:28 so the AR gets its host at 10:00
    assert lines(ar.stdout) == ["lease 2 accepted (advance-reservation, scheduled)",
                                "  planned 2027-03-01T10:00:00Z → 2027-03-01T11:00:00Z on lab1",
                                "  preempts lease 1: suspended at 2027-03-01T09:59:28Z"]
    be_lease = stored(store_path, 1)
    assert be_lease.state is LeaseState.ACTIVE
    assert plan_of(be_lease) == [("vm", CLI_NOW, T(9, 59, 28), ["lab1", "lab2"]),
                                 ("suspend", T(9, 59, 28), T(10), ["lab1", "lab2"])]
    shown = site("lease", "show", "1")
    assert shown.exit_code == 0, shown.output
    out = shown.stdout
    assert "lease 1: best-effort, active" in out
    assert has_row(out, 'suspend', 'scheduled', '2027-03-01T09:59:28Z', '2027-03-01T10:00:00Z', 'lab1, lab2')
    assert has_row(out, 'vm', 'active', '2027-03-01T09:00:00Z', '2027-03-01T09:59:28Z', 'lab1, lab2')
    as_json = json.loads(site("lease", "show", "1", "--json").stdout)
    assert [(r["kind"], r["start"], r["end"]) for r in as_json["plan"]] == [
        ("vm", "2027-03-01T09:00:00Z", "2027-03-01T09:59:28Z"),
        ("suspend", "2027-03-01T09:59:28Z", "2027-03-01T10:00:00Z")]
    enacted = [e for e in as_json["events"] if e["kind"] == "enacted"]
    assert {e["detail"]["operation"] for e in enacted} == {"start"} and len(enacted) == 2
    assert [h["state"] for h in as_json["history"]] == ["new", "pending", "queued", "scheduled", "active"]
    # the daemon enacts the suspension at 09:59:28 and it is done by 10:00, when the AR starts
    daemon_step(store_path, T(9, 59, 28))
    daemon_step(store_path, T(10))
    assert stored(store_path, 1).suspensions == 1
    assert stored(store_path, 2).state is LeaseState.ACTIVE
    suspended = site("lease", "show", "1")
    assert "suspensions 1" in suspended.stdout and "suspended-" in suspended.stdout


# -- list / show ------------------------------------------------------------------------------------------------
def test_list_shows_a_page_of_the_callers_leases_and_all_pages_of_everyones_with_all(site):
    import getpass

    me = getpass.getuser()
    for user in (me, "ann", me, me, "ann", me):
        assert site("lease", "submit", "--cpus", "1", "--memory", "512", "--duration", "1h", "--user", user).exit_code == 0
    mine = [r["id"] for r in json.loads(site("lease", "list", "--json").stdout)]
    assert mine == [1, 3, 4, 6]
    first = site("lease", "list", "--limit", "2")
    assert "2 leases" in first.stdout and "more: lease list --after 3" in first.stdout
    assert [r["id"] for r in json.loads(site("lease", "list", "--limit", "2", "--after", "3", "--json").stdout)] == [4, 6]
    assert "more:" not in site("lease", "list", "--limit", "2", "--after", "3").stdout
    assert [r["id"] for r in json.loads(site("lease", "list", "--all", "--json").stdout)] == [1, 2, 3, 4, 5, 6]
    assert [r["id"] for r in json.loads(site("lease", "list", "--user", "ann", "--json").stdout)] == [2, 5]
    bad = site("lease", "list", "--limit", "0")
    assert bad.exit_code == 2 and "--limit" in bad.output


def test_list_filters_and_json(site, store_path):
    assert site("lease", "submit", "--cpus", "2", "--memory", "1024", "--duration", "1h", "--user", "ann",
                "--name", "one").exit_code == 0
    assert site("lease", "submit", "--cpus", "2", "--memory", "1024", "--duration", "1h", "--user", "ben",
                "--start", "2027-03-01T15:00:00Z").exit_code == 0
    assert site("lease", "submit", "--nodes", "2", "--cpus", "8", "--memory", "1024", "--duration", "1h",
                "--start", "2027-03-01T15:00:00Z", "--user", "ben").exit_code == 3
    table = site("lease", "list", "--all")
    assert table.exit_code == 0, table.output
    assert "3 leases" in table.stdout
    assert has_row(table.stdout, "1", "one", "best-effort", "scheduled", "1 × 2 vCPU / 1024 MiB",
                   "2027-03-01T09:00:00Z", "2027-03-01T10:00:00Z", "lab1")
    assert has_row(table.stdout, "3", "", "advance-reservation", "rejected", "2 × 8 vCPU / 1024 MiB")
    rows = json.loads(site("lease", "list", "--user", "ben", "--json").stdout)
    assert [(r["id"], r["state"]) for r in rows] == [(2, "scheduled"), (3, "rejected")]
    assert rows[0] == {"id": 2, "name": "", "user": "ben", "type": "advance-reservation", "state": "scheduled",
                       "nodes": 1, "cpus": 2, "memory_mib": 1024, "start": "2027-03-01T15:00:00Z",
                       "end": "2027-03-01T16:00:00Z", "hosts": ["lab1"], "reason": ""}
    rejected = json.loads(site("lease", "list", "--all", "--status", "rejected", "--json").stdout)
    assert [r["id"] for r in rejected] == [3]
    live = json.loads(site("lease", "list", "--all", "--status", "live", "--json").stdout)
    assert [r["id"] for r in live] == [1, 2]


def test_show_prints_request_plan_history_and_events(site, store_path):
    assert site("lease", "submit", "--cpus", "2", "--memory", "1024", "--duration", "90m", "--name", "demo",
                "--start", "2027-03-01T11:00:00Z", "--image", "/images/d.qcow2", "--user", "cy").exit_code == 0
    result = site("lease", "show", "1")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "lease 1 (demo): advance-reservation, scheduled" in out
    assert ("request: 1 × 2 vCPU / 1024 MiB for 1h30m, start 2027-03-01T11:00:00Z, preemptible, user cy, "
            "submitted 2027-03-01T09:00:00Z") in out
    assert "boots: disk /images/d.qcow2" in out
    assert has_row(out, 'vm', 'scheduled', '2027-03-01T11:00:00Z', '2027-03-01T12:30:00Z', 'lab1')
    assert has_row(out, '2027-03-01T09:00:00Z', 'scheduled')
    assert has_row(out, "submitted", "type=advance-reservation nodes=1 duration_s=5400.0")
    assert has_row(out, "planned", "vm 2027-03-01T11:00:00Z → 2027-03-01T12:30:00Z on lab1; shutdown "
                                   "2027-03-01T12:30:00Z → 2027-03-01T12:30:00Z on lab1")
    data = json.loads(site("lease", "show", "1", "--json").stdout)
    assert data["request"]["image"] == {"disk": "/images/d.qcow2"}
    assert data["request"]["duration_s"] == 5400.0 and data["lease"]["state"] == "scheduled"
    assert [e["kind"] for e in data["events"]] == ["submitted", "state", "state", "state", "planned"]


# -- cancel / extend --------------------------------------------------------------------------------------------
def test_cancel_frees_the_reservations_and_refuses_a_final_lease(site, store_path):
    assert site("lease", "submit", "--nodes", "2", "--cpus", "8", "--memory", "1024", "--duration", "1h",
                "--start", "2027-03-01T12:00:00Z").exit_code == 0
    result = site("lease", "cancel", "1")
    assert result.exit_code == 0, result.output
    assert lines(result.stdout) == ["lease 1 cancelled"]
    lease = stored(store_path, 1)
    assert lease.state is LeaseState.CANCELLED and lease.reservations == []
    again = site("lease", "submit", "--nodes", "2", "--cpus", "8", "--memory", "1024", "--duration", "1h",
                 "--start", "2027-03-01T12:00:00Z")
    assert again.exit_code == 0 and "lease 2 accepted" in again.stdout     # the room is free again
    before = snapshot(store_path)
    twice = site("lease", "cancel", "1")
    assert twice.exit_code == 2
    assert lines(twice.stderr) == ["error: lease: lease 1 is already cancelled"]
    assert snapshot(store_path) == before


def test_cancel_a_running_lease_says_the_daemon_stops_it(site, store_path):
    assert site("lease", "submit", "--cpus", "2", "--memory", "1024", "--duration", "1h").exit_code == 0
    daemon_step(store_path, CLI_NOW)
    result = site("lease", "cancel", "1")
    assert result.exit_code == 0, result.output
    assert "its VMs on lab1 are stopped by the daemon at its next step" in result.stdout
    assert stored(store_path, 1).state is LeaseState.CANCELLED


def test_extend_replans_or_is_refused_with_exit_3(site, store_path):
    assert site("lease", "submit", "--nodes", "2", "--cpus", "8", "--memory", "1024", "--duration", "1h",
                "--start", "2027-03-01T10:00:00Z").exit_code == 0
    assert site("lease", "submit", "--nodes", "2", "--cpus", "8", "--memory", "1024", "--duration", "1h",
                "--start", "2027-03-01T12:00:00Z").exit_code == 0
    result = site("lease", "extend", "1", "--by", "30m")
    assert result.exit_code == 0, result.output
    assert lines(result.stdout) == ["lease 1 extended by 30m (now 1h30m); planned end 2027-03-01T11:30:00Z"]
    lease = stored(store_path, 1)
    assert lease.request.duration == timedelta(minutes=90)
    assert plan_of(lease)[0] == ("vm", T(10), T(11, 30), ["lab1", "lab2"])
    before = snapshot(store_path)
    refused = site("lease", "extend", "1", "--by", "1h")
    assert refused.exit_code == 3
    assert lines(refused.stdout) == [
        "lease 1 not extended: cannot extend lease 1 by 1:00:00: host lab1 is reserved between "
        "2027-03-01T11:30:00+00:00 and 2027-03-01T12:30:00+00:00"]
    assert snapshot(store_path) == before


# -- errors ---------------------------------------------------------------------------------------------------------
def test_unknown_lease_ids_are_one_line(site, store_path):
    for command in (("lease", "show", "42"), ("lease", "cancel", "42"), ("lease", "extend", "42", "--by", "1h")):
        result = site(*command)
        assert result.exit_code == 2, (command, result.output)
        [line] = lines(result.stderr)
        assert "42" in line and "lease" in line, line


def test_requests_no_host_can_hold_are_refused_before_anything_is_written(cli, store_path):
    no_hosts = cli("lease", "submit", "--cpus", "1", "--memory", "512", "--duration", "1h")
    assert no_hosts.exit_code == 2
    assert lines(no_hosts.stderr) == ["error: hosts: no hosts: add one with `leasewise host add` or "
                                      "`leasewise host import`"]
    assert cli("host", "add", "lab1", "--uri", "test:///default", "--cpus", "8", "--memory", "16384").exit_code == 0
    before = snapshot(store_path)
    too_big = cli("lease", "submit", "--cpus", "12", "--memory", "512", "--duration", "1h")
    assert too_big.exit_code == 2
    assert lines(too_big.stderr) == ["error: nodes[0].cpus: 12 vCPUs is more than any host has (8 vCPUs)"]
    assert snapshot(store_path) == before
    with Store.open(store_path) as store:
        assert store.leases() == [] and store.next_lease_id() == 1


@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_malformed_input_gives_one_line_naming_the_field_and_writes_nothing(site, store_path, path):
    assert site("lease", "submit", "--cpus", "2", "--memory", "1024", "--duration", "1h").exit_code == 0
    text = path.read_text()
    first, _, rest = text.partition("\n")
    assert first.startswith("# error: "), f"{path.name}: first line must be '# error: <fragment>'"
    expected = first[len("# error: "):].strip()
    if path.suffix == ".args":
        args = shlex.split(rest.strip().splitlines()[0])
    else:
        args = ["lease", "submit", str(path)]
    before = snapshot(store_path)
    result = site(*args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    error = lines(result.stderr)
    assert len(error) == 1, error
    assert error[0].startswith("error: ") and expected in error[0], (expected, error[0])
    assert snapshot(store_path) == before


# -- concurrency --------------------------------------------------------------------------------------------------
RACER = """
import os, sys
ready, gate = int(sys.argv.pop(1)), int(sys.argv.pop(1))
from orchestrator.cli import load, main
import orchestrator.service.local
load([sys.argv[1]])          # everything the command imports, before the race
os.write(ready, b".")
os.close(ready)
os.read(gate, 1)             # (blocks until the test closes the gate's other end: every racer at once)
main()
"""


def test_concurrent_submissions_never_double_book(site, store_path):
    """Four processes ask at the same instant for a whole host each, on a site of two hosts: two get one
    host each, the others are rejected (or told the store is busy); no host is ever over capacity. The
    racers import everything, say they are ready, and all wait on one gate (a pipe) that the test opens
    for all of them at once."""
    start = (datetime.now(UTC) + timedelta(hours=2)).replace(microsecond=0)
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT)}
    ready_read, ready_write = os.pipe()
    gate_read, gate_write = os.pipe()
    procs = [subprocess.Popen(
        [sys.executable, "-c", RACER, str(ready_write), str(gate_read), "lease", "submit", "--cpus", "8",
         "--memory", "8192", "--duration", "1h", "--start", start.isoformat(), "--json", "--state", str(store_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, pass_fds=(ready_write, gate_read))
        for _ in range(4)]
    os.close(ready_write)
    os.close(gate_read)
    arrived = b""
    try:
        while len(arrived) < len(procs):
            got = os.read(ready_read, 16)
            if not got:   # (every racer has closed its end: one died before the line)
                break
            arrived += got
    finally:
        os.close(ready_read)
        os.close(gate_write)   # the gate opens: every racer's read returns at once
    assert len(arrived) == len(procs), [p.communicate(timeout=60) for p in procs]
    outcomes = [(p.wait(timeout=60), p.stdout.read(), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _, _ in outcomes)
    for code, out, err in outcomes:
        assert code in (0, 3, 75), (code, out, err)
        if code == 75:
            assert "busy" in err, err
    accepted = [json.loads(out) for code, out, _ in outcomes if code == 0]
    assert codes.count(0) == 2, [(a["id"], a["hosts"], a["state"], a["start"]) for a in accepted]
    assert sorted(h for a in accepted for h in a["hosts"]) == ["lab1", "lab2"]
    with Store.open(store_path) as store:
        hosts = {h.name: h.capacity for h in store.hosts()}
        leases = store.leases()
        assert sum(l.state is LeaseState.SCHEDULED for l in leases) == 2
        assert all(l.state is LeaseState.REJECTED for l in leases if l.state is not LeaseState.SCHEDULED)
        parts = [rr for l in leases for vm in l.reservations for rr in vm.all_parts()]
    for host, capacity in hosts.items():
        for t in sorted({rr.start for rr in parts} | {rr.end for rr in parts}):
            used = Resources()
            for rr in parts:
                if rr.start <= t < rr.end and host in rr.resources:
                    used = add(used, rr.resources[host])
            assert fits(used, Resources(), capacity), (host, t, used)


def test_read_only_commands_do_not_create_a_store(tmp_path, clock):
    missing = tmp_path / "typo.sqlite"
    for command in (["lease", "list"], ["lease", "show", "1"], ["host", "list"], ["host", "check", "lab1"]):
        result = CliRunner().invoke(app, [*command, "--state", str(missing)])
        assert result.exit_code == 2, (command, result.output)
        assert lines(result.stderr) == [f"error: --state: {missing} does not exist"]
    assert not missing.exists()
