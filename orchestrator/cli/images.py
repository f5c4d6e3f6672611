"""`leasewise image ...`: the catalogue of base images leases boot (add, list, remove).

An image is added once, by name, after every host in the store has been asked (through the configured
driver) whether it can read it, and what format and size it sees; a lease then names it (`--image NAME`).
The file itself is never changed: each VM boots an overlay of its own.

Exit codes: 0 done; 2 bad input (a name taken or unknown, a file a host cannot read, a format that does
not match, an image still used by a lease).
"""

# No `from __future__ import annotations`: typer reads the option types at runtime.

from pathlib import Path

import typer
from rich.markup import escape

from drivers.base import Driver, ImageInfo
from drivers.errors import DriverError
from orchestrator.cli import common
from orchestrator.state.codec import image_from_json
from orchestrator.cli.app import command_group, fail
from orchestrator.cli.leasefile import current_user
from orchestrator.cli.output import emit_json, make_console, when
from orchestrator.cli.tables import Column, print_table
from orchestrator.model.errors import InvalidRequest
from orchestrator.model.images import IMAGE_FORMATS, OS_KINDS, CatalogImage
from orchestrator.state.store import HostRecord, Store

image_app = command_group("image", "Catalogue the base images leases boot: add, list, remove.")


def hosts_driver(records: list[HostRecord], driver: str, simulated_hosts: Path | None = None) -> Driver:
    """The configured driver over the store's hosts (one connection attempt each: a host that does not
    answer is reported, not waited for); the simulated one reads its hosts from `simulated_hosts`."""
    from orchestrator.runtime.driver_factory import make_driver

    try:
        if driver == "simulated":
            return make_driver(driver, [r.config for r in records],
                               capacities={r.name: (r.vcpus, r.memory_mib) for r in records},
                               state_file=simulated_hosts if simulated_hosts and simulated_hosts.exists() else None)
        return make_driver(driver, [r.config for r in records], retry_attempts=1)
    except (DriverError, ValueError) as exc:
        raise fail(str(exc)) from None


def read_on_hosts(driver: Driver, hosts: list[str], path: str) -> dict[str, ImageInfo | str]:
    """host -> what it sees at `path`, or why it cannot read it."""
    seen: dict[str, ImageInfo | str] = {}
    for host in hosts:
        try:
            seen[host] = driver.image_info(host, path)
        except DriverError as exc:
            seen[host] = str(exc)
    return seen


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
) -> None:
    """Catalogue a base image, after checking every host can read it."""
    if fmt is not None and fmt not in IMAGE_FORMATS:
        raise fail(f"--format: must be one of {', '.join(IMAGE_FORMATS)} (got {fmt!r})")
    try:   # the record's own checks first: nothing is asked of the hosts for a malformed request
        CatalogImage(name=name, path=path, format=fmt or "qcow2", login_user=login_user, os=os_kind,
                     kernel=kernel, initrd=initrd, cmdline=cmdline)
    except InvalidRequest as exc:
        raise fail(f"{_flag(exc.field)}: {exc.problem}") from None
    settings = common.load(config)
    with common.open_store(state, settings) as store:
        records = [r for r in store.hosts()]
        if not records:
            raise fail("image: there are no hosts to check it on (add one with `leasewise host add`)")
        _refuse_taken(store, name)
    driver = hosts_driver(records, settings.daemon.driver)
    try:
        seen = read_on_hosts(driver, [r.name for r in records], path)
    finally:
        driver.close()
    missing = {h: why for h, why in seen.items() if isinstance(why, str)}
    if missing:
        host, why = next(iter(missing.items()))
        more = f" (and {len(missing) - 1} more host{'s' if len(missing) > 2 else ''})" if len(missing) > 1 else ""
        raise fail(f"PATH: {host} cannot read it: {why}{more}")
    infos = [i for i in seen.values() if isinstance(i, ImageInfo)]
    formats = {i.format for i in infos}
    if len(formats) > 1:
        raise fail(f"PATH: the hosts read it in different formats ({', '.join(sorted(formats))})")
    found = formats.pop()
    if fmt is not None and fmt != found:
        raise fail(f"--format: the hosts read {path} as {found}, not {fmt}")
    if found not in IMAGE_FORMATS:
        raise fail(f"PATH: is a {found} image; leasewise boots {' or '.join(IMAGE_FORMATS)} images")
    image = CatalogImage(name=name, path=path, format=found, login_user=login_user, os=os_kind, kernel=kernel,
                         initrd=initrd, cmdline=cmdline, size_bytes=max(i.virtual_size for i in infos),
                         added_by=current_user())
    with common.open_store(state, settings) as store:
        _refuse_taken(store, name)
        store.add_image(image)
    make_console().print(f"image {escape(name)} added: {escape(path)} ({found}, "
                         f"{image.size_bytes / 2**30:.1f} GiB; readable on {len(records)} host"
                         f"{'s' if len(records) != 1 else ''})", soft_wrap=True)


def _flag(field: str) -> str:
    return {"name": "NAME", "path": "PATH", "os": "--os", "login_user": "--login-user", "format": "--format",
            "kernel": "--kernel", "initrd": "--initrd", "size": "PATH"}.get(field, field)


def _refuse_taken(store: Store, name: str) -> None:
    if any(i.name == name for i in store.images()):
        raise fail(f"NAME: image {name!r} already exists (remove it first, or pick another name)")


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
    remote = common.client(server, settings)
    if remote is not None:
        with remote:
            remote.image_remove(name)
    else:
        with common.open_store(state, settings) as store:
            store.remove_image(name)
    make_console().print(f"image {escape(name)} removed from the catalogue (the file is left as it is)")
