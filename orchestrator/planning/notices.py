"""Which end-of-lease notices are due: a pure function of a lease's plan, the time and `[notify]`.

Here, in the planning layer, because the answer is read off the plan (the lease's last VM reservation)
and nothing else: no store, no clock, no notifier. Whether a due notice was already sent is the sender's
business (`orchestrator.runtime.notices`), which asks this function at every daemon step.

The rules, kept simple on purpose:
- A lease's *planned end* is the end of its last VM reservation, while it is planned or running and that
  reservation does not end in a suspension (a lease about to be suspended pauses, it does not end then).
  A lease queued, suspended and not planned again, or final has none.
- `before_end:<offset>` is due from `end - offset` until the end, provided that moment is not before
  the lease's first planned start (a 30-minute lease gets no one-hour reminder). A moment long past (the
  daemon was down) still makes it due: it is sent once, late, rather than never.
- `ended` is due once the lease is final (done, cancelled, failed: a rejected lease never ran and was
  told so at submit) and ended after `ended_after`; a final lease gets no reminder, only `ended`.
- A lease whose end moved (extended, or planned again after a preemption) is simply measured against its
  new end: a key already sent is not sent again (the sender remembers keys, not ends), one not sent yet
  is due relative to the new end.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from orchestrator.config import offset_label
from orchestrator.model.lease import Lease
from orchestrator.model.states import LeaseState

ENDED = "ended"
BEFORE_END = "before_end"

S = LeaseState
#: states in which a lease has a planned end: planned (again), or running toward it
PLANNED_STATES = frozenset({S.SCHEDULED, S.PREPARING, S.READY, S.ACTIVE, S.RESUMING, S.RESUMED_READY,
                            S.SUSPENDED_SCHEDULED, S.MIGRATING})
#: the final states that make an `ended` notice (REJECTED is final too, but never ran)
ENDED_STATES = frozenset({S.DONE, S.CANCELLED, S.FAILED})


@dataclass(frozen=True)
class Notice:
    """One notice due for one lease: `key` is what is sent at most once per lease and notifier."""

    lease_id: int
    key: str                        # "before_end:1h", "before_end:10m", "ended"
    due_at: datetime                # the moment it became due
    end: datetime                   # the planned end (a reminder) or when the lease ended
    offset: timedelta | None = None   # a reminder's offset
    reason: str = ""                # why an ended lease ended ("done", "cancelled", "failed: ...")

    @property
    def kind(self) -> str:
        return ENDED if self.key == ENDED else BEFORE_END


def reminder_key(offset: timedelta) -> str:
    return f"{BEFORE_END}:{offset_label(offset)}"


def planned_end(lease: Lease) -> datetime | None:
    """The end of the lease's last VM reservation, when the lease is planned or running toward it."""
    vm = lease.last_vm
    if lease.state not in PLANNED_STATES or vm is None or vm.is_suspending:
        return None
    return vm.end


def end_reason(lease: Lease) -> str:
    """Why a final lease ended, in a few words for the notice."""
    if lease.state is S.DONE:
        return f"done ({lease.reason})" if lease.reason else "done: its time is up"
    return f"{lease.state.value}: {lease.reason}" if lease.reason else lease.state.value


def due_notices(lease: Lease, now: datetime, before_end: Iterable[timedelta], at_end: bool = True,
                ended_after: datetime | None = None) -> list[Notice]:
    """The notices due for `lease` at `now` (sent or not), reminders latest offset first.

    `ended_after`: an ended lease gets its `ended` notice only if it ended after this (the first step
    that sent notices from this store: leases that ended by then are not announced late)."""
    if lease.state in ENDED_STATES:
        ended = lease.end_time
        if not at_end or ended is None or (ended_after is not None and ended <= ended_after):
            return []
        return [Notice(lease.id, ENDED, due_at=ended, end=ended, reason=end_reason(lease))]
    end = planned_end(lease)
    if end is None or now >= end:
        return []
    first_start = lease.reservations[0].start
    due = []
    for offset in sorted(set(before_end), reverse=True):
        moment = end - offset
        if first_start <= moment <= now:
            due.append(Notice(lease.id, reminder_key(offset), due_at=moment, end=end, offset=offset))
    return due


def next_notice_time(lease: Lease, now: datetime, before_end: Iterable[timedelta]) -> datetime | None:
    """When the next reminder of `lease` becomes due after `now` (None: no more before its end as planned
    now), so a daemon whose clock jumps from event to event wakes for it."""
    end = planned_end(lease)
    if end is None or now >= end:
        return None
    first_start = lease.reservations[0].start
    return min((end - o for o in before_end if now < end - o and first_start <= end - o), default=None)
