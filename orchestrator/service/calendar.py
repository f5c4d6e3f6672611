"""The calendar's window: every reservation meeting [start, end) on every host, as plain values.

The web calendar draws hosts against time from this. It is read often and must stay quick with hundreds of
hosts and thousands of reservations, so it is not the `Timeline` of `leasewise plan` (a lane-assigned model
of objects per bar): the reservations are copied as tuples of numbers and short strings while the
scheduler's lock is held (nothing the scheduler changes afterwards is shared with a request), and the
browser stacks overlapping bars itself. Which hosts a reservation shows on is the Gantt's own rule
(`reservation_hosts`: a migration on both ends).

Live leases come from the scheduler in memory; ended leases from the store (the scheduler forgets them), of
which only what ran is drawn: a reservation still planned when its lease ended never happened.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from orchestrator.analysis.timeline import reservation_hosts
from orchestrator.model.lease import Lease
from orchestrator.model.reservations import Reservation, ReservationState
from orchestrator.model.timeutil import parse_time
from orchestrator.state.store import HostRecord

#: (host, kind, lease id, start, end (UNIX seconds), reservation state, role, reservation id, vCPUs, MiB):
#: role is "from", "to" or "from+to" on a migration's hosts ("" otherwise); vCPUs and MiB what it holds there
Bar = tuple[str, str, int, int, int, str, str, int, float, float]


@dataclass(frozen=True, slots=True)
class CalendarLease:
    id: int
    name: str
    user: str
    type: str       # advance-reservation, best-effort, immediate
    state: str


@dataclass(frozen=True, slots=True)
class CalendarHost:
    name: str
    vcpus: int
    memory_mib: int
    unavailable_from: datetime | None = None   # drained: no lease may use it from then on
    silent_since: datetime | None = None       # the daemon has had no answer from it since then


@dataclass(frozen=True)
class CalendarWindow:
    start: datetime
    end: datetime
    now: datetime
    hosts: list[CalendarHost]
    leases: dict[int, CalendarLease] = field(default_factory=dict)
    bars: list[Bar] = field(default_factory=list)


def _lease(lease: Lease) -> CalendarLease:
    request = lease.request
    return CalendarLease(lease.id, request.name, request.user, lease.type.value, lease.state.value)


def _bars(lease: Lease, rr: Reservation) -> list[Bar]:
    if lease.is_final and rr.state is ReservationState.SCHEDULED:
        return []   # planned, but the lease ended first
    start, end = int(rr.start.timestamp()), int(rr.end.timestamp())
    held = rr.resources
    return [(host, rr.kind.value, lease.id, start, end, rr.state.value, role, rr.id,
             held[host].vcpus if host in held else 0, held[host].memory if host in held else 0)
            for host, role in reservation_hosts(rr)]


@dataclass
class Copied:
    """What the scheduler in memory says of a window, copied while its lock is held."""

    hosts: list[HostRecord]
    leases: dict[int, CalendarLease]
    bars: list[Bar]

    @classmethod
    def of(cls, pairs: Iterable[tuple[Lease, Reservation]], hosts: Iterable[HostRecord]) -> "Copied":
        leases: dict[int, CalendarLease] = {}
        bars: list[Bar] = []
        for lease, rr in pairs:
            if lease.id not in leases:
                leases[lease.id] = _lease(lease)
            bars += _bars(lease, rr)
        return cls(list(hosts), leases, bars)

    def window(self, start: datetime, end: datetime, now: datetime, ended: Iterable[Lease],
               silent: Mapping[str, str]) -> CalendarWindow:
        """The window, with the ended leases the store has (those the scheduler still holds are its) and
        the silent hosts as the daemon noted them (host -> ISO time)."""
        leases, bars = dict(self.leases), list(self.bars)
        lo, hi = int(start.timestamp()), int(end.timestamp())
        for lease in ended:
            if lease.id in leases:
                continue
            mine = [bar for vm in lease.reservations for rr in vm.all_parts() for bar in _bars(lease, rr)
                    if bar[3] < hi and (bar[4] > lo or bar[3] == bar[4] >= lo)]
            if mine:
                leases[lease.id] = _lease(lease)
                bars += mine
        hosts = [CalendarHost(h.name, h.vcpus, h.memory_mib, None if h.available else h.unavailable_from or start,
                              _silent_since(silent, h.name)) for h in self.hosts]
        return CalendarWindow(start, end, now, hosts, leases, bars)


def _silent_since(silent: Mapping[str, str], host: str) -> datetime | None:
    text = silent.get(host)
    if not isinstance(text, str):
        return None
    try:
        return parse_time(text, "silent_hosts")
    except ValueError:
        return None
