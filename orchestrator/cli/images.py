"""`leasewise image ...`: the catalogue of base images leases boot (add, list, remove).

An image is added once, by name, after every host in the store has been asked (through the configured
driver) whether it can read it, and what format and size it sees; a lease then names it (`--image NAME`).
The file itself is never changed: each VM boots an overlay of its own.

Exit codes: 0 done; 2 bad input (a name taken or unknown, a file a host cannot read, a format that does
not match, an image still used by a lease); through a server, 4 for a caller who is not an admin (adding
and removing images is theirs). Each command makes one call on the backend its shared options select, the
server's client or the local store (`orchestrator.service.backend`).
"""

# No `from __future__ import annotations`: typer reads the option types at runtime.

import typer
from rich.markup import escape

from orchestrator.cli.application import command_group
from orchestrator.cli.common import StoreOptions, store_options
from orchestrator.cli.output import counted, emit_json, make_console, when
from orchestrator.cli.tables import Column, print_table
from orchestrator.model.timeutil import parse_time

#: what `image list --json` gives of each image, in this order
_JSON_KEYS = ("name", "path", "format", "size_bytes", "login_user", "os", "kernel", "initrd", "cmdline", "added_at",
              "added_by", "leases")


def _iso(value) -> str | None:
    return None if value is None else value.isoformat()


image_app = command_group("image", "Catalogue the base images leases boot: add, list, remove.")


@image_app.command("add")
@store_options()
def add(
    opts: StoreOptions,
    name: str = typer.Argument(..., metavar="NAME", help="The name leases give (--image NAME)"),
    path: str = typer.Argument(..., metavar="PATH", help="The image file, an absolute path on the hosts' shared storage"),
    fmt: str | None = typer.Option(None, "--format", metavar="qcow2|raw", help="Its format (default: as the hosts read it)"),
    login_user: str = typer.Option("debian", "--login-user", metavar="USER", help="Who `lease ssh` logs in as"),
    os_kind: str = typer.Option("linux", "--os", metavar="linux|other", help="The guest's OS"),
    kernel: str | None = typer.Option(None, "--kernel", metavar="K", help="Direct kernel boot: the kernel"),
    initrd: str | None = typer.Option(None, "--initrd", metavar="I", help="... its initrd"),
    cmdline: str | None = typer.Option(None, "--cmdline", metavar="C", help="... its command line (e.g. root=/dev/vda)"),
) -> None:
    """Catalogue a base image, after checking every host can read it."""
    values = {"name": name, "path": path, "format": fmt, "login_user": login_user, "os": os_kind,
              "kernel": kernel, "initrd": initrd, "cmdline": cmdline}
    with opts.backend() as catalogue:   # (which checks the entry before it asks any host)
        added = catalogue.image_add(values)
    make_console().print(f"image {escape(name)} added: {escape(path)} ({added['format']}, "
                         f"{added['size_bytes'] / 2**30:.1f} GiB; readable on {counted(added['hosts'], 'host')})",
                         soft_wrap=True)


@image_app.command("list")
@store_options()
def list_images(
    opts: StoreOptions,
    json_out: bool = typer.Option(False, "--json", help="Print JSON"),
) -> None:
    """The catalogued images: name, path, format, size, login user, leases using it."""
    with opts.backend() as catalogue:
        images = catalogue.images()
    for image in images:   # (the store's fixed-width text, as people read times)
        image["added_at"] = parse_time(image["added_at"], "added_at") if image["added_at"] else None
    if json_out:
        emit_json([{key: image[key] for key in _JSON_KEYS} | {"added_at": _iso(image["added_at"])} for image in images])
        return
    if not images:
        make_console().print("no images (add one with `leasewise image add NAME PATH`)")
        return
    print_table(make_console(),
                [Column("name"), Column("path", wraps=True), Column("format"), Column("size", "right"),
                 Column("login"), Column("boot", wraps=True, drop=2), Column("added", drop=1),
                 Column("leases", wraps=True)],
                [[escape(i["name"]), escape(i["path"]), i["format"], f"{i['size_bytes'] / 2**30:.1f} GiB",
                  escape(i["login_user"]), "kernel " + escape(i["kernel"]) if i["kernel"] else "disk",
                  when(i["added_at"]) if i["added_at"] else "-",
                  ", ".join(map(str, i["leases"])) or "-"] for i in images],
                title=counted(len(images), "image"))


@image_app.command("remove")
@store_options()
def remove(
    opts: StoreOptions,
    name: str = typer.Argument(..., metavar="NAME", help="Image name"),
) -> None:
    """Forget a catalogued image (the file stays); refused while a lease uses it."""
    with opts.backend() as catalogue:
        catalogue.image_remove(name)
    make_console().print(f"image {escape(name)} removed from the catalogue (the file is left as it is)")
