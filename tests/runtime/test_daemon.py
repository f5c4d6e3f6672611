"""The daemon on the simulated driver: enacting a mixed workload, picking up new leases, early ends,
lost VMs, unknown domains, enactment failures, the dry run, and SIGKILL at random moments."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from drivers.clock import RealClock, SimulatedClock
from drivers.inventory import DEFAULT_STATE_DIR, HostConfig
from drivers.simulated import SimulatedDriver, SimulatedDriverConfig
from orchestrator.config import config_from_dict
from orchestrator.model.lease import LeaseRequest, LeaseType
from orchestrator.model.resources import Resources
from orchestrator.model.timeutil import iso
from orchestrator.planning.precopy import predict_precopy
from orchestrator.runtime.daemon import Daemon, simulated_driver_for
from orchestrator.state.cluster import Cluster
from orchestrator.state.store import Store
from tests.support.times import T0
from drivers.simulated.state_file import read_state

ROOT = Path(__file__).resolve().parents[2]


def config(**daemon):
    return config_from_dict({"daemon": {"driver": "simulated", "poll_interval": "60s", **daemon}})


def make_store(tmp_path: Path, n: int = 4, cpus: int = 1, memory: int = 1024) -> Path:
    path = tmp_path / "state.sqlite"
    with Store.open(path) as store:
        for i in range(1, n + 1):
            store.add_host(HostConfig(name=f"host{i}", uri="sim://", domain_type="qemu"), cpus, memory)
    return path


def request(kind: LeaseType, minutes: float, nodes: int = 1, start: datetime | None = None,
            submit: datetime = T0, memory: int = 1024) -> LeaseRequest:
    return LeaseRequest(type=kind, nodes=tuple(Resources.of(1, memory) for _ in range(nodes)),
                        duration=timedelta(minutes=minutes), submit_time=submit, start=start,
                        preemptible=kind is LeaseType.BEST_EFFORT)


def submit(path: Path, cfg, req: LeaseRequest, now: datetime = T0) -> int:
    with Store.open(path) as store, store.transaction():
        cluster = Cluster(store, cfg)
        lease = cluster.submit(req, now)
        cluster.save(now)
        return lease.id


def driver_for(path: Path, sim_state: Path | None, **driver_config) -> SimulatedDriver:
    with Store.open(path) as store:
        capacities = {h.name: (h.vcpus, h.memory_mib) for h in store.hosts()}
    return SimulatedDriver.for_hosts(capacities, SimulatedClock(T0), config=SimulatedDriverConfig(**driver_config),
                                     state_file=sim_state, migration_model=predict_precopy)


def run(path: Path, cfg, driver, start: datetime = T0, **kw) -> Daemon:
    with Store.open(path) as store:
        daemon = Daemon(store, cfg, driver, SimulatedClock(start))
        daemon.run(until_idle=True, **kw)
        return daemon


def leases(path: Path) -> dict[int, dict]:
    with Store.open(path) as store:
        return {l.id: {"state": l.state.value, "start": iso(l.start_time), "end": iso(l.end_time),
                       "plan": [(r.kind.value, iso(r.start), iso(r.end), sorted(r.resources))
                                for vm in l.reservations for r in vm.all_parts()]}
                for l in store.load_leases()}


def enacted(path: Path, lease_id: int) -> list[str]:
    with Store.open(path) as store:
        return [e.detail.get("operation") for e in store.events(lease_id=lease_id) if e.kind == "enacted"]


def test_mixed_workload_with_preemption_is_enacted_on_time(tmp_path):
    path, cfg = make_store(tmp_path), config()
    be = submit(path, cfg, request(LeaseType.BEST_EFFORT, 60))
    ar = submit(path, cfg, request(LeaseType.ADVANCE_RESERVATION, 30, nodes=4, start=T0 + timedelta(minutes=30)))
    driver = driver_for(path, tmp_path / "sim.json")
    run(path, cfg, driver)
    result = leases(path)
    assert result[be]["state"] == "done" and result[ar]["state"] == "done"
    assert result[be]["end"] == "2026-01-01T14:31:04Z"
    assert ("suspend", "2026-01-01T13:29:28Z", "2026-01-01T13:30:00Z", ["host1"]) in result[be]["plan"]
    assert result[ar]["start"] == "2026-01-01T13:30:00Z"
    assert enacted(path, be) == ["start", "suspend", "resume", "stop"]
    assert enacted(path, ar).count("start") == 4 and enacted(path, ar).count("stop") == 4
    assert all(driver.list_vms(h) == [] for h in driver.hosts())


def test_lease_submitted_while_running_is_picked_up_without_restart(tmp_path):
    path, cfg = make_store(tmp_path, n=1), config()
    first = submit(path, cfg, request(LeaseType.BEST_EFFORT, 10))
    driver = driver_for(path, None)
    with Store.open(path) as store:
        daemon = Daemon(store, cfg, driver, SimulatedClock(T0))
        daemon.reconcile()
        daemon.step()
        later = submit(path, cfg, request(LeaseType.BEST_EFFORT, 10, submit=T0), now=T0)   # another process
        daemon.clock.advance_to(T0 + timedelta(minutes=10))
        daemon.step()
    result = leases(path)
    assert result[first]["state"] == "done"
    assert result[later]["state"] == "active" and result[later]["start"] == "2026-01-01T13:10:00Z"


def test_a_host_added_while_the_daemon_runs_is_enacted_on_with_its_own_settings(tmp_path):
    """A server adds hosts while its daemon runs (its driver learns them): the daemon reads each host's
    settings from the store at each step, so a VM suspended on the new host is saved where that host
    keeps its memory images."""
    path, cfg = make_store(tmp_path, n=1), config()
    driver = driver_for(path, None)
    with Store.open(path) as store:
        daemon = Daemon(store, cfg, driver, SimulatedClock(T0))
        daemon.reconcile()
        daemon.step()
        added = HostConfig(name="host2", uri="sim://", domain_type="qemu", state_dir="/srv/host2-saves")
        store.add_host(added, 1, 1024)
        driver.add_host(added, 1, 1024)
        best_effort = [submit(path, cfg, request(LeaseType.BEST_EFFORT, 60)) for _ in range(2)]
        ar = submit(path, cfg, request(LeaseType.ADVANCE_RESERVATION, 30, nodes=2, start=T0 + timedelta(minutes=30)))
        daemon.run(until_idle=True)
    result = leases(path)
    assert result[ar]["state"] == "done" and all(result[i]["state"] == "done" for i in best_effort)
    with Store.open(path) as store:
        saved = {e.detail["host"]: e.detail["path"] for i in best_effort for e in store.events(lease_id=i)
                 if e.kind == "enacted" and e.detail["operation"] == "suspend"}
    first, second = best_effort
    assert saved in ({"host1": f"{DEFAULT_STATE_DIR}/lw-{first}-0.state", "host2": f"/srv/host2-saves/lw-{second}-0.state"},
                     {"host1": f"{DEFAULT_STATE_DIR}/lw-{second}-0.state", "host2": f"/srv/host2-saves/lw-{first}-0.state"})


def test_vm_that_powers_off_ends_its_lease_early_and_frees_the_host(tmp_path):
    path, cfg = make_store(tmp_path, n=1), config()
    first = submit(path, cfg, request(LeaseType.BEST_EFFORT, 60))
    second = submit(path, cfg, request(LeaseType.BEST_EFFORT, 30))
    driver = driver_for(path, None)
    with Store.open(path) as store:
        daemon = Daemon(store, cfg, driver, SimulatedClock(T0))
        daemon.reconcile()
        daemon.step()
        daemon.clock.advance_to(T0 + timedelta(minutes=20))
        driver.guest_poweroff(f"lw-{first}-0")
        daemon.step()
    result = leases(path)
    assert result[first]["state"] == "done" and result[first]["end"] == "2026-01-01T13:20:00Z"
    assert result[second]["state"] == "active" and result[second]["start"] == "2026-01-01T13:20:00Z"


@pytest.mark.parametrize("policy, expected", [("fail", "failed"), ("requeue", "queued")])
def test_lost_vm_found_at_restart_fails_or_requeues_its_lease(tmp_path, policy, expected):
    path, cfg = make_store(tmp_path, n=1), config(on_lost_vm=policy)
    lease = submit(path, cfg, request(LeaseType.BEST_EFFORT, 60))
    sim = tmp_path / "sim.json"
    with Store.open(path) as store:
        daemon = Daemon(store, cfg, driver_for(path, sim), SimulatedClock(T0))
        daemon.reconcile()
        daemon.step()
    assert leases(path)[lease]["state"] == "active"
    driver = driver_for(path, sim)
    driver.stop(f"lw-{lease}-0")          # the VM disappears while no daemon runs
    with Store.open(path) as store:
        notes = Daemon(store, cfg, driver_for(path, sim), SimulatedClock(T0 + timedelta(minutes=5))).reconcile()
    assert any(f"lease {lease}" in n and "gone" in n for n in notes)
    assert leases(path)[lease]["state"] in (expected, "scheduled" if expected == "queued" else expected)


def test_running_vm_is_adopted_and_unknown_domain_left_alone(tmp_path):
    path, cfg = make_store(tmp_path, n=2), config()
    lease = submit(path, cfg, request(LeaseType.BEST_EFFORT, 60))
    sim = tmp_path / "sim.json"
    with Store.open(path) as store:
        daemon = Daemon(store, cfg, driver_for(path, sim), SimulatedClock(T0))
        daemon.reconcile()
        daemon.step()
    from drivers.base import VMSpec

    driver = driver_for(path, sim)
    driver.start(VMSpec(name="lw-99-0", vcpus=1, memory_mib=512), "host2")
    with Store.open(path) as store:
        notes = Daemon(store, cfg, driver_for(path, sim), SimulatedClock(T0 + timedelta(minutes=1))).reconcile()
    assert any(f"lease {lease}: adopted" in n for n in notes)
    assert any("lw-99-0" in n and "left alone" in n for n in notes)
    assert [v.name for v in driver_for(path, sim).list_vms("host2")] == ["lw-99-0"]
    assert leases(path)[lease]["state"] == "active"


def test_a_step_killed_before_its_operations_ran_replays_them_in_order(tmp_path):
    """A daemon killed right after committing the step where one lease ends and the next takes its host: at
    restart the ended lease's VM goes first (its cleanup, in the stop's place), then the next one starts."""
    path, cfg = make_store(tmp_path, n=1), config()
    first = submit(path, cfg, request(LeaseType.BEST_EFFORT, 10))
    second = submit(path, cfg, request(LeaseType.BEST_EFFORT, 10))
    sim = tmp_path / "sim.json"
    with Store.open(path) as store:
        daemon = Daemon(store, cfg, driver_for(path, sim), SimulatedClock(T0))
        daemon.reconcile()
        daemon.step()
        daemon.close()
        killed = Daemon(store, cfg, driver_for(path, sim), SimulatedClock(T0 + timedelta(minutes=10)))
        killed.runner.submit_all = lambda jobs: None   # the process dies once the step is committed
        killed.step()
        assert [r.operation for r in store.unfinished_operations()] == ["stop_vms", "start_vms", "release"]
    assert [v.name for v in driver_for(path, sim).list_vms("host1")] == [f"lw-{first}-0"]
    with Store.open(path) as store:
        daemon = Daemon(store, cfg, driver_for(path, sim), SimulatedClock(T0 + timedelta(minutes=10)))
        notes = daemon.reconcile()
        daemon.step()
        daemon.close()
        assert store.unfinished_operations() == []
    assert not any("left alone" in n for n in notes), notes
    result = leases(path)
    assert result[first]["state"] == "done"
    assert result[second]["state"] == "active" and result[second]["start"] == "2026-01-01T13:10:00Z"
    assert [v.name for v in driver_for(path, sim).list_vms("host1")] == [f"lw-{second}-0"]


def test_enactment_failure_fails_the_lease_and_others_go_on(tmp_path):
    path, cfg = make_store(tmp_path, n=2), config()
    doomed = submit(path, cfg, request(LeaseType.BEST_EFFORT, 30))
    fine = submit(path, cfg, request(LeaseType.BEST_EFFORT, 30, submit=T0 + timedelta(minutes=1)),
                  now=T0 + timedelta(minutes=1))
    driver = driver_for(path, None, host_down_at={"host1": T0 - timedelta(hours=1)})
    run(path, cfg, driver)
    result = leases(path)
    assert result[doomed]["state"] == "failed"
    assert result[fine]["state"] == "done"


def test_dry_run_prints_what_it_would_do_and_leaves_the_store_alone(tmp_path):
    path, cfg = make_store(tmp_path), config()
    submit(path, cfg, request(LeaseType.BEST_EFFORT, 60))
    before = path.read_bytes()
    out = subprocess.run([sys.executable, "-c", "from orchestrator.cli import main; main()", "run", "--dry-run",
                          "--state", str(path)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "start" in out.stdout and "lw-1-0" in out.stdout and "stop" in out.stdout
    assert path.read_bytes() == before


def _daemon_command(path: Path, sim: Path, cfg_file: Path) -> list[str]:
    return [sys.executable, "-c", "from orchestrator.cli import main; main()", "run", "--fast", "--until-idle",
            "--state", str(path), "--sim-state", str(sim), "--config", str(cfg_file)]


def _workload(path: Path, cfg, seed: int) -> None:
    rng = random.Random(seed)
    for i in range(120):
        at = T0 + timedelta(minutes=rng.randrange(0, 360))
        if rng.random() < 0.25:
            req = request(LeaseType.ADVANCE_RESERVATION, rng.choice([15, 30]), nodes=rng.choice([1, 2]),
                          start=at + timedelta(minutes=rng.randrange(10, 60)), submit=T0)
        else:
            req = request(LeaseType.BEST_EFFORT, rng.choice([10, 20, 45]), nodes=rng.choice([1, 2]), submit=T0)
        submit(path, cfg, req)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigkill_at_random_moments_loses_nothing(tmp_path, seed):
    """Run a mixed AR/BE workload with preemption twice: once straight through, once killed with SIGKILL
    at random moments and restarted each time. Every lease must end in the same state at the same time."""
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text('[daemon]\ndriver = "simulated"\npoll_interval = "60s"\n')
    cfg = config()
    runs = {}
    straight_seconds = None
    for mode in ("straight", "killed"):
        base = tmp_path / mode
        base.mkdir()
        path = make_store(base)
        with Store.open(path) as store:
            store.set_meta("daemon_clock", iso(T0))
        _workload(path, cfg, seed)
        sim = base / "sim.json"
        if mode == "killed":
            rng = random.Random(seed * 101)
            kills = 0
            for _ in range(4):
                proc = subprocess.Popen(_daemon_command(path, sim, cfg_file), cwd=ROOT,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                time.sleep(rng.uniform(0.05, 0.2) * straight_seconds)   # (four cuts well before the end)
                if proc.poll() is None:
                    os.kill(proc.pid, signal.SIGKILL)
                    kills += 1
                proc.wait(timeout=30)
            with Store.open(path) as store:
                progressed = store.get_meta("daemon_clock")
            assert kills >= 2, "the daemon finished before it could be killed: make the workload longer"
            assert progressed != iso(T0), "no step was ever committed before the kills"
        began = time.monotonic()
        done = subprocess.run(_daemon_command(path, sim, cfg_file), cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        if mode == "straight":
            straight_seconds = time.monotonic() - began
        runs[mode] = {i: (l["state"], l["end"]) for i, l in leases(path).items()}
        left = read_state(sim)
        assert not any(vm.get("state") == "running" for vm in left.get("vms", {}).values()), left
    assert runs["killed"] == runs["straight"]
    assert {s for s, _ in runs["straight"].values()} <= {"done", "rejected"}


def test_a_plan_changed_without_a_state_change_is_logged(tmp_path):
    """An AR that cuts a running best-effort lease short changes its plan, not its state: the event log
    still gets a 'planned' entry with the suspension."""
    path, cfg = make_store(tmp_path, n=1), config()
    be = submit(path, cfg, request(LeaseType.BEST_EFFORT, 60))
    with Store.open(path) as store:
        daemon = Daemon(store, cfg, driver_for(path, None), SimulatedClock(T0))
        daemon.reconcile()
        daemon.step()
    with Store.open(path) as store:
        before = [e for e in store.events(lease_id=be) if e.kind == "planned"]
    submit(path, cfg, request(LeaseType.ADVANCE_RESERVATION, 30, start=T0 + timedelta(minutes=30),
                              submit=T0 + timedelta(minutes=5)), now=T0 + timedelta(minutes=5))
    with Store.open(path) as store:
        after = [e for e in store.events(lease_id=be) if e.kind == "planned"]
    assert len(after) == len(before) + 1
    assert [r["kind"] for r in after[-1].detail["reservations"]] == ["vm", "suspend"]


def test_on_the_wall_clock_the_daemon_polls_and_records_operations_as_just_ended(tmp_path):
    """The same daemon on a clock that moves by itself (600 times faster than the wall): the lease is enacted
    at its planned times, and an operation is logged as having ended when it is recorded (it took its
    `wall_seconds` of that clock), not as starting then as on a fast-forwarded clock."""
    path, cfg = make_store(tmp_path, n=1), config(poll_interval="5m")
    clock = RealClock(speedup=600)
    began = clock.now()
    lease = submit(path, cfg, request(LeaseType.BEST_EFFORT, 1, submit=began), now=began)
    with Store.open(path) as store:
        ran = Daemon(store, cfg, driver_for(path, None), clock).run(until_idle=True, max_steps=50)
        events = [e for e in store.events(lease_id=lease) if e.kind == "enacted"]
    assert ran.stopped_by == "idle"
    assert leases(path)[lease]["state"] == "done"
    assert [e.detail["operation"] for e in events] == ["start", "stop"]
    for event in events:
        took = timedelta(seconds=event.detail["wall_seconds"])
        assert event.detail["enacted_end"] == iso(event.time)
        assert event.detail["enacted_start"] == iso(event.time - took)


def test_a_start_waits_for_the_cleanup_of_the_lease_whose_room_it_takes(tmp_path):
    """A lease cancelled by another process (`leasewise lease cancel` while the daemon runs) leaves its VMs to
    the daemon's cleanup; a lease given its room in the same change starts at the daemon's next step too. On
    the wall clock, where the simulated stop takes its real time, the start waits on that host until the
    cleanup is done, instead of finding the host still full and failing the lease."""
    path = make_store(tmp_path, n=1, cpus=4, memory=4096)
    cfg = config_from_dict({"daemon": {"driver": "simulated", "poll_interval": "1s"},
                            "scheduling": {"shutdown_time": "2s"}})
    clock = RealClock()

    def whole_second() -> datetime:   # (as a request plans)
        return clock.now().replace(microsecond=0)

    def whole_host() -> LeaseRequest:
        return LeaseRequest(type=LeaseType.IMMEDIATE, nodes=(Resources.of(4, 1024),),
                            duration=timedelta(minutes=5), submit_time=whole_second())

    first = submit(path, cfg, whole_host(), now=whole_second())
    with Store.open(path) as store:
        driver = simulated_driver_for(store, tmp_path / "hosts.json", cfg.scheduling)
        driver.clock = clock
        daemon = Daemon(store, cfg, driver, clock)
        daemon.step()
        assert daemon.runner.wait_idle(timeout=30)
        with Store.open(path) as other, other.transaction():   # (the other process)
            cluster = Cluster(other, cfg)
            cluster.cancel(first, whole_second())
            second = cluster.submit(whole_host(), whole_second()).id
            cluster.save(whole_second())
        daemon.step()   # (the cleanup and the start, on the one host)
        assert daemon.runner.wait_idle(timeout=30)
        daemon.close()
        stops = [e for e in store.events(lease_id=first) if e.kind == "enacted" and e.detail["operation"] == "stop"]
        starts = [e for e in store.events(lease_id=second) if e.kind == "enacted" and e.detail["operation"] == "start"]
    assert leases(path)[second]["state"] == "active"
    assert len(stops) == 1 and len(starts) == 1
    assert starts[0].detail["enacted_start"] >= stops[0].detail["enacted_end"]
