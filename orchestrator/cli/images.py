"""`leasewise image ...`: the catalogue of base images leases boot (add, sync, list, remove).

An image is added once, by name, after every host in the store has been asked (through the configured
driver) whether it can read it, and what format and size it sees; a lease then names it (`--image NAME`).
Hosts that do not see it on storage they share are given a copy of this machine's file (at the same path,
checksummed on the host), and a lease naming it is planned on the hosts holding it only; `image sync`
copies it to hosts added later (or holding a wrong copy). The file itself is never changed: each VM boots
an overlay of its own.

Exit codes: 0 done; 1 some host could not be given its copy (the others hold it); 2 bad input (a name taken or
unknown, a file a host cannot read, a format that does not match, an image still used by a lease); through a
server, 4 for a caller who is not an admin (adding and removing images is theirs). Each command makes one call
on the backend its shared options select, the server's client or the local store
(`orchestrator.service.backend`).
"""

# No `from __future__ import annotations`: typer reads the option types at runtime.

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from orchestrator.cli.application import EXIT_FAILED, command_group
from orchestrator.cli.common import StoreOptions, store_options
from orchestrator.cli.output import counted, emit_json, make_console, when
from orchestrator.cli.tables import Column, print_table
from orchestrator.model.timeutil import parse_time

#: what `image list --json` gives of each image, in this order
_JSON_KEYS = ("name", "path", "format", "size_bytes", "login_user", "os", "kernel", "initrd", "cmdline", "added_at",
              "added_by", "leases", "checksums", "hosts")


def _iso(value) -> str | None:
    return None if value is None else value.isoformat()


class _CopyBar:
    """A progress bar per file copied to a host (on stderr, so `--json` stays alone on stdout)."""

    def __init__(self, progress: Progress):
        self._progress = progress
        self._tasks: dict[tuple[str, str], TaskID] = {}

    def __call__(self, host: str, path: str, sent: int, total: int) -> None:
        key = (host, path)
        if key not in self._tasks:
            self._tasks[key] = self._progress.add_task(f"{host}: {path}", total=total)
        self._progress.update(self._tasks[key], completed=sent)


def _copy_progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                    TimeRemainingColumn(), console=make_console(stderr=True), transient=False)


def _print_copies(copies: list[dict]) -> bool:
    """Each host's outcome where something happened (copies made, failures); whether all hold it."""
    console = make_console()
    for copy in copies:
        if copy["outcome"] == "copied":
            console.print(f"  {escape(copy['host'])}: copied, checksum verified on the host", soft_wrap=True)
        elif copy["outcome"] == "failed":
            console.print(f"  {escape(copy['host'])}: FAILED: {escape(copy['detail'])}", soft_wrap=True)
    return all(c["outcome"] != "failed" for c in copies)


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
    """Catalogue a base image, after checking every host can read it (copying it to the hosts that share no
    storage with this machine)."""
    values = {"name": name, "path": path, "format": fmt, "login_user": login_user, "os": os_kind,
              "kernel": kernel, "initrd": initrd, "cmdline": cmdline}
    with opts.backend() as catalogue, _copy_progress() as progress:   # (the entry is checked before any host)
        added = catalogue.image_add(values, _CopyBar(progress))
    where = (f"copied to or held by {counted(added['hosts'], 'host')}" if added["checksums"]
             else f"readable on {counted(added['hosts'], 'host')}")
    make_console().print(f"image {escape(name)} added: {escape(path)} ({added['format']}, "
                         f"{added['size_bytes'] / 2**30:.1f} GiB; {where})", soft_wrap=True)
    if not _print_copies(added.get("copies", [])):
        make_console(stderr=True).print(f"some hosts hold no copy: `leasewise image sync {escape(name)}` once "
                                        "they answer", soft_wrap=True)
        raise typer.Exit(EXIT_FAILED)


@image_app.command("sync")
@store_options()
def sync(
    opts: StoreOptions,
    name: str = typer.Argument(..., metavar="NAME", help="Image name"),
    host: str | None = typer.Option(None, "--host", metavar="H", help="Only this host (default: every host)"),
) -> None:
    """Copy an image the hosts hold copies of to the hosts that lack it or hold a wrong copy."""
    with opts.backend() as catalogue, _copy_progress() as progress:
        synced = catalogue.image_sync(name, host, _CopyBar(progress))
    copies = synced["copies"]
    held = sum(c["outcome"] != "failed" for c in copies)
    made = sum(c["outcome"] == "copied" for c in copies)
    make_console().print(f"image {escape(name)}: held by {held} of {counted(len(copies), 'host')} "
                         f"({made} copied now)", soft_wrap=True)
    if not _print_copies(copies):
        raise typer.Exit(EXIT_FAILED)


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
                 Column("hosts", wraps=True), Column("leases", wraps=True)],
                [[escape(i["name"]), escape(i["path"]), i["format"], f"{i['size_bytes'] / 2**30:.1f} GiB",
                  escape(i["login_user"]), "kernel " + escape(i["kernel"]) if i["kernel"] else "disk",
                  when(i["added_at"]) if i["added_at"] else "-", _holders(i),
                  ", ".join(map(str, i["leases"])) or "-"] for i in images],
                title=counted(len(images), "image"))


def _holders(image: dict) -> str:
    """`image list`'s hosts column: every host for an image on shared storage, else the hosts holding it."""
    if not image["checksums"]:
        return "all (shared)"
    return escape(", ".join(sorted(image["hosts"]))) or "none (image sync)"


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
