"""The hosts' listings read before the step takes the store's lock: which leases they settle, and that the
step still acts on every other one."""

from __future__ import annotations

from datetime import timedelta

from drivers.base import VMInfo
from drivers.clock import SimulatedClock
from drivers.errors import DriverError
from orchestrator.model.lease import LeaseType
from orchestrator.runtime.daemon import Daemon
from orchestrator.runtime.host_watch import read_listings
from orchestrator.state.cluster import Cluster
from orchestrator.state.store import Store
from tests.runtime.test_daemon import config, driver_for, leases, make_store, request, submit
from tests.support.times import T0


def _started(tmp_path, n_leases=3, n_hosts=4):
    path, cfg = make_store(tmp_path, n=n_hosts), config()
    ids = [submit(path, cfg, request(LeaseType.BEST_EFFORT, 60)) for _ in range(n_leases)]
    return path, cfg, ids, driver_for(path, None)


def test_leases_running_as_planned_are_settled_and_the_others_are_not(tmp_path):
    path, cfg, (kept, powered_off, copied), driver = _started(tmp_path)
    with Store.open(path) as store:
        daemon = Daemon(store, cfg, driver, SimulatedClock(T0))
        daemon.reconcile()
        daemon.step()
        hosts = {i: next(h for h in driver.hosts() if any(v.name == f"lw-{i}-0" for v in driver.list_vms(h)))
                 for i in (kept, powered_off, copied)}
        spare = next(h for h in driver.hosts() if h not in hosts.values())
        driver.guest_poweroff(f"lw-{powered_off}-0")
        listings = daemon.watch.list_hosts()
        # a second copy of a VM on another host (a host that answers again after its VMs were started
        # elsewhere), as its listing shows it
        listings[spare] = [*listings[spare], VMInfo(f"lw-{copied}-0", spare, "running", 1, 1024)]
        read = read_listings(daemon._leases, listings)
        assert read.as_planned == {kept, copied}
        assert read.on_their_hosts == {kept, powered_off}
        assert sorted(read.copies[copied]) == sorted([(hosts[copied], f"lw-{copied}-0"), (spare, f"lw-{copied}-0")])

        # a host that does not answer settles nothing on it
        listings[hosts[kept]] = DriverError("connection refused")
        assert kept not in read_listings(daemon._leases, listings).as_planned

        # the step acts on what was not settled: the lease whose VM powered off ends early
        daemon.clock.advance_to(T0 + timedelta(minutes=5))
        daemon.step()
    result = leases(path)
    assert result[powered_off]["state"] == "done" and result[powered_off]["end"] == "2026-01-01T13:05:00Z"
    assert result[kept]["state"] == "active" and result[copied]["state"] == "active"


def test_a_rebuilt_plan_is_not_settled_from_the_lease_objects_read_before(tmp_path):
    """Another process moved a lease's plan to another host (its VM still runs on the old one): once the
    plan is rebuilt from the store, the lease objects the last step left are not the plan's, so nothing is
    settled from them and the step finds the VM off its planned host (and the plan follows it back)."""
    path, cfg, (first, _, _), driver = _started(tmp_path)
    with Store.open(path) as store:
        daemon = Daemon(store, cfg, driver, SimulatedClock(T0))
        daemon.reconcile()
        daemon.step()
        running_on = next(h for h in driver.hosts() if any(v.name == f"lw-{first}-0" for v in driver.list_vms(h)))
        spare = next(h for h in driver.hosts() if not driver.list_vms(h))
        with Store.open(path) as other, other.transaction():   # (another process)
            cluster = Cluster(other, cfg)
            assert cluster.scheduler.relocate(first, {0: spare}, T0 + timedelta(minutes=1))
            cluster.save(T0 + timedelta(minutes=1))
        daemon.session.invalidate()
        daemon.clock.advance_to(T0 + timedelta(minutes=5))
        report = daemon.step()
    assert any(f"found lw-{first}-0 on {running_on}, not where the plan had them" in note for note in report.notes)
