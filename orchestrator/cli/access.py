"""A way into a lease's VMs: what `lease show` lists of each (host, state, MAC, addresses, the ssh line),
`leasewise lease ssh ID[/NODE] [-- CMD...]` and `leasewise lease console ID[/NODE]`.

The VMs are found as `lease show` finds them (`orchestrator.cli.vms`).

Exit codes: 0 done (ssh: the remote command's own code); 2 bad input (an unknown lease or node, a lease
whose VMs do not run, a VM without an address yet).
"""

# No `from __future__ import annotations`: typer reads the option types at runtime.

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import typer
from rich.markup import escape

from drivers.base import Driver
from drivers.errors import DriverError
from orchestrator.cli import common
from orchestrator.cli.application import fail
from orchestrator.cli.images import hosts_driver
from orchestrator.cli.leases import lease_app
from orchestrator.cli.vms import VMAccess, lease_vms
from orchestrator.runtime.vm_access import vm_access_from_json

_TARGET = re.compile(r"([0-9]+)(?:/([0-9]+))?")


def _target(text: str) -> tuple[int, int | None]:
    match = _TARGET.fullmatch(text.strip())
    if not match or not 0 < int(match.group(1)) <= common.MAX_LEASE_ID:
        raise fail(f"ID[/NODE]: {text!r} is not a lease id with an optional node (e.g. 12 or 12/1)")
    return int(match.group(1)), None if match.group(2) is None else int(match.group(2))


def _one_vm(target: str, state: Path | None, config: Path | None, server: str | None = None) -> tuple[VMAccess, Driver]:
    """The VM, and a driver that can give its console (the server's answer when there is one)."""
    number, node = _target(target)
    cfg = common.load(config)
    remote = common.client(server, cfg)
    if remote is not None:
        with remote:
            answer = remote.access(number, node)
        return vm_access_from_json(answer["vm"]), _Answered(answer)
    if not common.store_exists(state, cfg):
        raise fail(f"lease: no lease with id {number} (there is no store at {common.store_path(state, cfg)})")
    with common.open_store(state, cfg) as store:
        lease = store.lease(number)
        records = store.hosts()
    if node is not None and not 0 <= node < lease.numnodes:
        raise fail(f"NODE: lease {number} has nodes 0..{lease.numnodes - 1} (got {node})")
    driver = hosts_driver(records, cfg.daemon.driver, common.simulated_hosts_path(state, cfg))
    try:
        vm = lease_vms(lease, driver)[node or 0]
    except BaseException:
        driver.close()
        raise
    if vm.host is None or vm.state in ("not running", "gone"):
        driver.close()
        raise fail(f"lease {number}: {vm.name} does not run ({lease.state.value})")
    return vm, driver


class _Answered:
    """What the server said about reaching a VM, standing in for the driver that would be asked locally."""

    def __init__(self, answer: dict):
        self._answer = answer

    def console_command(self, name: str) -> list[str]:
        if self._answer.get("console") is None:
            raise DriverError(self._answer.get("console_error") or "no console")
        return list(self._answer["console"])

    def close(self) -> None:
        pass


@lease_app.command("ssh", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def ssh(
    ctx: typer.Context,
    target: str = typer.Argument(..., metavar="ID[/NODE]", help="Lease id, and the node (default 0)"),
    identity: Path | None = typer.Option(None, "--identity", "-i", metavar="FILE", help="Private key to log in with"),
    options: list[str] | None = typer.Option(None, "--option", "-o", metavar="OPT",
                                             help="An ssh option, as ssh -o takes it (repeatable)"),
    print_only: bool = typer.Option(False, "--print", help="Print the ssh command instead of running it"),
    state: Path | None = common.StateOption,
    config: Path | None = common.ConfigOption,
    wait: str = common.WaitOption,
    server: str | None = common.ServerOption,
) -> None:
    """ssh to a VM of a lease as its image's login user; anything after `--` runs there."""
    vm, driver = _one_vm(target, state, config, server)
    driver.close()
    command = vm.ssh_command()
    if command is None:
        raise fail(f"lease {target}: {vm.name} has no address yet (no NIC, or its guest has not asked DHCP yet)")
    extra = [x for opt in options or () for x in ("-o", opt)]
    if identity is not None:
        extra += ["-i", str(identity)]
    command[1:1] = extra                 # (ssh reads its options before the destination only)
    command += list(ctx.args)
    if print_only:
        typer.echo(shlex.join(command))
        return
    if shutil.which("ssh") is None:
        raise fail("ssh: no ssh client on this machine (install openssh-client)")
    raise typer.Exit(subprocess.run(command).returncode)


@lease_app.command("console")
def console(
    target: str = typer.Argument(..., metavar="ID[/NODE]", help="Lease id, and the node (default 0)"),
    print_only: bool = typer.Option(False, "--print", help="Print the virsh command instead of running it"),
    state: Path | None = common.StateOption,
    config: Path | None = common.ConfigOption,
    wait: str = common.WaitOption,
    server: str | None = common.ServerOption,
) -> None:
    """Attach to the serial console of a VM of a lease (leave with Ctrl-]); `--print` gives the virsh line."""
    vm, driver = _one_vm(target, state, config, server)
    try:
        command = driver.console_command(vm.name)
    except (DriverError, NotImplementedError) as exc:
        raise fail(f"console: {exc}") from None
    finally:
        driver.close()
    if print_only or shutil.which(command[0]) is None:
        typer.echo(shlex.join(command))
        return
    raise typer.Exit(subprocess.run(command).returncode)
