"""Why a lease found no room (`NotSchedulable.kind`, an `Unschedulable`) and what the queue's failure memo
makes of it: INSTANT rules out larger leases whatever their length, STRICT and SHORT larger leases that need a
placement at least as long."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from orchestrator.config import SchedulingConfig
from orchestrator.model.errors import NotSchedulable, Unschedulable
from orchestrator.model.lease import Lease, LeaseRequest, LeaseType
from orchestrator.model.reservations import Reservation, ReservationKind
from orchestrator.model.resources import Resources
from orchestrator.model.states import LeaseState
from orchestrator.model.timeutil import UTC
from orchestrator.planning.queue import FailureMemo
from orchestrator.planning.mapper import Mapper
from orchestrator.planning.policies import HOST_SELECTION, PREEMPTION
from orchestrator.planning.slottable.table import SlotTable
from orchestrator.planning.vm_scheduler import VMScheduler

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
NODE = Resources.of(1, 1024)


def T(minutes: float) -> datetime:
    return EPOCH + timedelta(minutes=minutes)


def queued(lease_id: int, nodes: int = 1, minutes: float = 60, node: Resources = NODE) -> Lease:
    lease = Lease(lease_id, LeaseRequest(type=LeaseType.BEST_EFFORT, nodes=(node,) * nodes,
                                         duration=timedelta(minutes=minutes), submit_time=T(-10)))
    lease.set_state(LeaseState.PENDING, T(-10))
    lease.set_state(LeaseState.QUEUED, T(-10))
    return lease


def why_not(busy_from: float, busy_until: float, **scheduling) -> Unschedulable | None:
    """Schedule a one-node, one-hour lease now (no backfilling) on one host held over [busy_from, busy_until)."""
    table = SlotTable({"h1": Resources.of(1, 1024)})
    table.add(Reservation(9, ReservationKind.VM, T(busy_from), T(busy_until), {"h1": NODE}))
    config = SchedulingConfig(backfilling="off", **scheduling)
    mapper = Mapper(table, HOST_SELECTION.create("greedy"), PREEMPTION.create("no-preemption"))
    lease = queued(1)
    with pytest.raises(NotSchedulable) as failure:
        VMScheduler(table, mapper, config, lease_of={}.__getitem__).schedule(lease, T(0))
    return failure.value.kind


def test_no_room_at_the_start_is_instant():
    assert why_not(-5, 30, suspension="all") is Unschedulable.INSTANT


def test_room_at_the_start_but_not_to_the_end_is_strict_when_the_lease_may_not_be_suspended():
    assert why_not(30, 90, suspension="none") is Unschedulable.STRICT


def test_room_for_a_run_shorter_than_the_threshold_is_short():
    assert why_not(5, 90, suspension="all", force_scheduling_threshold=timedelta(minutes=10)) is Unschedulable.SHORT


def memo_for(**scheduling) -> FailureMemo:
    """A pass's memo, comparing leases by the shortest run the VM scheduler would accept under these settings."""
    table = SlotTable({"h1": Resources.of(8, 8192)})
    mapper = Mapper(table, HOST_SELECTION.create("greedy"), PREEMPTION.create("no-preemption"))
    vm = VMScheduler(table, mapper, SchedulingConfig(**scheduling), lease_of={}.__getitem__)
    return FailureMemo(vm.shortest_run)


def test_an_instant_failure_rules_out_larger_leases_of_any_length():
    memo = memo_for(suspension="all")
    memo.record(queued(1, nodes=2, minutes=60), Unschedulable.INSTANT)
    assert memo.rules_out(queued(2, nodes=3, minutes=5))
    assert memo.rules_out(queued(3, nodes=2, minutes=5, node=Resources.of(2, 1024)))
    assert not memo.rules_out(queued(4, nodes=1, minutes=60))


def test_a_strict_failure_rules_out_only_as_long_or_longer_leases():
    memo = memo_for(suspension="none")
    memo.record(queued(1, nodes=2, minutes=60), Unschedulable.STRICT)
    assert memo.rules_out(queued(2, nodes=2, minutes=90))
    assert not memo.rules_out(queued(3, nodes=2, minutes=30))


def test_a_short_failure_rules_out_larger_leases_that_need_as_long_a_run_for_the_whole_pass():
    """SHORT: no placement lasts the lease's threshold (shorter than its run). A larger lease needs a
    placement lasting its own threshold, no shorter, or its whole run when that is shorter still: it is
    ruled out when what it needs is at least as long, however long its run."""
    memo = memo_for(suspension="all", force_scheduling_threshold=timedelta(minutes=10))
    memo.record(queued(1, nodes=2, minutes=60), Unschedulable.SHORT)
    assert memo.rules_out(queued(2, nodes=2, minutes=60))
    assert memo.rules_out(queued(3, nodes=3, minutes=90, node=Resources.of(2, 1024)))
    assert memo.rules_out(queued(4, nodes=2, minutes=30))       # (it too needs 10 minutes)
    assert not memo.rules_out(queued(5, nodes=2, minutes=5))    # (its whole run is shorter than 10 minutes)
    assert not memo.rules_out(queued(6, nodes=1, minutes=60))


def test_a_lease_that_may_not_be_suspended_is_compared_by_its_whole_run():
    """With suspension for one-node leases only, a one-node lease's SHORT failure (no 10-minute placement)
    rules out a two-node lease only if its whole run (it cannot be suspended) is at least that long."""
    memo = memo_for(suspension="serial", force_scheduling_threshold=timedelta(minutes=10))
    memo.record(queued(1, nodes=1, minutes=60), Unschedulable.SHORT)
    assert memo.rules_out(queued(2, nodes=2, minutes=20))
    assert not memo.rules_out(queued(3, nodes=2, minutes=5))


def test_a_failure_without_a_reason_rules_out_nothing():
    memo = memo_for(suspension="all")
    memo.record(queued(1, nodes=1, minutes=1), None)
    assert not memo.rules_out(queued(2, nodes=4, minutes=600))
