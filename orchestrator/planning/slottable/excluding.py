"""Queries with `excluding`: reservations to treat as gone, which answers "what if these leases were
preempted" without touching the table. The usage read from the table is reduced by the excluded
reservations in force at the time asked about."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from orchestrator.model.reservations import Reservation
from orchestrator.model.resources import NOTHING, Resources, add
from orchestrator.planning.slottable.keys import time_key

#: an excluded reservation as the walks compare it: (start key, end key, amount on the host)
Excluded = tuple[int, int, Resources]


def relevant_exclusions(excluding: Collection[Reservation], host: str, t1: datetime, t2: datetime | None,
             present: dict[int, Reservation]) -> list[Reservation]:
    """The excluded reservations that matter on `host` in [t1, t2), each once; one that is not in the
    table (never added, or already removed) is gone already and must not be subtracted again."""
    out: dict[int, Reservation] = {}
    for r in excluding:
        if (host in r.resources and r.end > t1 and (t2 is None or r.start < t2)
                and present.get(r.id) is r):
            out[r.id] = r
    return list(out.values())


def exclusion_keys(reservations: list[Reservation], host: str) -> list[Excluded]:
    """The reservations as the walks compare them."""
    return [(time_key(r.start), time_key(r.end), r.resources[host]) for r in reservations]


def excluded_amount(excluded: list[Excluded], k: int) -> Resources:
    """What the excluded reservations hold at key k."""
    total = NOTHING
    for start, end, amount in excluded:
        if start <= k < end:
            total = add(total, amount)
    return total
