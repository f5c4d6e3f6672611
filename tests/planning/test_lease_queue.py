"""The best-effort queue keeps its waiting leases in submit order and counts the suspended ones among
them (`LeaseQueue.resuming`) as they come and go, through a pass (`take`, `put_back`) too."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.model.lease import Lease, LeaseRequest, LeaseType
from orchestrator.model.resources import Resources
from orchestrator.model.states import LeaseState as S
from orchestrator.model.timeutil import UTC
from orchestrator.planning.queue import LeaseQueue

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def waiting(lease_id: int, submit: int, suspended: bool) -> Lease:
    lease = Lease(lease_id, LeaseRequest(type=LeaseType.BEST_EFFORT, nodes=(Resources.of(1, 1024),),
                                         duration=timedelta(hours=1), submit_time=T0 + timedelta(minutes=submit)))
    lease.state = S.SUSPENDED_QUEUED if suspended else S.QUEUED
    return lease


def suspended_in(queue: LeaseQueue) -> int:
    return sum(lease.state is S.SUSPENDED_QUEUED for lease in queue)


# each step: ("add", submit minute, suspended), ("remove", which), ("pass", which are kept, added meanwhile)
steps = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 5), st.booleans()),
    st.tuples(st.just("remove"), st.integers(0, 50)),
    st.tuples(st.just("pass"), st.lists(st.booleans(), max_size=12),
              st.lists(st.tuples(st.integers(0, 5), st.booleans()), max_size=2))), max_size=30)


@settings(max_examples=300, deadline=None)
@given(steps=steps)
def test_the_count_of_suspended_leases_follows_the_queue(steps):
    queue, next_id = LeaseQueue(), 1
    for step in steps:
        if step[0] == "add":
            queue.add(waiting(next_id, step[1], step[2]))
            next_id += 1
        elif step[0] == "remove":
            leases = list(queue)
            if leases:
                assert queue.remove(leases[step[1] % len(leases)])
        else:
            entries, resuming = queue.take()
            assert resuming == sum(e[2].state is S.SUSPENDED_QUEUED for e in entries)
            assert not queue and queue.resuming == 0
            for submit, suspended in step[2]:   # (added during the pass: victims requeued)
                queue.add(waiting(next_id, submit, suspended))
                next_id += 1
            keep = step[1] + [True] * len(entries)
            kept = [e for e, k in zip(entries, keep, strict=False) if k]
            placed = [e for e, k in zip(entries, keep, strict=False) if not k]
            queue.put_back(kept, resuming - sum(e[2].state is S.SUSPENDED_QUEUED for e in placed))
        assert queue.resuming == suspended_in(queue)
        order = [(lease.submit_time, lease.id) for lease in queue]
        assert order == sorted(order)
