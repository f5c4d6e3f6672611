"""`leasewise lease ...`: submit, list, show, cancel, extend, shorten and update leases.

Each command reads its input, makes one call on the backend its shared options select (the configured
server, else the local store: `orchestrator.service.backend`) and prints the answer. A writing call is one
transaction on the store: the cluster is rebuilt, the operation applied and planned, and everything
written back and committed, or nothing at all. The daemon enacts what the plan says at its next step;
these commands never touch a host.

Exit codes: 0 done; 2 bad input (one red line naming the field or option, nothing written): a malformed
request, an unknown lease id, a lease in a state that does not allow the operation, a request no host could
ever hold; 3 the request was well-formed but refused by the scheduler (the lease is stored as rejected,
or an extension does not fit), so scripts can tell "fix your input" from "try other times".
"""

# No `from __future__ import annotations`: typer reads the option types at runtime.

import json
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import typer
from rich.markup import escape

from orchestrator.cli import common
from orchestrator.cli.application import EXIT_REJECTED, command_group, exit_code_of, fail
from orchestrator.cli.common import StoreOptions, store_options
from orchestrator.cli.leasefile import KEYS, flag_label, load_lease_file, submission_from_fields
from orchestrator.cli.output import counted, emit_json, make_console, when
from orchestrator.cli.tables import Column, fits, print_table
from orchestrator.cli.vms import print_vms
from orchestrator.model.errors import InvalidRequest, LeasewiseError
from orchestrator.model.states import FINAL_STATES, LeaseState
from orchestrator.model.text import printable
from orchestrator.model.timeutil import iso, parse_duration
from orchestrator.service.backend import MAX_PAGE, PAGE, Event
from orchestrator.service.models import EndChange, Shortening, model_of
from orchestrator.service.views import hosts_of, lease_summary, lease_window, plan_json, plan_rows, request_json

lease_app = command_group("lease", "Submit, list, show, cancel, extend, shorten and update leases.")


# -- formatting -----------------------------------------------------------------------------------------------
def _trim(text: str) -> str:
    """An ISO time from an event's detail, to the second."""
    return re.sub(r"\.\d+(?=Z$|[+-]\d\d:\d\d$)", "", text) if isinstance(text, str) else str(text)


def _event_text(event: Event) -> str:
    detail = dict(event.detail)
    if event.kind == "planned" and isinstance(detail.get("reservations"), list):
        parts = []
        for r in detail["reservations"]:
            try:
                hosts = ",".join(sorted(set(r.get("resources", {})) | set(r.get("nodes", {}).values())))
                parts.append(f"{r['kind']} {_trim(r['start'])} → {_trim(r['end'])} on {hosts}")
            except (AttributeError, KeyError, TypeError):
                parts.append(json.dumps(r, separators=(",", ":")))
        return "; ".join(parts)
    return " ".join(f"{k}={json.dumps(v, separators=(',', ':')) if not isinstance(v, str) else v}"
                    for k, v in detail.items())


def _duration_text(seconds: float) -> str:
    seconds = int(round(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = "".join(f"{n}{u}" for n, u in ((days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")) if n)
    return text or "0s"


def size_text(mib: float) -> str:
    """Memory in a few characters: whole or tenths of GiB as `4G`, `1.5G`, else MiB as `900M`."""
    gib = mib / 1024
    if gib >= 1 and (gib * 10).is_integer():
        return f"{gib:g}G"
    return f"{mib:g}M"


def resources_text(nodes: int, cpus: float, memory_mib: float, compact: bool = False) -> str:
    """A lease's size: `4 × 2 vCPU / 4096 MiB` (4 VMs of 2 vCPUs and 4 GiB each), or where room is short
    `4×2c/4G` (--json has the numbers)."""
    if compact:
        return f"{nodes}×{cpus:g}c/{size_text(memory_mib)}"
    return f"{nodes} × {cpus:g} vCPU / {memory_mib:g} MiB"


# -- submit ---------------------------------------------------------------------------------------------------
@lease_app.command("submit")
@store_options()
def submit(
    opts: StoreOptions,
    file: Path | None = typer.Argument(None, metavar="FILE.yaml", help="YAML lease file (or give the flags below)"),
    nodes: str | None = typer.Option(None, "--nodes", metavar="N", help="Number of VMs (default 1)"),
    cpus: str | None = typer.Option(None, "--cpus", metavar="C", help="vCPUs per VM"),
    memory: str | None = typer.Option(None, "--memory", metavar="MIB", help="Memory per VM, MiB"),
    duration: str | None = typer.Option(None, "--duration", metavar="D", help="Run time: 90s, 15m, 2h, 1h30m, 01:30:00"),
    start: str | None = typer.Option(None, "--start", metavar="ISO|now|earliest",
                                     help="Omit: best-effort; 'now': immediate; an ISO 8601 time: advance reservation; "
                                          "'earliest': an advance reservation at the earliest time it fits"),
    not_before: str | None = typer.Option(None, "--not-before", metavar="ISO",
                                          help="With --start earliest: start no earlier (default now)"),
    not_after: str | None = typer.Option(None, "--not-after", metavar="ISO",
                                         help="With --start earliest: end by then, else refused (exit 3)"),
    preemptible: bool | None = typer.Option(None, "--preemptible/--no-preemptible", help="May be suspended for reservations (default: yes)"),
    image: str | None = typer.Option(None, "--image", metavar="NAME|PATH",
                                     help="A catalogued image (leasewise image list), or a disk image's absolute path on the hosts"),
    kernel: str | None = typer.Option(None, "--kernel", metavar="K", help="Kernel for direct boot (absolute path)"),
    initrd: str | None = typer.Option(None, "--initrd", metavar="I", help="Initrd for direct boot"),
    cmdline: str | None = typer.Option(None, "--cmdline", metavar="C", help="Kernel command line"),
    user: str | None = typer.Option(None, "--user", metavar="U", help="Owner (default: the current user)"),
    name: str | None = typer.Option(None, "--name", metavar="N", help="A name to find it by"),
    dirty_rate: str | None = typer.Option(None, "--dirty-rate", metavar="MIB_S", help="Memory dirty rate, MiB/s"),
    disk_size: str | None = typer.Option(None, "--disk-size", metavar="SIZE", help="Grow each VM's own disk to this size (20G, 512M)"),
    ssh_key: list[str] | None = typer.Option(None, "--ssh-key", metavar="FILE",
                                             help="A public key to log in with (repeatable; default ~/.ssh/id_*.pub)"),
    user_data: str | None = typer.Option(None, "--user-data", metavar="FILE", help="A #cloud-config file for cloud-init"),
    hostname_prefix: str | None = typer.Option(None, "--hostname-prefix", metavar="P", help="VM n calls itself P-n"),
    network: bool | None = typer.Option(None, "--network/--no-network", help="One NIC on the hosts' network (default: yes)"),
    keep_disks: bool | None = typer.Option(None, "--keep-disks", help="Keep the VMs' disks when the lease ends"),
    where: list[str] | None = typer.Option(None, "--where", metavar="EXPR",
                                           help="Only hosts whose properties meet EXPR: KEY=VALUE, KEY!=VALUE, KEY "
                                                "or !KEY (repeatable: all must hold)"),
    spread: bool | None = typer.Option(None, "--spread", help="Each VM on a different host"),
    pack: bool | None = typer.Option(None, "--pack", help="The VMs on as few hosts as possible"),
    exclusive: bool | None = typer.Option(None, "--exclusive",
                                          help="Each VM has a host to itself (without --cpus/--memory: the host's size)"),
    json_out: bool = typer.Option(False, "--json", help="Answer as JSON"),
) -> None:
    """Submit a lease and answer at once: accepted (planned start, end, hosts), queued, or rejected (exit 3)."""
    flags = {"nodes": nodes, "cpus": cpus, "memory": memory, "duration": duration, "start": start,
             "not_before": not_before, "not_after": not_after, "preemptible": preemptible, "image": image, "kernel": kernel, "initrd": initrd, "cmdline": cmdline,
             "user": user, "name": name, "dirty_rate": dirty_rate, "disk_size": disk_size,
             "ssh_key": list(ssh_key) if ssh_key else None, "user_data": user_data,
             "hostname_prefix": hostname_prefix, "network": network, "keep_disks": keep_disks,
             "where": list(where) if where else None, "spread": spread, "pack": pack, "exclusive": exclusive}
    given = [k for k in KEYS if flags.get(k) is not None]
    if file is not None:
        if given:
            raise fail(f"{flag_label(given[0])}: give a lease FILE or flags, not both")
        submission = load_lease_file(file)
        label: Callable[[str], str] = str
        source: str | None = str(file)
    else:
        if not given:
            raise fail("lease: give a lease FILE.yaml or at least --cpus, --memory and --duration")
        submission = submission_from_fields(flags, label=flag_label)
        label, source = flag_label, None
    try:
        with opts.backend() as backend:
            answer = backend.submit(submission)
    except InvalidRequest as exc:   # (the service's check, naming the key: named as the user gave it)
        if exc.field not in KEYS or exc.where is not None:
            raise
        raise InvalidRequest(label(exc.field), exc.problem, where=source) from None
    if json_out:
        emit_json(answer)
    else:
        _print_answer(answer, earliest=submission.start == "earliest")
    if answer["state"] == LeaseState.REJECTED.value:
        raise typer.Exit(EXIT_REJECTED)


def _print_answer(answer: dict, earliest: bool = False) -> None:
    console = make_console()
    head = f"lease {answer['id']}"
    kind = answer["type"]
    if answer["state"] == LeaseState.REJECTED.value:
        console.print(f"[bold red]{head} rejected[/] ({kind}): {escape(printable(answer['reason']))}", soft_wrap=True)
        return
    if answer["state"] == LeaseState.QUEUED.value:
        console.print(f"[bold yellow]{head} queued[/] ({kind}): no room to plan it now; it is planned when "
                      "capacity frees up", soft_wrap=True)
        return
    console.print(f"[bold green]{head} accepted[/] ({kind}, {answer['state']})", soft_wrap=True)
    if answer["start"] is not None:
        start = when(datetime.fromisoformat(answer["start"].replace("Z", "+00:00")))
        end = when(datetime.fromisoformat(answer["end"].replace("Z", "+00:00")))
        console.print(f"  planned {start} → {end} on {', '.join(answer['hosts'])}", soft_wrap=True)
        if earliest:
            console.print(f"  the earliest start it fits: {start}", soft_wrap=True)
        if answer["suspended_at_end"]:
            console.print(f"  then suspended at {end}: the rest runs when it is resumed", soft_wrap=True)
    for other in answer["preempted"]:
        console.print(f"  preempts lease {other['id']}: {other['change']}", soft_wrap=True)


# -- list / show ----------------------------------------------------------------------------------------------
@lease_app.command("list")
@store_options()
def list_leases(
    opts: StoreOptions,
    state_filter: list[str] | None = typer.Option(None, "--status", metavar="S",
                                                  help="Only leases in this state (repeatable; 'live' = not final)"),
    user: str | None = typer.Option(None, "--user", metavar="U", help="Leases of this user (default: yours)"),
    everyone: bool = typer.Option(False, "--all", help="Every page of everyone's leases (of --user's with --user)"),
    after: int | None = typer.Option(None, "--after", metavar="ID", min=0, help="The page after this lease id"),
    limit: int = typer.Option(PAGE, "--limit", metavar="N", min=1, max=MAX_PAGE, help="Leases a page holds"),
    json_out: bool = typer.Option(False, "--json", help="Print JSON"),
) -> None:
    """Your leases, a page at a time (--all: everyone's, every page): id, name, type, state, nodes (count ×
    vCPUs / memory), start, end, hosts."""
    states: list[str] | None = None
    if state_filter:
        states = []
        for s in state_filter:
            s = s.strip().lower()
            if s == "live":
                states.extend(x.value for x in LeaseState if x not in FINAL_STATES)
                continue
            try:
                states.append(LeaseState(s).value)
            except ValueError:
                raise fail(f"--status: {s!r} is not a lease state (one of live, "
                           f"{', '.join(x.value for x in LeaseState)})") from None
    following = None
    with opts.backend() as backend:
        if everyone:
            leases = backend.leases(states, user, everyone=True)
        else:
            leases, following = backend.lease_page(states, user, False, after, limit)
    rows = [lease_summary(lease) for lease in leases]
    if json_out:
        emit_json(rows)
        return
    if not rows:
        make_console().print("no leases")
        return
    columns = [Column("id", "right"), Column("name", wraps=True, drop=3), Column("type", wraps=True, drop=1),
               Column("state"), Column("nodes", "right", wraps=True, drop=2), Column("start"), Column("end"),
               Column("hosts", wraps=True, drop=4)]
    windows = [lease_window(lease) for lease in leases]
    console = make_console()

    def cells(compact: bool) -> list[list[str]]:
        return [[str(row["id"]), escape(row["name"]), row["type"], row["state"],
                 resources_text(row["nodes"], row["cpus"], row["memory_mib"], compact), when(start), when(end),
                 ", ".join(row["hosts"])] for row, (start, end) in zip(rows, windows)]

    title = counted(len(rows), "lease")
    full = cells(compact=False)
    print_table(console, columns, full if fits(console, columns, full, title=title) else cells(compact=True),
                title=title)
    if following is not None:
        console.print(f"more: lease list --after {following}", markup=False)


@lease_app.command("show")
@store_options()
def show(
    opts: StoreOptions,
    lease_id: str = typer.Argument(..., metavar="ID", help="Lease id"),
    json_out: bool = typer.Option(False, "--json", help="Print JSON"),
) -> None:
    """One lease: its request, its plan (every reservation), its state history and its events."""
    number = common.parse_lease_id(lease_id)
    with opts.backend() as backend:
        lease, events, vms = backend.lease(number)
    plan = plan_rows(lease)
    if json_out:
        emit_json({
            "lease": lease_summary(lease),
            "request": request_json(lease),
            "counters": {"suspensions": lease.suspensions, "migrations": lease.migrations, "requeues": lease.requeues,
                         "accumulated_s": lease.accumulated.total_seconds()},
            "plan": [plan_json(rr) for rr in plan],
            "history": [{"time": iso(at), "state": s.value} for at, s in lease.history],
            "events": [{"id": e.id, "time": iso(e.time), "kind": e.kind, "detail": e.detail} for e in events],
            "vms": [vm.to_json() for vm in vms or ()],
        })
        return
    console = make_console()
    req = lease.request
    node = req.nodes[0]
    # (stored text through `printable`, newlines too: a name is one line however it was written)
    title = f"lease {lease.id}" + (f" ({escape(printable(req.name))})" if req.name else "")
    console.print(f"[bold]{title}[/]: {lease.type.value}, {lease.state.value}"
                  + (f" — {escape(printable(lease.reason))}" if lease.reason else ""), soft_wrap=True)
    console.print(f"  request: {req.numnodes} × {node.vcpus:g} vCPU / {node.memory:g} MiB for "
                  f"{_duration_text(req.duration.total_seconds())}"
                  + (f", start {when(req.start)}" if req.start is not None else "")
                  + f", {'preemptible' if req.preemptible else 'not preemptible'}"
                  + (f", user {escape(printable(req.user))}" if req.user else "")
                  + f", submitted {when(req.submit_time)}", soft_wrap=True)
    if req.placement is not None:
        console.print(f"  placement: {escape(req.placement.describe())}", soft_wrap=True)
    if req.image is not None:
        boot = (f"disk {req.image.disk}" if req.image.disk else
                f"kernel {req.image.kernel}" + (f" initrd {req.image.initrd}" if req.image.initrd else "")
                + (f" cmdline {req.image.cmdline!r}" if req.image.cmdline else ""))
        console.print(f"  boots: {escape(printable(boot))}", soft_wrap=True)
    console.print(f"  run so far {_duration_text(lease.accumulated.total_seconds())}, suspensions "
                  f"{lease.suspensions}, migrations {lease.migrations}, requeues {lease.requeues}", soft_wrap=True)
    if req.guest is not None:
        g = req.guest
        console.print(f"  guest: {len(g.ssh_keys)} ssh key(s), {'user-data' if g.user_data else 'no user-data'}, "
                      f"{'a NIC each' if g.network else 'no network'}"
                      + (f", disks grown to {g.disk_size_mib} MiB" if g.disk_size_mib else "")
                      + (", disks kept after the lease (in the hosts' leasewise-vms pool, lw-ID-N.qcow2)"
                         if g.keep_disks else ""), soft_wrap=True)
    if vms is not None:
        print_vms(console, vms)

    if plan:
        print_table(console, [Column("rr"), Column("kind"), Column("state", drop=1), Column("start"), Column("end"),
                              Column("hosts", wraps=True, drop=2)],
                    [[str(rr.id), rr.kind.value, rr.state.value, when(rr.start), when(rr.end), ", ".join(hosts_of(rr))]
                     for rr in plan], title="plan")
    else:
        console.print("  plan: no reservations")
    print_table(console, [Column("time"), Column("state")], [[when(at), s.value] for at, s in lease.history],
                title="state history")
    print_table(console, [Column("#"), Column("time"), Column("kind"), Column("detail", wraps=True)],
                [[str(e.id), when(e.time), e.kind, escape(_event_text(e))] for e in events], title="events")


# -- cancel / extend ------------------------------------------------------------------------------------------
@lease_app.command("cancel")
@store_options()
def cancel(
    opts: StoreOptions,
    lease_id: str = typer.Argument(..., metavar="ID", help="Lease id"),
) -> None:
    """Cancel a lease: its reservations are freed now; the daemon stops running VMs at its next step."""
    number = common.parse_lease_id(lease_id)
    with opts.backend() as backend:
        done = backend.cancel(number)
    console = make_console()
    console.print(f"lease {number} cancelled", soft_wrap=True)
    if done["was_running"]:
        console.print(f"  its VMs on {', '.join(done['hosts'])} are stopped by the daemon at its next step",
                      soft_wrap=True)


@lease_app.command("extend")
@store_options()
def extend(
    opts: StoreOptions,
    lease_id: str = typer.Argument(..., metavar="ID", help="Lease id"),
    by: str | None = typer.Option(None, "--by", metavar="DURATION", help="How much longer: 30m, 1h, ..."),
) -> None:
    """Lengthen a lease; refused (exit 3) with the reason when its hosts are reserved after it."""
    number = common.parse_lease_id(lease_id)
    if by is None:
        raise fail("--by: is required (e.g. --by 30m)")
    amount = parse_duration(by, "--by")
    if amount.total_seconds() <= 0:
        raise fail(f"--by: must be greater than zero (got {by!r})")
    done = _reshaped(opts, number, "extended", lambda backend: backend.extend(number, by))
    message = (f"lease {number} extended by {_duration_text(amount.total_seconds())} "
               f"(now {_duration_text(done['duration_s'])})")
    if done["end"] is not None:
        message += f"; planned end {when(datetime.fromisoformat(done['end']))}"
    make_console().print(message, soft_wrap=True)


@lease_app.command("shorten")
@store_options()
def shorten(
    opts: StoreOptions,
    lease_id: str = typer.Argument(..., metavar="ID", help="Lease id"),
    by: str | None = typer.Option(None, "--by", metavar="DURATION", help="How much shorter: 30m, 1h, ..."),
    to: str | None = typer.Option(None, "--to", metavar="ISO", help="The new planned end"),
) -> None:
    """Make a lease shorter, by a duration or to a new end: what it frees is planned at once (leases planned
    after it move earlier, queued leases may start). Refused (exit 3) when it would end before now."""
    number = common.parse_lease_id(lease_id)
    if (by is None) == (to is None):
        raise fail("--by: give --by DURATION or --to TIME (one of them)")
    change = model_of(Shortening, {"by": by, "to": to}, flag_label)
    done = _reshaped(opts, number, "shortened", lambda backend: backend.shorten(number, change))
    _print_reshaped(number, "shortened", done)


@lease_app.command("update")
@store_options()
def update(
    opts: StoreOptions,
    lease_id: str = typer.Argument(..., metavar="ID", help="Lease id"),
    end: str | None = typer.Option(None, "--end", metavar="ISO", help="The new planned end, earlier or later"),
) -> None:
    """Move a lease's planned end, earlier (as `lease shorten --to`) or later (as `lease extend`); refused
    (exit 3) with the reason when its hosts are reserved after it."""
    number = common.parse_lease_id(lease_id)
    if end is None:
        raise fail("--end: is required (e.g. --end 2027-03-01T18:00:00Z)")
    change = model_of(EndChange, {"end": end}, flag_label)
    done = _reshaped(opts, number, "updated", lambda backend: backend.update(number, change))
    _print_reshaped(number, "updated", done)


def _reshaped(opts: StoreOptions, number: int, done: str, call) -> dict:
    """`call(backend)`, a change of the lease's length: its refusal printed as one line (exit 3), a field the
    service names given as its option."""
    head = f"lease {number} not {done}: "
    try:
        with opts.backend() as backend:
            return call(backend)
    except InvalidRequest as exc:
        if exc.field in ("by", "to", "end"):
            raise InvalidRequest(flag_label(exc.field), exc.problem) from None
        raise
    except LeasewiseError as exc:
        if exit_code_of(exc) != EXIT_REJECTED or not str(exc).startswith(head):
            raise
        make_console().print(f"[bold red]lease {number} not {done}[/]: {escape(str(exc)[len(head):])}",
                             soft_wrap=True)
        raise typer.Exit(EXIT_REJECTED) from None


def _print_reshaped(number: int, done: str, answer: dict) -> None:
    message = f"lease {number} {done} (now {_duration_text(answer['duration_s'])})"
    if answer["end"] is not None:
        message += f"; planned end {when(datetime.fromisoformat(answer['end']))}"
    make_console().print(message, soft_wrap=True)
