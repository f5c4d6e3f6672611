"""What each lost host cost, from the event log (`leasewise report`'s "hosts lost" table).

The daemon logs a "host-down" event when it gives a silent host up (`Cluster.lose_host`), one "host-lost"
event per lease that had something planned there (requeued, failed or re-planned, and the run time a
requeued or failed lease lost), and a "host-up" event when the host answers again. One row per loss: when
the host went silent and was given up, when it came back, what happened to the leases, and the work lost.
Pure: events in, rows out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from orchestrator.model.timeutil import iso, parse_time


class EventLike(Protocol):
    """An event of the log (`orchestrator.state.store.events.Event`), as far as host losses read it."""

    @property
    def time(self) -> datetime: ...

    @property
    def kind(self) -> str: ...

    @property
    def lease_id(self) -> int | None: ...

    @property
    def detail(self) -> dict[str, Any]: ...


@dataclass
class HostLossRow:
    host: str
    silent_since: datetime | None
    lost_at: datetime
    back_at: datetime | None = None
    leases: dict[int, str] = field(default_factory=dict)   # lease -> requeued | failed | re-planned
    lost_work_s: float = 0.0                              # run time the requeued and failed leases lost

    def count(self, outcome: str) -> int:
        return sum(1 for what in self.leases.values() if what == outcome)

    @property
    def down_s(self) -> float | None:
        """How long the host was given up (None while it still is)."""
        return None if self.back_at is None else (self.back_at - self.lost_at).total_seconds()

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "silent_since": iso(self.silent_since), "lost_at": iso(self.lost_at),
                "back_at": iso(self.back_at), "leases": {str(k): v for k, v in sorted(self.leases.items())},
                "requeued": self.count("requeued"), "failed": self.count("failed"),
                "re_planned": self.count("re-planned"), "lost_work_s": self.lost_work_s}


def host_losses(events: Iterable[EventLike]) -> list[HostLossRow]:
    """One row per time a host was given up, in time order."""
    rows: list[HostLossRow] = []
    open_rows: dict[str, HostLossRow] = {}
    for event in sorted(events, key=lambda e: e.time):
        detail = event.detail
        host = detail.get("host")
        if not isinstance(host, str):
            continue
        if event.kind == "host-down":
            since = detail.get("since")
            row = HostLossRow(host, parse_time(since, "since") if isinstance(since, str) else None, event.time)
            rows.append(row)
            open_rows[host] = row
        elif event.kind == "host-lost" and host in open_rows and event.lease_id is not None:
            row = open_rows[host]
            row.leases[event.lease_id] = str(detail.get("outcome", "?"))
            lost = detail.get("lost_work_s")
            if isinstance(lost, (int, float)):
                row.lost_work_s += float(lost)
        elif event.kind == "host-up" and host in open_rows:
            open_rows.pop(host).back_at = event.time
    return rows
