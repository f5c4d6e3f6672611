"""`leasewise lease ...`: submit, list, show, cancel and extend leases in the store.

Each writing command is one transaction on the store (`open_cluster`): the cluster is rebuilt, the
operation applied and planned, and everything written back and committed, or nothing at all. The daemon
enacts what the plan says at its next step; these commands never touch a host.

Exit codes: 0 done; 2 bad input (one red line naming the field or option, nothing written): a malformed
request, an unknown lease id, a lease in a state that does not allow the operation, a request no host could
ever hold; 3 the request was well-formed but refused by the scheduler (the lease is stored as rejected,
or an extension does not fit), so scripts can tell "fix your input" from "try other times".
"""

# No `from __future__ import annotations`: typer reads the option types at runtime.

import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import typer
from rich.markup import escape

from orchestrator.cli import common
from orchestrator.cli.application import EXIT_REJECTED, command_group, fail
from orchestrator.cli.leasefile import (
    KEYS,
    flag_label,
    load_lease_file,
    request_from_fields,
)
from orchestrator.cli.output import emit_json, make_console, when
from orchestrator.cli.tables import Column, print_table
from orchestrator.model.errors import InvalidRequest
from orchestrator.model.lease import Lease, VMImage
from orchestrator.model.reservations import Reservation
from orchestrator.model.resources import Resources
from orchestrator.model.states import FINAL_STATES, RUNNING_STATES, LeaseState
from orchestrator.model.timeutil import iso, parse_duration
from orchestrator.state.codec import image_from_json
from orchestrator.state.answers import hosts_of
from orchestrator.state.cluster import check_site_can_hold
from orchestrator.state.store import Event

lease_app = command_group("lease", "Submit, list, show, cancel and extend leases.")


# -- formatting -----------------------------------------------------------------------------------------------
def lease_window(lease: Lease) -> tuple[datetime | None, datetime | None]:
    """(start, end) to show: when it first ran (or is planned to), and when it ended (or is planned to)."""
    first = lease.reservations[0] if lease.reservations else None
    last = lease.last_vm
    start = lease.start_time or (first.first_start if first is not None else lease.request.start)
    if lease.is_final:
        end = lease.end_time
    elif last is not None:
        end = last.end
    else:
        end = lease.request.end
    return start, end


def _num(value: float) -> "int | float":
    return int(value) if float(value).is_integer() else value


def lease_summary(lease: Lease) -> dict:
    start, end = lease_window(lease)
    node = lease.request.nodes[0]
    return {
        "id": lease.id,
        "name": lease.request.name,
        "user": lease.request.user,
        "type": lease.type.value,
        "state": lease.state.value,
        "nodes": lease.numnodes,
        "cpus": _num(node.vcpus),
        "memory_mib": _num(node.memory),
        "start": iso(start),
        "end": iso(end),
        "hosts": hosts_of(lease.last_vm),
        "reason": lease.reason,
    }


def _request_json(lease: Lease) -> dict:
    req = lease.request
    image = None
    if req.image is not None:
        image = {k: v for k, v in (("disk", req.image.disk), ("kernel", req.image.kernel),
                                   ("initrd", req.image.initrd), ("cmdline", req.image.cmdline)) if v is not None}
    return {
        "type": req.type.value,
        "nodes": req.numnodes,
        "cpus": _num(req.nodes[0].vcpus),
        "memory_mib": _num(req.nodes[0].memory),
        "duration_s": req.duration.total_seconds(),
        "start": iso(req.start),
        "preemptible": req.preemptible,
        "image": image,
        "user": req.user,
        "name": req.name,
        "dirty_rate_mib_s": req.dirty_rate_mib_s,
        "submit_time": iso(req.submit_time),
    }


def _plan_rows(lease: Lease) -> list[Reservation]:
    return [rr for vm in lease.reservations for rr in vm.all_parts()]


def _rr_json(rr: Reservation) -> dict:
    return {"id": rr.id, "kind": rr.kind.value, "state": rr.state.value, "start": iso(rr.start),
            "end": iso(rr.end), "hosts": hosts_of(rr)}


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


# -- submit ---------------------------------------------------------------------------------------------------
@lease_app.command("submit")
def submit(
    file: Path | None = typer.Argument(None, metavar="FILE.yaml", help="YAML lease file (or give the flags below)"),
    nodes: str | None = typer.Option(None, "--nodes", metavar="N", help="Number of VMs (default 1)"),
    cpus: str | None = typer.Option(None, "--cpus", metavar="C", help="vCPUs per VM"),
    memory: str | None = typer.Option(None, "--memory", metavar="MIB", help="Memory per VM, MiB"),
    duration: str | None = typer.Option(None, "--duration", metavar="D", help="Run time: 90s, 15m, 2h, 1h30m, 01:30:00"),
    start: str | None = typer.Option(None, "--start", metavar="ISO|now",
                                     help="Omit: best-effort; 'now': immediate; an ISO 8601 time: advance reservation"),
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
    json_out: bool = typer.Option(False, "--json", help="Answer as JSON"),
    state: Path | None = common.StateOption,
    config: Path | None = common.ConfigOption,
    wait: str = common.WaitOption,
    server: str | None = common.ServerOption,
) -> None:
    """Submit a lease and answer at once: accepted (planned start, end, hosts), queued, or rejected (exit 3)."""
    flags = {"nodes": nodes, "cpus": cpus, "memory": memory, "duration": duration, "start": start,
             "preemptible": preemptible, "image": image, "kernel": kernel, "initrd": initrd, "cmdline": cmdline,
             "user": user, "name": name, "dirty_rate": dirty_rate, "disk_size": disk_size,
             "ssh_key": list(ssh_key) if ssh_key else None, "user_data": user_data,
             "hostname_prefix": hostname_prefix, "network": network, "keep_disks": keep_disks}
    given = [k for k in KEYS if flags.get(k) is not None]
    cfg = common.load(config)
    now = common.now()
    remote = common.client(server, cfg)
    if remote is not None:   # the server checks the site and the image itself, and owns it to its caller
        catalogue, site, owner = _remote_catalogue(remote), None, ""
    else:
        catalogue, site, owner = _catalogue(state, cfg), _site_check(state, cfg), None
    if file is not None:
        if given:
            raise fail(f"{flag_label(given[0])}: give a lease FILE or flags, not both")
        request = load_lease_file(file, now, images=catalogue, site=site, default_user=owner)
    else:
        if not given:
            raise fail("lease: give a lease FILE.yaml or at least --cpus, --memory and --duration")
        request = request_from_fields(flags, now, label=flag_label, images=catalogue, site=site,
                                      default_user=owner)
    if remote is not None:
        with remote:
            answer = remote.submit(request)
        _answer(answer, json_out)
        return
    if request.image is not None and request.image.name is not None:
        _check_image_on_hosts(state, cfg, request.image, "image" if file is not None else "--image")

    with common.open_cluster(state, cfg) as cluster:
        answer = cluster.admit(request, now)   # (the site checked again: hosts may have gone since)
    _answer(answer, json_out)


def _answer(answer: dict, json_out: bool) -> None:
    if json_out:
        emit_json(answer)
    else:
        _print_answer(answer)
    if answer["state"] == LeaseState.REJECTED.value:
        raise typer.Exit(EXIT_REJECTED)


def _remote_catalogue(remote) -> "Callable[[str], VMImage]":
    """Resolves an image name through the server's catalogue (asked when a name is given)."""

    def resolve(name: str) -> VMImage:
        known = remote.images()
        for image in known:
            if image["name"] == name:
                return image_from_json(image).vm_image()
        names = ", ".join(i["name"] for i in known) or "none; an admin adds them with `leasewise image add`"
        raise InvalidRequest("image", f"{name!r} is neither a catalogued image nor an absolute path "
                                      f"(catalogued: {names})")

    return resolve


def _catalogue(state: Path | None, cfg) -> "Callable[[str], VMImage]":
    """Resolves an image name through the store's catalogue (read when a name is given)."""

    def resolve(name: str) -> VMImage:
        known = []
        if common.store_exists(state, cfg):
            with common.open_store(state, cfg) as store:
                known = store.images()
        for image in known:
            if image.name == name:
                return image.vm_image()
        names = ", ".join(i.name for i in known) or "none; add one with `leasewise image add`"
        raise InvalidRequest("image", f"{name!r} is neither a catalogued image nor an absolute path "
                                      f"(catalogued: {names})")

    return resolve


def _site_check(state: Path | None, cfg) -> "Callable[[int, Resources], None]":
    """Checks a request's size against the store's hosts (read when asked) before its nodes are made."""

    def check(numnodes: int, node: Resources) -> None:
        capacities = []
        if common.store_path(state, cfg).exists():
            with common.open_store(state, cfg) as store:
                capacities = [h.capacity for h in store.hosts()]
        check_site_can_hold(capacities, numnodes, node)

    return check


def _check_image_on_hosts(state: Path | None, cfg, image: VMImage, label: str) -> None:
    """Refuse a lease whose image some available host cannot read, before anything is written: its VMs
    would otherwise start on some hosts and fail on others."""
    from orchestrator.cli.images import hosts_driver, read_on_hosts

    with common.open_store(state, cfg) as store:
        records = [r for r in store.hosts() if r.available]
    if not records:
        return
    driver = hosts_driver(records, cfg.daemon.driver)
    try:
        seen = read_on_hosts(driver, [r.name for r in records], image.disk)
    finally:
        driver.close()
    for host, what in seen.items():
        if isinstance(what, str):
            raise fail(f"{label}: {image.name} ({image.disk}) cannot be read on {host}: {what}")


def _live_vms(lease: Lease, records, state: Path | None, cfg) -> list | None:
    """Each VM of a lease whose VMs exist (running or suspended), as the hosts see it; None otherwise."""
    if lease.state not in RUNNING_STATES and lease.state not in (
            LeaseState.SUSPENDED_PENDING, LeaseState.SUSPENDED_QUEUED, LeaseState.SUSPENDED_SCHEDULED,
            LeaseState.MIGRATING):
        return None
    from orchestrator.cli.images import hosts_driver
    from orchestrator.cli.vms import lease_vms

    driver = hosts_driver(records, cfg.daemon.driver, common.simulated_hosts_path(state, cfg))
    try:
        return lease_vms(lease, driver)
    finally:
        driver.close()


def _print_answer(answer: dict) -> None:
    console = make_console()
    head = f"lease {answer['id']}"
    kind = answer["type"]
    if answer["state"] == LeaseState.REJECTED.value:
        console.print(f"[bold red]{head} rejected[/] ({kind}): {escape(answer['reason'])}", soft_wrap=True)
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
        if answer["suspended_at_end"]:
            console.print(f"  then suspended at {end}: the rest runs when it is resumed", soft_wrap=True)
    for other in answer["preempted"]:
        console.print(f"  preempts lease {other['id']}: {other['change']}", soft_wrap=True)


# -- list / show ----------------------------------------------------------------------------------------------
@lease_app.command("list")
def list_leases(
    state_filter: list[str] | None = typer.Option(None, "--status", metavar="S",
                                                  help="Only leases in this state (repeatable; 'live' = not final)"),
    user: str | None = typer.Option(None, "--user", metavar="U", help="Only leases of this user"),
    json_out: bool = typer.Option(False, "--json", help="Print JSON"),
    state: Path | None = common.StateOption,
    config: Path | None = common.ConfigOption,
    wait: str = common.WaitOption,
    server: str | None = common.ServerOption,
) -> None:
    """Leases in the store: id, name, type, state, nodes, start, end, hosts."""
    states = None
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
    cfg = common.load(config)
    leases = []
    remote = common.client(server, cfg)
    if remote is not None:
        with remote:
            leases = remote.leases(states, user)
    elif common.store_exists(state, cfg):
        with common.open_store(state, cfg) as store:
            leases = store.leases(state=states, user=user)
    rows = [lease_summary(l) for l in leases]
    if json_out:
        emit_json(rows)
        return
    if not rows:
        make_console().print("no leases")
        return
    columns = [Column("id", "right"), Column("name", wraps=True, drop=3), Column("type", wraps=True, drop=1),
               Column("state"), Column("nodes", "right", wraps=True, drop=2), Column("start"), Column("end"),
               Column("hosts", wraps=True, drop=4)]
    cells = []
    for lease, row in zip(leases, rows):
        start, end = lease_window(lease)
        cells.append([str(row["id"]), escape(row["name"]), row["type"], row["state"],
                      f"{row['nodes']} × {row['cpus']:g} vCPU / {row['memory_mib']:g} MiB",
                      when(start), when(end), ", ".join(row["hosts"])])
    print_table(make_console(), columns, cells, title=f"{len(rows)} lease{'s' if len(rows) != 1 else ''}")


@lease_app.command("show")
def show(
    lease_id: str = typer.Argument(..., metavar="ID", help="Lease id"),
    json_out: bool = typer.Option(False, "--json", help="Print JSON"),
    state: Path | None = common.StateOption,
    config: Path | None = common.ConfigOption,
    wait: str = common.WaitOption,
    server: str | None = common.ServerOption,
) -> None:
    """One lease: its request, its plan (every reservation), its state history and its events."""
    number = common.parse_lease_id(lease_id)
    cfg = common.load(config)
    remote = common.client(server, cfg)
    if remote is not None:
        from orchestrator.runtime.vm_access import vm_access_from_json

        with remote:
            lease, events, found = remote.lease(number)
        vms = None if found is None else [vm_access_from_json(v) for v in found]
    else:
        if not common.store_exists(state, cfg):
            raise fail(f"lease: no lease with id {number} (there is no store at {common.store_path(state, cfg)})")
        with common.open_store(state, cfg) as store:
            lease = store.lease(number)
            events = store.events(lease_id=number)
            records = store.hosts()
        vms = _live_vms(lease, records, state, cfg)
    plan = _plan_rows(lease)
    if json_out:
        emit_json({
            "lease": lease_summary(lease),
            "request": _request_json(lease),
            "counters": {"suspensions": lease.suspensions, "migrations": lease.migrations, "requeues": lease.requeues,
                         "accumulated_s": lease.accumulated.total_seconds()},
            "plan": [_rr_json(rr) for rr in plan],
            "history": [{"time": iso(at), "state": s.value} for at, s in lease.history],
            "events": [{"id": e.id, "time": iso(e.time), "kind": e.kind, "detail": e.detail} for e in events],
            "vms": [vm.to_json() for vm in vms or ()],
        })
        return
    console = make_console()
    req = lease.request
    node = req.nodes[0]
    title = f"lease {lease.id}" + (f" ({escape(req.name)})" if req.name else "")
    console.print(f"[bold]{title}[/]: {lease.type.value}, {lease.state.value}"
                  + (f" — {escape(lease.reason)}" if lease.reason else ""), soft_wrap=True)
    console.print(f"  request: {req.numnodes} × {node.vcpus:g} vCPU / {node.memory:g} MiB for "
                  f"{_duration_text(req.duration.total_seconds())}"
                  + (f", start {when(req.start)}" if req.start is not None else "")
                  + f", {'preemptible' if req.preemptible else 'not preemptible'}"
                  + (f", user {escape(req.user)}" if req.user else "")
                  + f", submitted {when(req.submit_time)}", soft_wrap=True)
    if req.image is not None:
        boot = (f"disk {req.image.disk}" if req.image.disk else
                f"kernel {req.image.kernel}" + (f" initrd {req.image.initrd}" if req.image.initrd else "")
                + (f" cmdline {req.image.cmdline!r}" if req.image.cmdline else ""))
        console.print(f"  boots: {escape(boot)}", soft_wrap=True)
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
        from orchestrator.cli.vms import print_vms

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
def cancel(
    lease_id: str = typer.Argument(..., metavar="ID", help="Lease id"),
    state: Path | None = common.StateOption,
    config: Path | None = common.ConfigOption,
    wait: str = common.WaitOption,
    server: str | None = common.ServerOption,
) -> None:
    """Cancel a lease: its reservations are freed now; the daemon stops running VMs at its next step."""
    number = common.parse_lease_id(lease_id)
    cfg = common.load(config)
    now = common.now()
    remote = common.client(server, cfg)
    if remote is not None:
        with remote:
            done = remote.cancel(number)
        _cancelled(number, done["was_running"], done["hosts"])
        return
    with common.open_cluster(state, cfg) as cluster:
        lease = cluster.lease(number)
        was_running = lease.state in RUNNING_STATES or lease.state is LeaseState.MIGRATING
        hosts = hosts_of(lease.last_vm) if was_running else []
        cluster.cancel(number, now)
    _cancelled(number, was_running, hosts)


def _cancelled(number: int, was_running: bool, hosts: list[str]) -> None:
    console = make_console()
    console.print(f"lease {number} cancelled", soft_wrap=True)
    if was_running:
        console.print(f"  its VMs on {', '.join(hosts)} are stopped by the daemon at its next step", soft_wrap=True)


@lease_app.command("extend")
def extend(
    lease_id: str = typer.Argument(..., metavar="ID", help="Lease id"),
    by: str | None = typer.Option(None, "--by", metavar="DURATION", help="How much longer: 30m, 1h, ..."),
    state: Path | None = common.StateOption,
    config: Path | None = common.ConfigOption,
    wait: str = common.WaitOption,
    server: str | None = common.ServerOption,
) -> None:
    """Lengthen a lease; refused (exit 3) with the reason when its hosts are reserved after it."""
    number = common.parse_lease_id(lease_id)
    if by is None:
        raise fail("--by: is required (e.g. --by 30m)")
    amount = parse_duration(by, "--by")
    if amount.total_seconds() <= 0:
        raise fail(f"--by: must be greater than zero (got {by!r})")
    cfg = common.load(config)
    now = common.now()
    remote = common.client(server, cfg)
    try:
        if remote is not None:
            from orchestrator.service.client import RemoteError

            try:
                with remote:
                    done = remote.extend(number, by)
            except RemoteError as exc:
                head = f"lease {number} not extended: "
                if exc.exit_code != EXIT_REJECTED or not str(exc).startswith(head):
                    raise
                make_console().print(f"[bold red]lease {number} not extended[/]: {escape(str(exc)[len(head):])}",
                                     soft_wrap=True)
                raise typer.Exit(EXIT_REJECTED) from None
            end = None if done["end"] is None else datetime.fromisoformat(done["end"])
            duration = timedelta(seconds=done["duration_s"])
        else:
            with common.open_cluster(state, cfg) as cluster:
                lease = cluster.extend(number, amount, now)
                vm = lease.last_vm
                end = vm.end if vm is not None and vm in cluster.table else None
                duration = lease.request.duration
    except InvalidRequest as exc:
        if exc.field == "duration":   # the lease would end after the year 9998: --by is absurd
            raise fail(f"--by: {exc.problem}") from None
        if exc.field != "by":
            raise
        make_console().print(f"[bold red]lease {number} not extended[/]: {escape(exc.problem)}", soft_wrap=True)
        raise typer.Exit(EXIT_REJECTED) from None
    message = f"lease {number} extended by {_duration_text(amount.total_seconds())} (now {_duration_text(duration.total_seconds())})"
    if end is not None:
        message += f"; planned end {when(end)}"
    make_console().print(message, soft_wrap=True)
