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
from orchestrator.model.reservations import Reservation, ReservationKind, ReservationState
from orchestrator.model.timeutil import parse_time
from orchestrator.state.store import HostRecord

#: (host, kind, lease id, start, end (UNIX seconds), reservation state, role, reservation id, vCPUs, MiB):
#: role is "from", "to" or "from+to" on a migration's hosts ("" otherwise); vCPUs and MiB what it holds there
Bar = tuple[str, str, int, int, int, str, str, int, float, float]

#: the kinds' and states' names, looked up (an enum's `.value` costs several times a lookup, per reservation)
_NAMES = {member: member.value for member in (*ReservationKind, *ReservationState)}


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


def _bars(lease_id: int, final: bool, rr: Reservation) -> list[Bar]:
    """The bars of one reservation (none for what an ended lease still had planned). The window's hot loop,
    under the scheduler's lock: a reservation that moves nothing is on the hosts it holds, as is."""
    state = rr.state
    if final and state is ReservationState.SCHEDULED:
        return []   # planned, but the lease ended first
    start, end, kind, held = int(rr.start.timestamp()), int(rr.end.timestamp()), _NAMES[rr.kind], rr.resources
    name = _NAMES[state]
    if held and not rr.transfers:
        return [(host, kind, lease_id, start, end, name, "", rr.id, amount.cpu / 100, amount.memory)
                for host, amount in held.items()]
    return [(host, kind, lease_id, start, end, name, role, rr.id,
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
        final: dict[int, bool] = {}
        bars: list[Bar] = []
        for lease, rr in pairs:
            lease_id = lease.id
            if lease_id not in leases:
                leases[lease_id] = _lease(lease)
                final[lease_id] = lease.is_final
            bars += _bars(lease_id, final[lease_id], rr)
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
            mine = [bar for vm in lease.reservations for rr in vm.all_parts() for bar in _bars(lease.id, True, rr)
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
