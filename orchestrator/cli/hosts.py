"""`leasewise host ...`: add, import, list, check and remove the hosts leases are planned on.

Capacity comes from the driver named by `[daemon] driver`: with `libvirt` the host is asked (libvirt's
node info) unless `--cpus` and `--memory` are both given; with `simulated` there is nothing to ask, so
both are required. Hosts are contacted before the store's write lock is taken, never while holding it.

`host check` runs the pre-flight checks an operator wants before leases land on a host: each is a row
with PASS, FAIL or SKIP (not applicable, e.g. no `ssh` configured); exit code 1 when any fails. The
driver runs them (`Driver.check_host`) with its own libvirt connection and SSH code: SSH uses paramiko
with host keys from the configured known_hosts file (else the user's) and RejectPolicy: an unknown host
key is a failure, never trusted on first use.

`host drain NAME [--by TIME]` plans the host empty by TIME (default now) through the scheduler: running
VMs are live-migrated to other hosts (with `preemption_mode = "migrate-first"`), else suspended, else
requeued when preemptible; leases planned there are planned again elsewhere. The host is unavailable from
TIME on (or from when the last lease that cannot leave ends); the daemon enacts the migrations. `host
undrain NAME` makes it available again.

`host remove --drain` requeues the best-effort leases planned on the host (not started yet) through the
scheduler (`LeaseScheduler.requeue`), then re-plans them on the other hosts.
It refuses, naming them, leases with VMs or memory images on the host (drain it first) and advance
reservations / immediate leases planned there (their start is fixed: cancel them first).

Every command makes one call on the backend its shared options select: the configured server's client,
else the local store (`orchestrator.service.backend`); the steps themselves are
`orchestrator.runtime.host_admin`'s, the same for both. Through a server, adding, importing, removing, checking and draining hosts are for admins, and a
host added or imported there is planned on and reached by its daemon at once (the daemon's driver learns
it), a removed one forgotten.
"""

# No `from __future__ import annotations`: typer reads the option types at runtime.

from datetime import datetime
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from drivers.inventory import HostConfig, load_inventory, split_ssh_target
from orchestrator.cli import common
from orchestrator.cli.application import EXIT_FAILED, command_group, fail
from orchestrator.cli.common import StoreOptions, store_options
from orchestrator.cli.output import counted, emit_json, make_console, when
from orchestrator.cli.tables import Column, print_table
from orchestrator.model.numbers import parse_decimal, parse_whole
from orchestrator.model.placement import check_property_key, parse_assignment
from orchestrator.model.timeutil import end_of, iso, parse_duration, parse_time
from orchestrator.service.inputs import host_config

#: the longest `--timeout` for answers from hosts
MAX_HOST_WAIT_S = 3600.0

host_app = command_group("host", "Add, import, list, check and remove hosts.")


def _positive_int(option: str, text: str | None) -> int | None:
    """A whole number > 0 from an option, or one error line naming the option."""
    return None if text is None else parse_whole(text, option)


def _seconds(option: str, text: str) -> float:
    """How long to wait for hosts: more than 0, at most an hour."""
    return parse_decimal(text, option, maximum=MAX_HOST_WAIT_S, positive=True, unit="seconds")


def _config_from_options(name: str, uri: str | None, domain_type: str, ssh: str | None,
                         ssh_key: str | None, known_hosts: str | None, migration_uri: str | None,
                         state_dir: str | None, shared_storage: list[str] | None, network: str | None = None,
                         network_type: str = "bridge", disk_dir: str | None = None,
                         peer_uri: str | None = None, properties: list[str] | None = None,
                         peer_ssh_key: str | None = None, peer_known_hosts: str | None = None) -> HostConfig:
    if uri is None:
        raise fail("--uri: is required (e.g. qemu+tcp://10.77.0.11/system, or test:///default)")
    values: dict[str, Any] = {"name": name, "uri": uri, "domain_type": domain_type, "ssh": ssh, "ssh_key": ssh_key,
                              "known_hosts": known_hosts, "migration_uri": migration_uri,
                              "shared_storage": tuple(shared_storage or ()), "network": network,
                              "network_type": network_type, "disk_dir": disk_dir, "peer_uri": peer_uri,
                              "properties": _assignments(properties, "--property"),
                              "peer_ssh_key": peer_ssh_key, "peer_known_hosts": peer_known_hosts}
    if state_dir is not None:
        values["state_dir"] = state_dir
    if ssh is not None:
        try:
            _, address, port = split_ssh_target(ssh)
        except ValueError:
            raise fail(f"--ssh: {ssh!r} is not USER@ADDRESS[:PORT]") from None
        if not address or not 0 < port < 65536:
            raise fail(f"--ssh: {ssh!r} is not USER@ADDRESS[:PORT]")
    return host_config(values, lambda field: "NAME" if field == "name" else "--" + field.replace("_", "-"))


def _assignments(given: list[str] | None, option: str) -> dict[str, str]:
    """`--property KEY=VALUE` options (the last of a key wins), each checked as the service checks them."""
    return dict(parse_assignment(text, option) for text in given or ())


# -- add / import ------------------------------------------------------------------------------------------
@host_app.command("add")
@store_options()
def add(
    opts: StoreOptions,
    name: str = typer.Argument(..., metavar="NAME", help="Host name (as leases and the daemon refer to it)"),
    uri: str | None = typer.Option(None, "--uri", metavar="URI", help="libvirt URI, e.g. qemu+tcp://10.77.0.11/system"),
    domain_type: str = typer.Option("kvm", "--domain-type", metavar="kvm|qemu", help="kvm, or qemu (TCG: no hardware virtualization)"),
    ssh: str | None = typer.Option(None, "--ssh", metavar="USER@ADDR[:PORT]", help="SSH target for save images"),
    ssh_key: str | None = typer.Option(None, "--ssh-key", metavar="F", help="SSH private key"),
    known_hosts: str | None = typer.Option(None, "--known-hosts", metavar="F", help="known_hosts file for --ssh"),
    migration_uri: str | None = typer.Option(None, "--migration-uri", metavar="U", help="Data channel for live migration"),
    peer_uri: str | None = typer.Option(None, "--peer-uri", metavar="URI",
                                        help="How the other hosts' libvirtd reach this one (default: --uri)"),
    peer_ssh_key: str | None = typer.Option(None, "--peer-ssh-key", metavar="F",
                                            help="Key on this host to copy memory images straight to the others"),
    peer_known_hosts: str | None = typer.Option(None, "--peer-known-hosts", metavar="F",
                                                help="known_hosts on this host for --peer-ssh-key"),
    state_dir: str | None = typer.Option(None, "--state-dir", metavar="DIR", help="Where save images go on the host"),
    shared_storage: list[str] | None = typer.Option(None, "--shared-storage", metavar="PATH",
                                                    help="Path prefix every host sees (repeatable)"),
    network: str | None = typer.Option(None, "--network", metavar="BRIDGE|NET", help="The bridge (or libvirt network) VMs attach to"),
    network_type: str = typer.Option("bridge", "--network-type", metavar="bridge|network", help="What --network names"),
    disk_dir: str | None = typer.Option(None, "--disk-dir", metavar="DIR",
                                        help="Where VMs' disks and seeds go (default: under the first --shared-storage)"),
    cpus: str | None = typer.Option(None, "--cpus", metavar="N", help="vCPUs (default: ask libvirt)"),
    memory: str | None = typer.Option(None, "--memory", metavar="MIB", help="Memory, MiB (default: ask libvirt)"),
    properties: list[str] | None = typer.Option(None, "--property", metavar="KEY=VALUE",
                                                help="A property leases may ask for with --where, e.g. gpu=a100 "
                                                     "(repeatable)"),
    timeout_text: str = typer.Option("15", "--timeout", metavar="S", help="How long to wait for the host"),
) -> None:
    """Add a host; its capacity comes from the driver unless --cpus and --memory are given."""
    vcpus_opt = _positive_int("--cpus", cpus)
    memory_opt = _positive_int("--memory", memory)
    timeout = _seconds("--timeout", timeout_text)
    cfg = _config_from_options(name, uri, domain_type, ssh, ssh_key, known_hosts, migration_uri, state_dir,
                               shared_storage, network, network_type, disk_dir, peer_uri, properties,
                               peer_ssh_key, peer_known_hosts)
    with opts.backend() as hosts:
        added = hosts.host_add(cfg, vcpus_opt, memory_opt, timeout)
    make_console().print(f"host {escape(name)} added: {added['vcpus']} vCPUs, {added['memory_mib']} MiB "
                         f"({escape(added['source'])})", soft_wrap=True)


@host_app.command("import")
@store_options()
def import_hosts(
    opts: StoreOptions,
    file: Path = typer.Argument(..., metavar="FILE", help="Host inventory TOML ([[host]] tables)"),
    cpus: str | None = typer.Option(None, "--cpus", metavar="N", help="vCPUs of every new host (default: ask libvirt)"),
    memory: str | None = typer.Option(None, "--memory", metavar="MIB", help="Memory of every new host, MiB"),
    timeout_text: str = typer.Option("15", "--timeout", metavar="S", help="How long to wait for the hosts"),
) -> None:
    """Add every host of an inventory in one transaction; hosts already there with the same settings are
    skipped, one with different settings is an error (nothing is added)."""
    vcpus_opt = _positive_int("--cpus", cpus)
    memory_opt = _positive_int("--memory", memory)
    timeout = _seconds("--timeout", timeout_text)
    configs = load_inventory(file)
    with opts.backend() as hosts:
        done = hosts.host_import(configs, vcpus_opt, memory_opt, timeout, str(file))
    console = make_console()
    for added in done["added"]:
        console.print(f"host {escape(added['name'])} added: {added['vcpus']} vCPUs, {added['memory_mib']} MiB",
                      soft_wrap=True)
    for name in done["skipped"]:
        console.print(f"host {escape(name)} skipped: already present with the same settings", soft_wrap=True)
    console.print(f"{len(done['added'])} added, {len(done['skipped'])} skipped", soft_wrap=True)


@host_app.command("set")
@store_options()
def set_properties(
    opts: StoreOptions,
    name: str = typer.Argument(..., metavar="NAME", help="Host name"),
    properties: list[str] | None = typer.Option(None, "--property", metavar="KEY=VALUE",
                                                help="Set (or replace) a property (repeatable)"),
    unset: list[str] | None = typer.Option(None, "--unset", metavar="KEY", help="Remove a property (repeatable)"),
) -> None:
    """Set or remove a host's properties (what leases ask for with --where); refused while a lease planned
    there would no longer meet its constraints."""
    given = _assignments(properties, "--property")
    gone = [check_property_key(key, "--unset") for key in unset or ()]
    if not given and not gone:
        raise fail("host set: give --property KEY=VALUE or --unset KEY")
    with opts.backend() as hosts:
        done = hosts.host_set(name, given, gone)
    shown = ", ".join(f"{k}={v}" for k, v in sorted(done["properties"].items())) or "none"
    make_console().print(f"host {escape(name)} properties: {escape(shown)}", soft_wrap=True)


# -- list -------------------------------------------------------------------------------------------------------
@host_app.command("list")
@store_options()
def list_hosts(
    opts: StoreOptions,
    json_out: bool = typer.Option(False, "--json", help="Print JSON"),
    timeout_text: str = typer.Option("3", "--timeout", metavar="S", help="How long to wait for hosts (libvirt)"),
) -> None:
    """Hosts with their capacity, the leases on them now and planned, and (libvirt) whether they answer."""
    timeout = _seconds("--timeout", timeout_text)
    with opts.backend() as hosts:
        rows = hosts.hosts(timeout)
    libvirt = any("reachable" in row for row in rows)   # (the hosts were asked: the libvirt driver)
    if json_out:
        emit_json(rows)
        return
    if not rows:
        make_console().print("no hosts (add one with `leasewise host add` or `leasewise host import`)")
        return
    columns = [Column("name", wraps=True), Column("uri", wraps=True, drop=2), Column("domain type", drop=3),
               Column("vCPUs", "right"), Column("memory", "right"), Column("available"),
               Column("leases now", wraps=True), Column("planned", wraps=True)]
    properties = any(row["properties"] for row in rows)   # (a column only where hosts have some)
    if properties:
        columns.insert(6, Column("properties", wraps=True, drop=5))
    if libvirt:
        columns += [Column("reachable", wraps=True, drop=4), Column("versions", wraps=True, drop=1)]
    cells = []
    for row in rows:
        line = [escape(row["name"]), escape(row["uri"]), row["domain_type"], str(row["vcpus"]),
                f"{row['memory_mib']} MiB", "yes" if row["available"] else "no",
                ", ".join(map(str, row["leases_now"])) or "-", ", ".join(map(str, row["leases_planned"])) or "-"]
        if properties:
            line.insert(6, escape(", ".join(f"{k}={v}" for k, v in sorted(row["properties"].items()))) or "-")
        if libvirt:
            line.append("yes" if row["reachable"] else f"no: {escape(row['error'] or '')}")
            line.append(escape(f"{row['hypervisor']}, libvirt {row['libvirt_version']}") if row["reachable"] else "-")
        cells.append(line)
    print_table(make_console(), columns, cells, title=counted(len(rows), "host"))


# -- check ------------------------------------------------------------------------------------------------------
@host_app.command("check")
@store_options()
def check(
    opts: StoreOptions,
    name: str = typer.Argument(..., metavar="NAME", help="Host name"),
    json_out: bool = typer.Option(False, "--json", help="Print JSON"),
    timeout_text: str = typer.Option("10", "--timeout", metavar="S", help="How long to wait for each contact"),
) -> None:
    """Pre-flight checks of one host and of every pair of hosts with it (both ways), PASS/FAIL per row; exit code 1 if any fails."""
    timeout = _seconds("--timeout", timeout_text)
    with opts.backend() as hosts:
        checked = hosts.host_check(name, timeout)
    rows, pairs = checked["checks"], checked.get("pairs", [])
    failed = [r["check"] for r in rows if r["status"] == "FAIL"]
    failed += [f"{p['check']} {p['source']} -> {p['destination']}" for p in pairs if p["status"] == "FAIL"]
    if json_out:
        emit_json({"host": name, "ok": not failed, "checks": rows, "pairs": pairs})
    else:
        _print_checks(name, checked["uri"], rows, pairs, failed)
    if failed:
        raise typer.Exit(EXIT_FAILED)


_CHECK_STYLE = {"PASS": "green", "FAIL": "bold red", "SKIP": "dim", "simulated": "cyan"}


def _print_checks(name: str, uri: str, rows: list[dict], pairs: list[dict], failed: list[str]) -> None:
    """The host's table, the pairs' table (each pair's rows one after the other), and a one-line verdict."""
    console = make_console()
    table = Table(title=f"host check {escape(name)} ({escape(uri)})")
    for column in ("check", "result", "detail"):
        table.add_column(column, overflow="fold")   # (long text wraps, as rich does a cell with no overflow set)
    for r in rows:
        table.add_row(r["check"], f"[{_CHECK_STYLE.get(r['status'], '')}]{r['status']}[/]", escape(r["detail"]))
    console.print(table)
    if pairs:
        between = Table(title=f"host pairs with {escape(name)} (a live migration from the first to the second)")
        for column in ("pair", "check", "result", "detail"):
            between.add_column(column, overflow="fold")
        for p in pairs:
            between.add_row(escape(f"{p['source']} -> {p['destination']}"), p["check"],
                            f"[{_CHECK_STYLE.get(p['status'], '')}]{p['status']}[/]", escape(p["detail"]))
        console.print(between)
    everything = rows + pairs
    skipped = sum(1 for r in everything if r["status"] == "SKIP")
    if failed:
        summary = f"{counted(len(failed), 'check')} failed: {', '.join(failed)}"
    elif all(r["status"] in ("simulated", "PASS") for r in everything) and any(r["status"] == "simulated"
                                                                                 for r in everything):
        summary = "simulated driver: nothing to check"
    else:
        summary = "all checks passed" + (f" ({skipped} skipped)" if skipped else "")
    console.print(summary, soft_wrap=True)


# -- remove -----------------------------------------------------------------------------------------------------
@host_app.command("remove")
@store_options()
def remove(
    opts: StoreOptions,
    name: str = typer.Argument(..., metavar="NAME", help="Host name"),
    drain: bool = typer.Option(False, "--drain", help="First requeue the best-effort leases planned there"),
) -> None:
    """Remove a host; refused while reservations are planned on it unless --drain can move them."""
    with opts.backend() as hosts:
        done = hosts.host_remove(name, drain)
    console = make_console()
    for lease in done["requeued"]:
        where = (f"now planned {when(parse_time(lease['start'], 'start'))} → {when(parse_time(lease['end'], 'end'))} "
                 f"on {', '.join(lease['hosts'])}" if lease["hosts"] is not None else f"{lease['state']} until there is room")
        console.print(f"lease {lease['id']} requeued: {where}", soft_wrap=True)
    console.print(f"host {escape(name)} removed", soft_wrap=True)


# -- drain / undrain ---------------------------------------------------------------------------------------------
def _drain_time(text: str | None, current: datetime) -> datetime:
    """`--by`: `now`, `+DURATION` (e.g. +30m) or an ISO 8601 time with a timezone; errors name the option."""
    if text is None or text.strip().lower() == "now":
        return current
    text = text.strip()
    if text.startswith("+"):
        return end_of(current, parse_duration(text[1:], "--by"), "--by")
    return parse_time(text, "--by")


@host_app.command("drain")
@store_options()
def drain(
    opts: StoreOptions,
    name: str = typer.Argument(..., metavar="NAME", help="Host name"),
    by: str | None = typer.Option(None, "--by", metavar="TIME",
                                  help="Empty by then: `now` (default), +DURATION (e.g. +30m) or ISO 8601"),
    json_out: bool = typer.Option(False, "--json", help="Print JSON"),
) -> None:
    """Move everything off a host (live migration, else suspension) and keep new leases off it."""
    now = common.now()
    deadline = _drain_time(by, now)
    if deadline < now:
        raise fail(f"--by: {iso(deadline)} is in the past (now {iso(now)})")
    with opts.backend() as hosts:
        done = hosts.drain(name, iso(deadline))
    unavailable = parse_time(done["unavailable_from"], "unavailable_from")
    leases = done["leases"]
    if json_out:
        emit_json({"host": name, "unavailable_from": iso(unavailable), "leases": leases})
        return
    console = make_console()
    for lease in leases:
        console.print(f"lease {lease['id']}: {escape(lease['change'])}", soft_wrap=True)
    console.print(f"host {escape(name)} drained: unavailable from {when(unavailable)}"
                  + ("" if leases else " (nothing ran or was planned there)"), soft_wrap=True)


@host_app.command("undrain")
@store_options()
def undrain(
    opts: StoreOptions,
    name: str = typer.Argument(..., metavar="NAME", help="Host name"),
) -> None:
    """Make a drained host available to leases again."""
    with opts.backend() as hosts:
        hosts.undrain(name)
    make_console().print(f"host {escape(name)} is available again", soft_wrap=True)
