"""What the pages show, as plain values the templates lay out: a calendar window and its data, the lease
table's rows (the columns of `lease list`), a lease, the hosts, and the answers of the actions in the words
the CLI uses."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any

from orchestrator.model.text import printable
from orchestrator.analysis.timeline import KIND_COLOURS, KIND_ORDER
from orchestrator.model.errors import InvalidRequest
from orchestrator.model.lease import Lease
from orchestrator.model.quota import duration_text
from orchestrator.model.reservations import ReservationKind, ReservationState
from orchestrator.model.states import FINAL_STATES, LeaseState
from orchestrator.model.timeutil import UTC, iso
from orchestrator.service.calendar import CalendarWindow
from orchestrator.service.views import hosts_of, lease_window
from orchestrator.state.answers import when

VIEWS = ("day", "week", "month")
#: the calendar's kinds, in the legend's order, each with its colour (the Gantt's) and its name
KINDS = [k for k in KIND_ORDER if k is not ReservationKind.UNAVAILABLE]
KIND_NAMES = {ReservationKind.VM: "VM", ReservationKind.SUSPEND: "suspension", ReservationKind.RESUME: "resumption",
              ReservationKind.MIGRATE: "migration (memory image)", ReservationKind.LIVE_MIGRATE: "live migration",
              ReservationKind.SHUTDOWN: "shutdown"}
_STATES = [s.value for s in ReservationState]
_ROLES = ["", "from", "to", "from+to"]


# -- the calendar's window ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Window:
    """A day, a week (Monday to Sunday) or a month, in UTC."""

    view: str
    first: date

    @classmethod
    def of(cls, view: str | None, day: str | None, today: date) -> "Window":
        view = (view or "week").strip().lower()
        if view not in VIEWS:
            raise InvalidRequest("view", f"must be day, week or month (got {view!r})")
        try:
            chosen = date.fromisoformat(day.strip()) if day and day.strip() else today
        except ValueError:
            raise InvalidRequest("date", f"{day!r} is not a date (YYYY-MM-DD)") from None
        if not date(1970, 1, 1) <= chosen <= date(9998, 11, 30):
            raise InvalidRequest("date", f"{chosen} is not between 1970 and 9998")
        if view == "week":
            chosen -= timedelta(days=chosen.weekday())
        elif view == "month":
            chosen = chosen.replace(day=1)
        return cls(view, chosen)

    @property
    def start(self) -> datetime:
        return datetime.combine(self.first, time(), tzinfo=UTC)

    @property
    def end(self) -> datetime:
        return datetime.combine(self.next, time(), tzinfo=UTC)

    @property
    def next(self) -> date:
        if self.view == "day":
            return self.first + timedelta(days=1)
        if self.view == "week":
            return self.first + timedelta(days=7)
        return (self.first.replace(day=28) + timedelta(days=4)).replace(day=1)

    @property
    def previous(self) -> date:
        if self.view == "day":
            return self.first - timedelta(days=1)
        if self.view == "week":
            return self.first - timedelta(days=7)
        return (self.first - timedelta(days=1)).replace(day=1)

    @property
    def title(self) -> str:
        if self.view == "day":
            return self.first.strftime("%A %d %B %Y")
        if self.view == "week":
            last = self.next - timedelta(days=1)
            return f"week of {self.first:%d %B %Y} to {last:%d %B %Y}"
        return self.first.strftime("%B %Y")


def calendar_data(window: Window, found: CalendarWindow, me: str) -> dict[str, Any]:
    """The calendar's data, compact: each bar is 7 numbers in one flat list (host, kind, lease and state as
    indexes into the lists beside it, start and end in seconds from the window's start, and the host's
    role in a migration), so thousands of reservations stay a small document the browser reads at once."""
    base = int(found.start.timestamp())
    host_index = {h.name: i for i, h in enumerate(found.hosts)}
    lease_ids = sorted(found.leases)
    lease_index = {lease_id: i for i, lease_id in enumerate(lease_ids)}
    kind_index = {k.value: i for i, k in enumerate(KINDS)}
    state_index = {s: i for i, s in enumerate(_STATES)}
    role_index = {r: i for i, r in enumerate(_ROLES)}
    bars: list[int] = []
    used: list[list[float]] = [[0, 0] for _ in found.hosts]   # (vCPUs, MiB) held now, per host
    now = int(found.now.timestamp())
    for host, kind, lease_id, start, end, state, role, _rr, vcpus, mib in found.bars:
        row = host_index.get(host)
        if row is None or kind not in kind_index:
            continue   # (a host removed meanwhile; a drain's own block)
        bars += (row, kind_index[kind], lease_index[lease_id], start - base, end - base, state_index[state],
                 role_index.get(role, 0))
        if start <= now < end:
            used[row][0] += vcpus
            used[row][1] += mib
    leases = [[i, printable(lease.name), printable(lease.user), lease.type, lease.state]
              for i, lease in ((i, found.leases[i]) for i in lease_ids)]
    return {
        "view": window.view, "title": window.title, "date": window.first.isoformat(),
        "previous": window.previous.isoformat(), "next": window.next.isoformat(),
        "start": base, "end": int(found.end.timestamp()), "now": now, "me": me,
        "kinds": [[k.value, KIND_NAMES[k], KIND_COLOURS[k]] for k in KINDS], "states": _STATES, "roles": _ROLES,
        "hosts": [[h.name, h.vcpus, h.memory_mib, _seconds(h.unavailable_from, base), _seconds(h.silent_since, base),
                   *used[i]] for i, h in enumerate(found.hosts)],
        "leases": leases, "bars": bars,
    }


def _seconds(value: datetime | None, base: int) -> int | None:
    return None if value is None else int(value.timestamp()) - base


def embedded_json(data: Any) -> str:
    """JSON to put inside a page's <script type="application/json">: no `<`, `>` or `&` that could end it."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# -- leases ----------------------------------------------------------------------------------------------------
LIVE = "live"
STATE_CHOICES = [LIVE, "all"] + [s.value for s in LeaseState]


def listed_states(choice: str | None) -> tuple[str, list[str] | None]:
    """The table's state filter: `live` (not final: the default), `all`, or one state."""
    choice = (choice or LIVE).strip().lower()
    if choice == LIVE:
        return choice, [s.value for s in LeaseState if s not in FINAL_STATES]
    if choice == "all":
        return choice, None
    if choice not in STATE_CHOICES:
        raise InvalidRequest("state", f"{choice!r} is not a lease state (one of {', '.join(STATE_CHOICES)})")
    return choice, [choice]


def nodes_text(lease: Lease) -> str:
    node = lease.request.nodes[0]
    return f"{lease.numnodes} × {node.vcpus:g} vCPU / {node.memory:g} MiB"


def lease_row(lease: Lease) -> dict[str, Any]:
    """A row of the lease table: `lease list`'s columns, and the owner."""
    start, end = lease_window(lease)
    return {"id": lease.id, "name": lease.request.name, "user": lease.request.user, "type": lease.type.value,
            "state": lease.state.value, "nodes": nodes_text(lease), "start": when(start), "end": when(end),
            "hosts": ", ".join(hosts_of(lease.last_vm)), "reason": lease.reason}


def lease_page(lease: Lease) -> dict[str, Any]:
    """`lease show`'s request, counters and plan, as lines and rows."""
    req = lease.request
    request = [f"{nodes_text(lease)} for {duration_text(req.duration)}"
               + (f", start {when(req.start)}" if req.start is not None else "")
               + f", {'preemptible' if req.preemptible else 'not preemptible'}"
               + (f", user {req.user}" if req.user else "") + f", submitted {when(req.submit_time)}"]
    if req.image is not None:
        image = req.image
        boot = (f"disk {image.disk}" + (f" (image {image.name})" if image.name else "") if image.disk else
                f"kernel {image.kernel}" + (f" initrd {image.initrd}" if image.initrd else "")
                + (f" cmdline {image.cmdline!r}" if image.cmdline else ""))
        request.append(f"boots {boot}")
    if req.guest is not None:
        g = req.guest
        request.append(f"guest: {len(g.ssh_keys)} ssh key(s), {'user-data' if g.user_data else 'no user-data'}, "
                       f"{'a NIC each' if g.network else 'no network'}"
                       + (f", disks grown to {g.disk_size_mib} MiB" if g.disk_size_mib else "")
                       + (", disks kept after the lease" if g.keep_disks else ""))
    request.append(f"run so far {duration_text(lease.accumulated)}, suspensions {lease.suspensions}, "
                   f"migrations {lease.migrations}, requeues {lease.requeues}")
    plan = [{"id": rr.id, "kind": rr.kind.value, "state": rr.state.value, "start": when(rr.start), "end": when(rr.end),
             "hosts": ", ".join(hosts_of(rr))} for vm in lease.reservations for rr in vm.all_parts()]
    return {"row": lease_row(lease), "request": request, "plan": plan,
            "history": [(when(at), state.value) for at, state in lease.history],
            "final": lease.is_final, "start": lease_window(lease)[0]}


def event_text(kind: str, detail: dict[str, Any]) -> str:
    """An event's detail on one line (a plan's reservations as `kind start → end on hosts`)."""
    if kind == "planned" and isinstance(detail.get("reservations"), list):
        parts = []
        for r in detail["reservations"]:
            if isinstance(r, dict) and {"kind", "start", "end"} <= set(r):
                hosts = ",".join(sorted(set(r.get("resources") or {}) | set((r.get("nodes") or {}).values())))
                parts.append(f"{r['kind']} {r['start']} → {r['end']} on {hosts}")
        return "; ".join(parts)
    return " ".join(f"{k}={v if isinstance(v, str) else json.dumps(v, separators=(',', ':'))}" for k, v in detail.items())


def report_rows(report) -> list[dict[str, Any]]:
    """`report --lease`'s rows: planned against enacted, with the deltas in seconds."""
    from orchestrator.analysis.report import signed_seconds

    return [{"id": r.reservation_id or "-", "what": r.what, "hosts": ", ".join(r.hosts),
             "planned_start": when(r.planned_start) if r.compares_start else "-",
             "enacted_start": when(r.enacted_start) if r.compares_start else "-",
             "delta_start": signed_seconds(r.delta_start),
             "planned_end": when(r.planned_end) if r.compares_end else "-",
             "enacted_end": when(r.enacted_end) if r.compares_end else "-",
             "delta_end": signed_seconds(r.delta_end), "status": "failed" if r.failed else "ok"}
            for r in report.rows]


# -- the answers of the actions, as the CLI says them --------------------------------------------------------------
def submit_lines(answer: dict[str, Any]) -> tuple[str, list[str]]:
    """(outcome, lines) of `lease submit`'s answer: outcome is accepted, queued or rejected."""
    head = f"lease {answer['id']}"
    kind = answer["type"]
    if answer["state"] == LeaseState.REJECTED.value:
        return "rejected", [f"{head} rejected ({kind}): {answer['reason']}"]
    if answer["state"] == LeaseState.QUEUED.value:
        return "queued", [f"{head} queued ({kind}): no room to plan it now; it is planned when capacity frees up"]
    lines = [f"{head} accepted ({kind}, {answer['state']})"]
    if answer["start"] is not None:
        lines.append(f"planned {answer['start']} → {answer['end']} on {', '.join(answer['hosts'])}")
        if answer["suspended_at_end"]:
            lines.append(f"then suspended at {answer['end']}: the rest runs when it is resumed")
    lines += [f"preempts lease {other['id']}: {other['change']}" for other in answer["preempted"]]
    return "accepted", lines


def free_rows(answer: dict[str, Any]) -> dict[str, Any]:
    """`plan --free`'s answer as the submit form lists it: each window's start, latest start and hosts."""
    return {"placement": answer.get("placement"),
            "windows": [{"start": w["start"], "latest_start": w["latest_start"] or "any time later",
                         "hosts": ", ".join(w["hosts"])} for w in answer["windows"]]}


def cancel_lines(done: dict[str, Any]) -> list[str]:
    lines = [f"lease {done['id']} cancelled"]
    if done["was_running"]:
        lines.append(f"its VMs on {', '.join(done['hosts'])} are stopped by the daemon at its next step")
    return lines


def extend_lines(done: dict[str, Any]) -> list[str]:
    line = (f"lease {done['id']} extended by {duration_text(timedelta(seconds=done['by_s']))} "
            f"(now {duration_text(timedelta(seconds=done['duration_s']))})")
    return [line + (f"; planned end {iso(datetime.fromisoformat(done['end']))}" if done["end"] else "")]


def drain_lines(done: dict[str, Any]) -> list[str]:
    leases = [(lease["id"], lease["change"]) for lease in done["leases"]]
    lines = [f"lease {i}: {what}" for i, what in leases]
    lines.append(f"host {done['host']} drained: unavailable from {iso(datetime.fromisoformat(done['unavailable_from']))}"
                 + ("" if leases else " (nothing ran or was planned there)"))
    return lines


# -- hosts ------------------------------------------------------------------------------------------------------
def host_properties(row: dict[str, Any]) -> dict[str, Any]:
    """A host's properties (the placement issue adds them to `host list`'s rows): shown when rows have them."""
    return dict(row.get("properties") or {})


def host_rows(rows: list[dict[str, Any]], found: CalendarWindow) -> list[dict[str, Any]]:
    """`host list`'s rows with what the calendar knows now: drained since, silent since, vCPUs and MiB held."""
    held: dict[str, list[float]] = {}
    now = int(found.now.timestamp())
    for host, _kind, _lease, start, end, _state, _role, _rr, vcpus, mib in found.bars:
        if start <= now < end:
            amounts = held.setdefault(host, [0, 0])
            amounts[0] += vcpus
            amounts[1] += mib
    known = {h.name: h for h in found.hosts}
    out = []
    for row in rows:
        record = known.get(row["name"])
        vcpus, mib = held.get(row["name"], (0, 0))
        silent = record.silent_since if record is not None else None
        drained = record.unavailable_from if record is not None else None
        if row.get("reachable") is False:
            seen = f"does not answer: {row.get('error') or 'unreachable'}"
        elif silent is not None:
            seen = f"silent since {when(silent)}"
        else:
            seen = "answering"
        out.append({**row, "used": f"{vcpus:g} / {row['vcpus']} vCPUs, {mib:g} / {row['memory_mib']} MiB",
                    "drained": when(drained) if drained is not None else None,
                    "state": "drained" if not row["available"] else "down" if silent is not None else "available",
                    "seen": seen, "properties": host_properties(row)})
    return out
