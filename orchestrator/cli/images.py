"""`leasewise image ...`: the catalogue of base images leases boot (add, list, remove).

An image is added once, by name, after every host in the store has been asked (through the configured
driver) whether it can read it, and what format and size it sees; a lease then names it (`--image NAME`).
The file itself is never changed: each VM boots an overlay of its own.

Exit codes: 0 done; 2 bad input (a name taken or unknown, a file a host cannot read, a format that does
not match, an image still used by a lease); through a server, 4 for a caller who is not an admin (adding
and removing images is theirs). `add` and `remove` make one call on a backend, the server's client or the
local store (`orchestrator.cli.backend`).
"""

# No `from __future__ import annotations`: typer reads the option types at runtime.

from pathlib import Path

import typer
from rich.markup import escape

from orchestrator.cli import common
from orchestrator.cli.application import command_group
from orchestrator.cli.backend import backend
from orchestrator.cli.output import emit_json, make_console, when
from orchestrator.cli.tables import Column, print_table
from orchestrator.runtime.host_admin import check_image_request, hosts_driver, read_on_hosts
from orchestrator.state.codec import image_from_json

__all__ = ["image_app", "hosts_driver", "read_on_hosts"]   # (lease submit and lease ssh ask the hosts too)

image_app = command_group("image", "Catalogue the base images leases boot: add, list, remove.")


@image_app.command("add")
def add(
    name: str = typer.Argument(..., metavar="NAME", help="The name leases give (--image NAME)"),
    path: str = typer.Argument(..., metavar="PATH", help="The image file, an absolute path on the hosts' shared storage"),
    fmt: str | None = typer.Option(None, "--format", metavar="qcow2|raw", help="Its format (default: as the hosts read it)"),
    login_user: str = typer.Option("debian", "--login-user", metavar="USER", help="Who `lease ssh` logs in as"),
    os_kind: str = typer.Option("linux", "--os", metavar="linux|other", help="The guest's OS"),
    kernel: str | None = typer.Option(None, "--kernel", metavar="K", help="Direct kernel boot: the kernel"),
    initrd: str | None = typer.Option(None, "--initrd", metavar="I", help="... its initrd"),
    cmdline: str | None = typer.Option(None, "--cmdline", metavar="C", help="... its command line (e.g. root=/dev/vda)"),
    state: Path | None = common.StateOption,
    config: Path | None = common.ConfigOption,
    wait: str = common.WaitOption,
    server: str | None = common.ServerOption,
) -> None:
    """Catalogue a base image, after checking every host can read it."""
    values = {"name": name, "path": path, "format": fmt, "login_user": login_user, "os": os_kind,
              "kernel": kernel, "initrd": initrd, "cmdline": cmdline}
    check_image_request(values)   # nothing is asked of the hosts (or the server) for a malformed request
    settings = common.load(config)
    with backend(server, state, settings) as catalogue:
        added = catalogue.image_add(values)
    hosts = added["hosts"]
    make_console().print(f"image {escape(name)} added: {escape(path)} ({added['format']}, "
                         f"{added['size_bytes'] / 2**30:.1f} GiB; readable on {hosts} host"
                         f"{'s' if hosts != 1 else ''})", soft_wrap=True)


@image_app.command("list")
def list_images(
    json_out: bool = typer.Option(False, "--json", help="Print JSON"),
    state: Path | None = common.StateOption,
    config: Path | None = common.ConfigOption,
    wait: str = common.WaitOption,
    server: str | None = common.ServerOption,
) -> None:
    """The catalogued images: name, path, format, size, login user, leases using it."""
    settings = common.load(config)
    remote = common.client(server, settings)
    if remote is not None:
        with remote:
            answer = remote.images()
        images = [image_from_json(i) for i in answer]
        users = {i["name"]: i["leases"] for i in answer}
    elif not common.store_exists(state, settings):
        images, users = [], {}
    else:
        with common.open_store(state, settings) as store:
            images = store.images()
            users = {i.name: store.leases_using_image(i.name) for i in images}
    if json_out:
        emit_json([{"name": i.name, "path": i.path, "format": i.format, "size_bytes": i.size_bytes,
                    "login_user": i.login_user, "os": i.os, "kernel": i.kernel, "initrd": i.initrd,
                    "cmdline": i.cmdline, "added_at": i.added_at.isoformat() if i.added_at else None,
                    "added_by": i.added_by, "leases": users[i.name]} for i in images])
        return
    if not images:
        make_console().print("no images (add one with `leasewise image add NAME PATH`)")
        return
    print_table(make_console(),
                [Column("name"), Column("path", wraps=True), Column("format"), Column("size", "right"),
                 Column("login"), Column("boot", wraps=True, drop=2), Column("added", drop=1),
                 Column("leases", wraps=True)],
                [[escape(i.name), escape(i.path), i.format, f"{i.size_bytes / 2**30:.1f} GiB", escape(i.login_user),
                  "kernel " + escape(i.kernel) if i.kernel else "disk", when(i.added_at) if i.added_at else "-",
                  ", ".join(map(str, users[i.name])) or "-"] for i in images],
                title=f"{len(images)} image{'s' if len(images) != 1 else ''}")


@image_app.command("remove")
def remove(
    name: str = typer.Argument(..., metavar="NAME", help="Image name"),
    state: Path | None = common.StateOption,
    config: Path | None = common.ConfigOption,
    wait: str = common.WaitOption,
    server: str | None = common.ServerOption,
) -> None:
    """Forget a catalogued image (the file stays); refused while a lease uses it."""
    settings = common.load(config)
    with backend(server, state, settings) as catalogue:
        catalogue.image_remove(name)
    make_console().print(f"image {escape(name)} removed from the catalogue (the file is left as it is)")
