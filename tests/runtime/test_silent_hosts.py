"""Hosts that stop answering for a while (a libvirtd restarted, a network cut): operations on them wait,
leases on them are given up only after `[daemon] host_timeout`, and what they still run is stopped once they
answer again; a host silent past the timeout is lost (tests/runtime/test_power_loss.py has the hosts that lose
their power). The simulated driver's `host_down_at`/`host_up_at` make the outage; the VMs on the host run on
through it, as QEMU does when libvirtd goes away."""

from __future__ import annotations

from datetime import timedelta

import pytest

from orchestrator.model.lease import LeaseType
from orchestrator.runtime.daemon import Daemon
from orchestrator.runtime.host_watch import SILENT_HOSTS
from orchestrator.state.store import Store
from tests.runtime.test_daemon import config, driver_for, leases, make_store, request, submit
from tests.support.times import T0

MIN = timedelta(minutes=1)


def steps(path, cfg, driver, *minutes):
    """The daemon's steps at these minutes after T0 (one daemon, as a long-running one would)."""
    notes = []
    with Store.open(path) as store:
        daemon = Daemon(store, cfg, driver, driver.clock, say=notes.append)   # (the hosts keep its time)
        daemon.reconcile()
        for m in minutes:
            daemon.clock.advance_to(T0 + m * MIN)
            daemon.step()
            daemon.runner.wait_idle()
        daemon.close()
    return notes


def names(driver, host):
    return sorted(v.name for v in driver.list_vms(host))


def test_a_lease_ending_while_a_host_is_silent_ends_and_its_vm_is_stopped_when_the_host_answers(tmp_path):
    path, cfg = make_store(tmp_path, n=2), config()
    lease = submit(path, cfg, request(LeaseType.BEST_EFFORT, 10, nodes=2))
    driver = driver_for(path, None, host_down_at={"host2": T0 + 5 * MIN}, host_up_at={"host2": T0 + 12 * MIN})
    steps(path, cfg, driver, 0, 10, 11)
    result = leases(path)[lease]
    assert result["state"] == "done" and result["end"] == "2026-01-01T13:10:00Z"
    assert names(driver, "host1") == []
    with Store.open(path) as store:
        assert [l.id for l in store.unreleased_leases()] == [lease]   # lw-1-1 still runs on the silent host2
        waits = [e.detail["error"] for e in store.events(lease_id=lease) if e.kind == "cleanup-waits"]
        assert len(waits) == 1 and "host host2 is down" in waits[0]   # what `lease show` lists
    steps(path, cfg, driver, 12)
    assert names(driver, "host2") == []
    with Store.open(path) as store:
        assert store.unreleased_leases() == []
        assert not any(e.kind == "enactment-failed" and e.lease_id != lease for e in store.events())


def test_a_start_on_a_silent_host_waits_for_it_and_the_lease_runs(tmp_path):
    path, cfg = make_store(tmp_path, n=2), config()
    lease = submit(path, cfg, request(LeaseType.ADVANCE_RESERVATION, 30, nodes=2, start=T0 + 5 * MIN))
    driver = driver_for(path, None, host_down_at={"host2": T0 + 4 * MIN}, host_up_at={"host2": T0 + 7 * MIN})
    notes = steps(path, cfg, driver, 0, 5, 6, 7)
    assert any(f"lease {lease}: start_vms waits for host2" in n for n in notes), notes
    assert leases(path)[lease]["state"] == "active"
    assert names(driver, "host1") == [f"lw-{lease}-0"] and names(driver, "host2") == [f"lw-{lease}-1"]
    with Store.open(path) as store:
        kinds = [e.kind for e in store.events(lease_id=lease)]
        assert "enactment-waits" in kinds and "enactment-failed" not in kinds
        assert store.unfinished_operations() == []


def test_a_start_whose_host_stays_silent_past_host_timeout_fails_its_lease(tmp_path):
    """An advance reservation cannot be kept when a host it runs on is lost: it fails (its owner is told by
    its `ended` notice), the VM it did start elsewhere is stopped."""
    path, cfg = make_store(tmp_path, n=2), config(host_timeout="3m")
    lease = submit(path, cfg, request(LeaseType.ADVANCE_RESERVATION, 30, nodes=2, start=T0 + 5 * MIN))
    driver = driver_for(path, None, host_down_at={"host2": T0 + 4 * MIN})
    steps(path, cfg, driver, 0, 5, 6, 7)
    assert leases(path)[lease]["state"] == "active"        # 2 minutes: still waiting
    notes = steps(path, cfg, driver, 8, 9)
    assert any("host host2 has not answered for 3 min (lost)" in n for n in notes), notes
    with Store.open(path) as store:
        states = [e.detail for e in store.events(lease_id=lease) if e.kind == "state"]
        lost = [e.detail for e in store.events(lease_id=lease) if e.kind == "host-lost"]
        assert store.get_meta("down_hosts") == {"host2": "2026-01-01T13:05:00Z"}
    assert [(d["host"], d["outcome"], d["type"]) for d in lost] == [("host2", "failed", "advance-reservation")]
    assert leases(path)[lease]["state"] == "failed"
    assert "host host2 has not answered for 3 min" in states[-1]["reason"], states[-1]
    assert names(driver, "host1") == []                      # the VM that did start is stopped


def test_a_lease_on_a_host_silent_past_host_timeout_is_requeued_and_runs_once_when_it_answers(tmp_path):
    """A best-effort lease on a host lost (silent past the timeout) is requeued: its VM on the other host is
    killed, nothing is planned on the lost host until it answers; the VM that ran on there meanwhile (a host
    cut off, not powered off) is stopped then, and the lease starts again: one copy of each VM."""
    path, cfg = make_store(tmp_path, n=2), config(host_timeout="5m")
    lease = submit(path, cfg, request(LeaseType.BEST_EFFORT, 60, nodes=2))
    driver = driver_for(path, None, host_down_at={"host2": T0 + 10 * MIN}, host_up_at={"host2": T0 + 30 * MIN})
    steps(path, cfg, driver, 0, 10, 14)
    assert leases(path)[lease]["state"] == "active"        # silent for 4 minutes: the lease waits
    notes = steps(path, cfg, driver, 15, 16)
    assert any("host host2 has not answered for 5 min (lost)" in n for n in notes), notes
    assert leases(path)[lease]["state"] == "queued"         # both hosts needed: it waits for host2
    assert names(driver, "host1") == []
    with Store.open(path) as store:
        (lost,) = [e.detail for e in store.events(lease_id=lease) if e.kind == "host-lost"]
    assert lost["outcome"] == "requeued" and lost["lost_work_s"] == 15 * 60   # (its run until given up)
    assert "starts again from its image" in lost["detail"] and "no disk of its own" in lost["detail"]
    notes = steps(path, cfg, driver, 30, 31)
    assert any("host host2 answers again" in n for n in notes), notes
    assert any(f"lease {lease}: discarded lw-{lease}-1, which host2 kept (running)" in n for n in notes), notes
    assert leases(path)[lease]["state"] == "active"
    assert names(driver, "host1") == [f"lw-{lease}-0"] and names(driver, "host2") == [f"lw-{lease}-1"]
    with Store.open(path) as store:
        assert store.get_meta("down_hosts") == {} and store.unfinished_operations() == []
        starts = [e.detail["host"] for e in store.events(lease_id=lease) if e.kind == "enacted"
                  and e.detail["operation"] == "start"]
    assert sorted(starts) == ["host1", "host1", "host2", "host2"]   # twice each: before the loss, after it


def test_a_vm_running_for_a_queued_lease_is_stopped_as_a_stray(tmp_path):
    """A host that answers again may hold the VM of a lease that was requeued meanwhile."""
    from drivers.base import VMSpec

    path, cfg = make_store(tmp_path, n=1, cpus=2, memory=2048), config()
    first = submit(path, cfg, request(LeaseType.BEST_EFFORT, 60, memory=1536))
    queued = submit(path, cfg, request(LeaseType.BEST_EFFORT, 60, memory=1536))
    driver = driver_for(path, None)
    steps(path, cfg, driver, 0)
    assert leases(path)[queued]["state"] in ("queued", "scheduled")
    driver.start(VMSpec(name=f"lw-{queued}-0", vcpus=1, memory_mib=64), "host1")
    notes = steps(path, cfg, driver, 1)
    assert any(f"lease {queued}: stopped lw-{queued}-0, left running on host1" in n for n in notes), notes
    assert names(driver, "host1") == [f"lw-{first}-0"]
    assert leases(path)[first]["state"] == "active"


def test_a_stray_copy_of_a_lease_that_goes_on_leaves_its_disk(tmp_path):
    """The stray copy of a lease that will run (queued, suspended, or running elsewhere) may share its disk with
    the copy that runs or resumes: only the domain goes, not the storage (a stop would delete the overlay)."""
    from drivers.base import DiskSpec, VMSpec

    path, cfg = make_store(tmp_path, n=1, cpus=2, memory=2048), config()
    submit(path, cfg, request(LeaseType.BEST_EFFORT, 60, memory=1536))
    queued = submit(path, cfg, request(LeaseType.BEST_EFFORT, 60, memory=1536))
    driver = driver_for(path, None)
    steps(path, cfg, driver, 0)
    name = f"lw-{queued}-0"
    driver.start(VMSpec(name=name, vcpus=1, memory_mib=64, disk=DiskSpec(base="/images/base.qcow2")), "host1")
    assert any(name in d for d in driver.disks())
    notes = steps(path, cfg, driver, 1)
    assert any(f"lease {queued}: stopped {name}, left running on host1" in n for n in notes), notes
    assert name not in names(driver, "host1")
    assert any(name in d for d in driver.disks()), driver.disks()


@pytest.mark.parametrize("restarted", [False, True])
def test_a_vm_moved_behind_the_daemons_back_is_followed_where_it_runs(tmp_path, restarted):
    """The hosts are the truth: a VM found running on another host than the plan's (a live migration done by
    hand, or one libvirt finished after the plan gave it up) is adopted there when that host has the room,
    and its lease ends there as planned; found by a running daemon's step, or by a restarted one."""
    path, cfg = make_store(tmp_path, n=3), config()
    lease = submit(path, cfg, request(LeaseType.BEST_EFFORT, 60, nodes=2))
    driver = driver_for(path, None)
    notes = []
    with Store.open(path) as store:
        daemon = Daemon(store, cfg, driver, driver.clock, say=notes.append)
        daemon.reconcile()
        daemon.step()
        daemon.runner.wait_idle()
        moved_from = driver.locate(f"lw-{lease}-1")
        driver.migrate(f"lw-{lease}-1", "host3")
        if not restarted:
            daemon.clock.advance_to(T0 + 10 * MIN)
            daemon.step()
        daemon.close()
    if restarted:
        notes = steps(path, cfg, driver, 10)
    assert moved_from != "host3"
    assert any(f"lease {lease}: found lw-{lease}-1 on host3, not where the plan had them" in n for n in notes), notes
    with Store.open(path) as store:
        assert store.lease(lease).last_vm.nodes[1] == "host3"
    steps(path, cfg, driver, 60)
    assert leases(path)[lease]["state"] == "done"
    assert all(names(driver, h) == [] for h in ("host1", "host2", "host3"))


def test_a_vm_moved_to_a_host_without_room_for_it_in_the_plan_is_not_followed(tmp_path):
    path, cfg = make_store(tmp_path, n=3), config()
    lease = submit(path, cfg, request(LeaseType.BEST_EFFORT, 60, nodes=2))
    other = submit(path, cfg, request(LeaseType.BEST_EFFORT, 60))   # the plan gives it the third host
    driver = driver_for(path, None)
    steps(path, cfg, driver, 0)
    third = driver.locate(f"lw-{other}-0")
    driver.stop(f"lw-{other}-0")           # room on that host for the move, not in the plan
    driver.migrate(f"lw-{lease}-1", third)
    notes = steps(path, cfg, driver, 10)
    assert f"lease {lease}: VM(s) lw-{lease}-1 gone from their hosts: failed" in notes, notes
    assert leases(path)[lease]["state"] == "failed"
    assert all(names(driver, h) == [] for h in ("host1", "host2", "host3"))


def test_a_silent_host_that_is_removed_is_silent_no_more(tmp_path):
    """A server removes hosts while its daemon runs (its driver forgets them): the daemon keeps no silence
    of a host it no longer has, in memory or in the store."""
    path, cfg = make_store(tmp_path, n=2), config()
    driver = driver_for(path, None, host_down_at={"host2": T0 + 1 * MIN})
    with Store.open(path) as store:
        daemon = Daemon(store, cfg, driver, driver.clock)
        daemon.reconcile()
        for m in (0, 2):
            daemon.clock.advance_to(T0 + m * MIN)
            daemon.step()
        assert list(store.get_meta(SILENT_HOSTS)) == ["host2"]
        store.remove_host("host2")
        driver.remove_host("host2")
        daemon.clock.advance_to(T0 + 3 * MIN)
        daemon.step()
        assert store.get_meta(SILENT_HOSTS) == {}
        daemon.close()
