"""The scheduler's calls into the enactor: each `Operation` reaches the enactor method of its name, the
scheduler sends the operation each reservation needs, and a failed one names itself in the lease's reason."""

from __future__ import annotations

from datetime import datetime, timedelta

from orchestrator.config import SchedulingConfig
from orchestrator.model.lease import LeaseRequest, LeaseType
from orchestrator.model.reservations import ReservationState
from orchestrator.model.resources import Resources
from orchestrator.model.states import LeaseState
from orchestrator.model.timeutil import UTC
from orchestrator.planning.enactment import (
    EnactmentError,
    Enactor,
    NullEnactor,
    Operation,
    operations_of,
)
from orchestrator.planning.lease_scheduler import LeaseScheduler
from orchestrator.planning.slottable.table import SlotTable

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class Recording(NullEnactor):
    """Notes every operation (by the name of the method called) with its lease and reservation kind."""

    def __init__(self, failing: str | None = None):
        self.calls: list[tuple[str, int, str]] = []
        self.failing = failing
        for name in (op.value for op in Operation):
            setattr(self, name, self._recorder(name))

    def _recorder(self, name: str):
        def record(lease, rr):
            self.calls.append((name, lease.id, rr.kind.value))
            if name == self.failing:
                raise EnactmentError("boom")
        return record


def test_every_operation_is_bound_to_the_enactor_method_of_its_name():
    enactor = Recording()
    bound = operations_of(enactor)
    assert set(bound) == set(Operation)
    assert {op.value for op in Operation} == {name for name in vars(Enactor) if not name.startswith("_")}
    for operation, method in bound.items():
        assert method == getattr(enactor, operation.value)


def run_one_lease(enactor: Recording) -> LeaseScheduler:
    """One best-effort lease of 10 minutes on one host, from submission to its end."""
    scheduler = LeaseScheduler(SlotTable({"h1": Resources.of(1, 1024)}), SchedulingConfig(), enactor)
    request = LeaseRequest(type=LeaseType.BEST_EFFORT, nodes=(Resources.of(1, 1024),),
                           duration=timedelta(minutes=10), submit_time=EPOCH)
    scheduler.submit(request, EPOCH, lease_id=1)
    scheduler.schedule(EPOCH)
    while (t := scheduler.next_event_time()) is not None:
        scheduler.process_events(t)
        scheduler.schedule(t)
    return scheduler


def test_the_scheduler_starts_then_stops_the_vms_of_a_lease():
    enactor = Recording()
    scheduler = run_one_lease(enactor)
    assert enactor.calls == [("start_vms", 1, "vm"), ("stop_vms", 1, "shutdown")]
    assert scheduler.lease(1).state is LeaseState.DONE


def test_a_failed_operation_fails_the_lease_with_the_operation_named_in_the_reason():
    enactor = Recording(failing="start_vms")
    scheduler = run_one_lease(enactor)
    lease = scheduler.lease(1)
    assert lease.state is LeaseState.FAILED and lease.reason == "start_vms: boom"
    assert enactor.calls == [("start_vms", 1, "vm")]


def _held(leases, host: str) -> int:
    """The most the leases' records hold of `host`'s CPU (percent) at any instant: every part that began,
    from its start to its end (what never began held nothing)."""
    edges = sorted((t, sign * rr.resources[host].cpu) for lease in leases for vm in lease.reservations
                   for rr in vm.all_parts() if rr.state is not ReservationState.SCHEDULED and host in rr.resources
                   for t, sign in ((rr.start, 1), (rr.end, -1)))
    most = held = 0
    for _, change in edges:   # (at one instant, ends before starts)
        held += change
        most = max(most, held)
    return most


def test_a_lease_that_fails_mid_run_holds_its_host_until_it_failed_and_no_longer():
    """Lost at 10:01:00.4 (the daemon's clock has a sub-second part): the failed lease's record keeps its VMs
    until the failure, to the whole second, and nothing after; a lease asked for in that second (a request
    plans in whole seconds) gets the host from then, and the two records never hold the host at once."""
    scheduler = LeaseScheduler(SlotTable({"h1": Resources.of(4, 4096)}), SchedulingConfig(), NullEnactor())

    def immediate(at: datetime) -> int:
        request = LeaseRequest(type=LeaseType.IMMEDIATE, nodes=(Resources.of(4, 4096),),
                               duration=timedelta(minutes=10), submit_time=at)
        lease = scheduler.submit(request, at)
        scheduler.schedule(at)
        scheduler.process_events(at)
        return lease.id

    first = immediate(EPOCH)
    failed_at = EPOCH + timedelta(minutes=1, microseconds=400_000)
    scheduler.lose(first, failed_at, requeue=False, reason="its VMs are gone from their hosts")
    second = immediate(failed_at.replace(microsecond=0))

    failed, after = scheduler.lease(first), scheduler.lease(second)
    assert failed.state is LeaseState.FAILED and failed.end_time == failed_at
    vm = failed.reservations[0]
    assert (vm.start, vm.end, vm.state) == (EPOCH, EPOCH + timedelta(minutes=1), ReservationState.DONE)
    assert after.state is LeaseState.ACTIVE and after.reservations[0].start == EPOCH + timedelta(minutes=1)
    assert _held([failed, after], "h1") == 400


def test_a_suspension_handled_late_counts_the_planned_run_only():
    """A daemon that was stopped for a while handles the end of a suspended lease's VM reservation long after
    it: the lease has done the run its reservation planned, not the time since, and resumes for the rest
    (counting the time since once made it owe less than nothing, and its resumption could not be planned)."""
    config = SchedulingConfig(suspension="all", suspend_rate=32, resume_rate=32)
    scheduler = LeaseScheduler(SlotTable({"h1": Resources.of(1, 1024)}), config, NullEnactor())
    node = (Resources.of(1, 1024),)
    best_effort = scheduler.submit(LeaseRequest(type=LeaseType.BEST_EFFORT, nodes=node,
                                                duration=timedelta(minutes=30), submit_time=EPOCH), EPOCH)
    scheduler.schedule(EPOCH)
    scheduler.process_events(EPOCH)
    reservation = scheduler.submit(LeaseRequest(type=LeaseType.ADVANCE_RESERVATION, nodes=node, preemptible=False,
                                                duration=timedelta(minutes=10), submit_time=EPOCH,
                                                start=EPOCH + timedelta(minutes=10)), EPOCH)
    scheduler.schedule(EPOCH)
    vm = best_effort.reservations[0]
    assert vm.post and vm.end < EPOCH + timedelta(minutes=10)   # (suspended before the reservation)
    planned_run = vm.end - vm.start
    later = EPOCH + timedelta(minutes=45)   # (past the lease's whole duration)
    while scheduler.process_events(later):
        scheduler.schedule(later)
    scheduler.schedule(later)
    assert best_effort.accumulated == planned_run and best_effort.remaining == timedelta(minutes=30) - planned_run
    assert scheduler.lease(reservation.id).state is LeaseState.DONE
    resumed = best_effort.reservations[-1]
    assert best_effort.state is not LeaseState.DONE and resumed.start >= later
    assert resumed.end - resumed.start >= best_effort.remaining   # (the rest of its run, after its resumption)
