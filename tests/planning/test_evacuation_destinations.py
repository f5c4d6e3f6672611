"""The evacuation planner's choice of destinations against its plain definition.

`EvacuationPlanner._destinations` passes over hosts with no room for a moving VM at the start, read from
the host-state arrays, without walking their timelines. The reference here is the definition: the hosts
in the policy's order at the start, less those to leave; each moving VM, largest first, goes to the first
host that can hold it (with the lease's VMs already there) over the whole interval, by the slot table's
own walk. Same hosts for every VM, or None from both.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.config import SchedulingConfig
from orchestrator.model.lease import Lease, LeaseRequest, LeaseType
from orchestrator.model.reservations import Reservation, ReservationKind
from orchestrator.model.resources import NOTHING, Resources, add
from orchestrator.model.timeutil import UTC
from orchestrator.planning.evacuation import EvacuationPlanner
from orchestrator.planning.overheads import Overheads
from orchestrator.planning.policies import HOST_SELECTION
from orchestrator.planning.slottable.table import SlotTable
from tests.oracle.evacuation import destinations

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
CAPACITIES = (Resources.of(1, 1024), Resources.of(2, 4096), Resources.of(4, 8192))
NODES = (Resources.of(1, 1024), Resources.of(1, 512), Resources.of(2, 2048))


def T(minutes: float) -> datetime:
    return EPOCH + timedelta(minutes=minutes)


def reference(table: SlotTable, policy: str, lease: Lease, vm: Reservation, moving: list[int],
              avoid: set[str], start: datetime, end: datetime) -> dict[int, str] | None:
    """The plain scheduler's definition (`tests/oracle`), the hosts in the policy's order at the start."""
    return destinations(table, HOST_SELECTION.create(policy).order(table, table.hosts, start), lease, vm, moving,
                        avoid, start, end)


@st.composite
def cases(draw):
    n_hosts = draw(st.integers(2, 12))
    hosts = [f"h{i:02d}" for i in range(n_hosts)]
    table = SlotTable({h: draw(st.sampled_from(CAPACITIES)) for h in hosts})
    for _ in range(draw(st.integers(0, 40))):
        host = draw(st.sampled_from(hosts))
        start = draw(st.integers(0, 240))
        end = start + draw(st.integers(1, 120))
        amount = Resources.of(draw(st.sampled_from((1, 2))), draw(st.sampled_from((512, 1024, 2048))))
        if table.fits(host, amount, T(start), T(end)):
            table.add(Reservation(9, ReservationKind.VM, T(start), T(end), {host: amount}))
    # the lease's VMs where the plan put them (not in the table), some of them to move off their hosts
    count = draw(st.integers(1, 5))
    sizes = draw(st.lists(st.sampled_from(NODES), min_size=count, max_size=count))
    request = LeaseRequest(type=LeaseType.BEST_EFFORT, nodes=tuple(sizes), duration=timedelta(minutes=200),
                           submit_time=T(-60))
    lease = Lease(1, request)
    placed = {v: draw(st.sampled_from(hosts)) for v in range(count)}
    per_host: dict[str, Resources] = {}
    for v, host in placed.items():
        per_host[host] = add(per_host.get(host, NOTHING), sizes[v])
    vm = Reservation(lease.id, ReservationKind.VM, T(0), T(100), per_host, nodes=placed)
    avoid = set(draw(st.lists(st.sampled_from(sorted(per_host)), min_size=1, unique=True)))
    moving = sorted(v for v, h in placed.items() if h in avoid)
    start = draw(st.integers(0, 240))
    return table, lease, vm, moving, avoid, T(start), T(start + draw(st.integers(1, 180)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(), policy=st.sampled_from(("greedy", "pack", "spread")), present=st.booleans())
def test_destinations_as_the_plain_first_fit_in_policy_order(case, policy, present):
    table, lease, vm, moving, avoid, start, end = case
    if present:
        table.present = start   # (the host states the scheduler keeps at its present time)
    config = SchedulingConfig()
    planner = EvacuationPlanner(table, config, Overheads(config), HOST_SELECTION.create(policy), lambda _: True)
    want = reference(table, policy, lease, vm, moving, avoid, start, end)
    assert planner._destinations(lease, vm, moving, avoid, start, end) == want


def test_local_storage_a_vm_moves_only_to_a_host_holding_its_image_and_its_disk_is_counted():
    from orchestrator.model.lease import VMImage  # noqa: PLC0415
    from orchestrator.planning.image_filter import ImageHolders  # noqa: PLC0415

    table = SlotTable({h: Resources.of(4, 8192) for h in ("h1", "h2", "h3")})
    request = LeaseRequest(type=LeaseType.BEST_EFFORT, nodes=(Resources.of(1, 1024),), duration=timedelta(hours=1),
                           submit_time=T(-60), image=VMImage(disk="/img/deb.qcow2", name="deb"))
    lease = Lease(1, request)
    vm = Reservation(lease.id, ReservationKind.VM, T(0), T(60), {"h1": Resources.of(1, 1024)}, nodes={0: "h1"})
    config = SchedulingConfig(live_migration_bandwidth=100.0, live_migration_disk_mib=500.0)
    everywhere = EvacuationPlanner(table, config, Overheads(config), HOST_SELECTION.create("greedy"), lambda _: True)
    holders = ImageHolders({"deb": {"h1", "h3"}})
    held = EvacuationPlanner(table, config, Overheads(config), HOST_SELECTION.create("greedy"), lambda _: True,
                             images=holders)
    assert everywhere._destinations(lease, vm, [0], {"h1"}, T(10), T(60)) == {0: "h2"}
    assert held._destinations(lease, vm, [0], {"h1"}, T(10), T(60)) == {0: "h3"}
    # its overlay moves with it: 500 MiB at 100 MiB/s before the memory
    assert held.predict(lease, 0).total_seconds == pytest.approx(everywhere.predict(lease, 0).total_seconds + 5.0)
    assert held.predict(lease, 0).disk_seconds == pytest.approx(5.0)
    assert held._destinations(lease, vm, [0], {"h1", "h3"}, T(10), T(60)) is None
    # once the daemon measured what its overlay really holds, that is what the plan copies (VM 0 only)
    lease.measured_disk_mib = {0: 42.0}
    assert held.predict(lease, 0).disk_seconds == pytest.approx(0.42)
    assert held.predict(lease, 0).total_seconds == pytest.approx(everywhere.predict(lease, 0).total_seconds + 0.42)
