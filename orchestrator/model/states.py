"""Lease states and the one table of allowed transitions.

Everything that moves a lease goes through `Lease.set_state`, which consults `TRANSITIONS`; an edge that is
not in the table raises `IllegalTransition`, so a scheduler bug shows up at the step that made it.
"""

from __future__ import annotations

from enum import Enum


class LeaseState(str, Enum):
    NEW = "new"
    PENDING = "pending"                    # accepted by admission, not yet placed
    REJECTED = "rejected"
    SCHEDULED = "scheduled"                # has a VM reservation in the plan
    QUEUED = "queued"                      # best-effort, waiting for capacity
    CANCELLED = "cancelled"
    PREPARING = "preparing"                # image transfer / staging before start
    READY = "ready"
    ACTIVE = "active"                      # VMs running
    SUSPENDING = "suspending"
    SUSPENDED_PENDING = "suspended-pending"  # suspended, not yet back in the queue
    SUSPENDED_QUEUED = "suspended-queued"
    SUSPENDED_SCHEDULED = "suspended-scheduled"
    MIGRATING = "migrating"                # memory image moving to the hosts it resumes on
    RESUMING = "resuming"
    RESUMED_READY = "resumed-ready"
    DONE = "done"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


S = LeaseState

#: state -> states it may move to. Cancel is reachable from every live state, fail from every state in
#: which the lease was accepted (a new lease is rejected, not failed).
TRANSITIONS: dict[LeaseState, frozenset[LeaseState]] = {
    S.NEW: frozenset({S.PENDING, S.REJECTED, S.CANCELLED}),
    S.PENDING: frozenset({S.SCHEDULED, S.QUEUED, S.REJECTED, S.CANCELLED, S.FAILED}),
    S.QUEUED: frozenset({S.SCHEDULED, S.CANCELLED, S.FAILED}),
    # a scheduled lease can be pushed back to the queue (preempted before it started, re-planned)
    S.SCHEDULED: frozenset({S.PREPARING, S.READY, S.ACTIVE, S.QUEUED, S.SCHEDULED, S.CANCELLED, S.FAILED}),
    S.PREPARING: frozenset({S.READY, S.QUEUED, S.CANCELLED, S.FAILED}),
    S.READY: frozenset({S.ACTIVE, S.QUEUED, S.CANCELLED, S.FAILED}),
    # active -> queued: preempted where suspension is impossible (the VMs are killed and the lease requeued)
    S.ACTIVE: frozenset({S.SUSPENDING, S.QUEUED, S.DONE, S.CANCELLED, S.FAILED}),
    S.SUSPENDING: frozenset({S.SUSPENDED_PENDING, S.CANCELLED, S.FAILED}),
    S.SUSPENDED_PENDING: frozenset({S.SUSPENDED_QUEUED, S.SUSPENDED_SCHEDULED, S.CANCELLED, S.FAILED}),
    S.SUSPENDED_QUEUED: frozenset({S.SUSPENDED_SCHEDULED, S.CANCELLED, S.FAILED}),
    S.SUSPENDED_SCHEDULED: frozenset({S.SUSPENDED_QUEUED, S.SUSPENDED_SCHEDULED, S.MIGRATING, S.RESUMING,
                                      S.CANCELLED, S.FAILED}),
    # migrating / resuming -> queued states: preempted by an AR mid-way (images kept / VMs killed)
    S.MIGRATING: frozenset({S.SUSPENDED_SCHEDULED, S.SUSPENDED_QUEUED, S.RESUMING, S.CANCELLED, S.FAILED}),
    S.RESUMING: frozenset({S.RESUMED_READY, S.ACTIVE, S.QUEUED, S.CANCELLED, S.FAILED}),
    S.RESUMED_READY: frozenset({S.ACTIVE, S.QUEUED, S.CANCELLED, S.FAILED}),
    S.DONE: frozenset(),
    S.REJECTED: frozenset(),
    S.CANCELLED: frozenset(),
    S.FAILED: frozenset(),
}

FINAL_STATES = frozenset(s for s, nxt in TRANSITIONS.items() if not nxt)
SUSPENDED_STATES = frozenset({S.SUSPENDED_PENDING, S.SUSPENDED_QUEUED, S.SUSPENDED_SCHEDULED})
#: states in which the lease's VMs exist on hosts (running or being moved between running and saved)
RUNNING_STATES = frozenset({S.ACTIVE, S.SUSPENDING, S.RESUMING, S.RESUMED_READY})


def can_transition(current: LeaseState, target: LeaseState) -> bool:
    return target in TRANSITIONS[current]
