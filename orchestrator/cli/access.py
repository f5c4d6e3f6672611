"""A way into a lease's VMs: what `lease show` lists of each (host, state, MAC, addresses, the ssh line),
`leasewise lease ssh ID[/NODE] [-- CMD...]` and `leasewise lease console ID[/NODE]`.

The VM is found by the backend (`Backend.access`), as `lease show` finds it: by the server's daemon, or by a
driver over the store's hosts.

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

from orchestrator.cli import common
from orchestrator.cli.application import fail
from orchestrator.cli.common import StoreOptions, store_options
from orchestrator.cli.leases import lease_app
from orchestrator.service.backend import Access

_TARGET = re.compile(r"([0-9]+)(?:/([0-9]+))?")
_TARGET_HELP = "Lease id, and the node (default 0)"


def _one_vm(target: str, opts: StoreOptions) -> Access:
    """The VM `ID[/NODE]` names, and how to reach its console."""
    match = _TARGET.fullmatch(target.strip())
    if not match or not 0 < int(match.group(1)) <= common.MAX_LEASE_ID:
        raise fail(f"ID[/NODE]: {target!r} is not a lease id with an optional node (e.g. 12 or 12/1)")
    node = None if match.group(2) is None else int(match.group(2))
    with opts.backend() as backend:
        return backend.access(int(match.group(1)), node)


@lease_app.command("ssh", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@store_options()
def ssh(
    opts: StoreOptions,
    ctx: typer.Context,
    target: str = typer.Argument(..., metavar="ID[/NODE]", help=_TARGET_HELP),
    identity: Path | None = typer.Option(None, "--identity", "-i", metavar="FILE", help="Private key to log in with"),
    options: list[str] | None = typer.Option(None, "--option", "-o", metavar="OPT",
                                             help="An ssh option, as ssh -o takes it (repeatable)"),
    print_only: bool = typer.Option(False, "--print", help="Print the ssh command instead of running it"),
) -> None:
    """ssh to a VM of a lease as its image's login user; anything after `--` runs there."""
    vm = _one_vm(target, opts).vm
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
@store_options()
def console(
    opts: StoreOptions,
    target: str = typer.Argument(..., metavar="ID[/NODE]", help=_TARGET_HELP),
    print_only: bool = typer.Option(False, "--print", help="Print the virsh command instead of running it"),
) -> None:
    """Attach to the serial console of a VM of a lease (leave with Ctrl-]); `--print` gives the virsh line."""
    reach = _one_vm(target, opts)
    if reach.console is None:
        raise fail(f"console: {reach.console_error or 'no console'}")
    command = list(reach.console)
    if print_only or shutil.which(command[0]) is None:
        typer.echo(shlex.join(command))
        return
    raise typer.Exit(subprocess.run(command).returncode)
