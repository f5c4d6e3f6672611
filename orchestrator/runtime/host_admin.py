"""Adding, importing, removing and checking hosts, and cataloguing images: the steps that the CLI on its
own store and `leasewise serve` share, so both answer alike.

Hosts are asked (their capacity, the pre-flight checks, whether they can read an image) before any write
lock is taken and never while holding it; the store is then changed in the caller's transaction. Bad input
and refusals raise leasewise's own errors (one line, exit code 2), which the CLI prints and the API sends.
"""

from __future__ import annotations

from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from drivers.base import PAIR_CHECKS, Driver, HostInfo, ImageInfo
from drivers.deadline import answers_within
from drivers.errors import DriverError
from drivers.image_file import probe_image
from drivers.inventory import HostConfig
from orchestrator.model.errors import InvalidRequest, LeasewiseError
from orchestrator.model.images import IMAGE_FORMATS, CatalogImage
from orchestrator.model.lease import Lease, LeaseType
from orchestrator.model.reservations import ReservationState
from orchestrator.model.states import RUNNING_STATES, SUSPENDED_STATES, LeaseState
from orchestrator.planning.learning import LIVE_MIGRATE, pair_key
from orchestrator.runtime.host_probe import probe_hosts
from orchestrator.runtime.image_copies import (
    CopyProgress,
    HostCopy,
    local_checksums,
    needs_copies,
    place_on_host,
)
from orchestrator.state.cluster import Cluster
from orchestrator.state.learned import seed
from orchestrator.state.store import HostRecord, Store

#: the settings `host import` compares with a host already in the store
COMPARED = ("uri", "domain_type", "ssh", "ssh_key", "known_hosts", "migration_uri", "state_dir", "shared_storage",
            "peer_uri", "properties", "peer_ssh_key", "peer_known_hosts")


# -- add / import ------------------------------------------------------------------------------------------
def capacities(configs: list[HostConfig], driver: str, cpus: int | None, memory: int | None,
               timeout: float) -> dict[str, tuple[int, int, HostInfo | None]]:
    """name -> (vCPUs, memory MiB, what the driver said): explicit cpus/memory win; the simulated driver
    needs both; with libvirt every host that must be asked has to answer (within `timeout`)."""
    if cpus is not None and memory is not None:
        return {c.name: (cpus, memory, None) for c in configs}
    if driver != "libvirt":
        missing = " and ".join(o for o, v in (("--cpus", cpus), ("--memory", memory)) if v is None)
        raise InvalidRequest(missing, f"required with the {driver} driver (it cannot ask a host its capacity; "
                                      f"[daemon] driver = \"libvirt\" reads it from libvirt)")
    infos = probe_hosts(configs, timeout)
    out: dict[str, tuple[int, int, HostInfo | None]] = {}
    for cfg in configs:
        info = infos[cfg.name]
        if not info.reachable:
            raise LeasewiseError(f"host {cfg.name!r} ({cfg.uri}) is unreachable: {info.error} "
                                 "(give --cpus and --memory to add it without asking)")
        if info.vcpus <= 0 or info.memory_mib <= 0:
            raise LeasewiseError(f"host {cfg.name!r} ({cfg.uri}) reported no capacity ({info.vcpus} vCPUs, "
                                 f"{info.memory_mib} MiB): give --cpus and --memory")
        out[cfg.name] = (cpus or info.vcpus, memory or info.memory_mib, info)
    return out


def refuse_taken(store: Store, name: str) -> None:
    if any(h.name == name for h in store.hosts()):
        raise LeasewiseError(f"host {name!r} already exists")


def capacity_source(info: HostInfo | None) -> str:
    """What `host add` says of where the capacity came from."""
    return "given" if info is None else f"from libvirt: {info.hypervisor}, libvirt {info.libvirt_version}"


def import_partition(store: Store, configs: list[HostConfig], source: str) -> tuple[list[HostConfig], list[str]]:
    """(hosts to add, names already there with the same settings); a host there with other settings is
    an error naming what differs (nothing is added)."""
    existing = {h.name: h for h in store.hosts()}
    new, same = [], []
    for cfg in configs:
        record = existing.get(cfg.name)
        if record is None:
            new.append(cfg)
        elif record.config == cfg:
            same.append(cfg.name)
        else:
            differ = [f for f in COMPARED if getattr(record.config, f) != getattr(cfg, f)]
            raise LeasewiseError(f"host {cfg.name!r} is already in the store with different settings "
                                 f"({', '.join(differ)} differ): remove it first or fix {source}")
    return new, same


# -- remove -----------------------------------------------------------------------------------------------
def _on_host(lease: Lease, host: str, table) -> bool:
    vm = lease.last_vm
    return vm is not None and any(rr in table and host in rr.resources for rr in vm.all_parts())


def _image_on(lease: Lease, host: str, cfg: HostConfig) -> bool:
    """Whether a suspended lease's memory image sits on `host` (so removing it strands the lease)."""
    if lease.state not in SUSPENDED_STATES and lease.state is not LeaseState.MIGRATING:
        return False
    if cfg.is_shared(cfg.state_dir):
        return False
    for vm in reversed(lease.reservations):
        if vm.is_suspending and vm.state is ReservationState.DONE:
            return host in vm.nodes.values() or host in vm.resources
    return False


def _started(lease: Lease) -> bool:
    vm = lease.last_vm
    return (lease.state in RUNNING_STATES or lease.state is LeaseState.MIGRATING
            or (vm is not None and any(rr.state is not ReservationState.SCHEDULED for rr in vm.all_parts())))


def remove_host(cluster: Cluster, name: str, drain: bool, now: datetime) -> list[dict[str, Any]]:
    """Take `name` out of the plan and the store (in the caller's transaction): refused while leases are
    planned there, unless `drain` can requeue them (best-effort leases not started yet); each requeued
    lease as {id, state, start, end, hosts} (start/end/hosts None while it waits for room)."""
    record = cluster.store.host(name)   # (StoreError: no host named NAME)
    leases = sorted(cluster.scheduler.leases.values(), key=lambda l: l.id)
    stranded = [l.id for l in leases if not l.is_final and _image_on(l, name, record.config)]
    if stranded:
        raise LeasewiseError(f"host {name!r} holds the memory images of suspended lease(s) "
                             f"{', '.join(map(str, stranded))}: cannot remove it until they resume elsewhere or end")
    planned = [l for l in leases if not l.is_final and _on_host(l, name, cluster.table)]
    ids = ", ".join(str(l.id) for l in planned)
    if planned and not drain:
        raise LeasewiseError(f"host {name!r} has reservations planned for lease(s) {ids}: cancel them, or use "
                             "--drain to requeue them on other hosts")
    running = [l for l in planned if _started(l)]
    if running:
        raise LeasewiseError(f"host {name!r} cannot be drained: lease(s) {', '.join(str(l.id) for l in running)} "
                             "run there: `leasewise host drain` it first, and remove it once it is empty")
    fixed = [l for l in planned if l.type is not LeaseType.BEST_EFFORT]
    if fixed:
        raise LeasewiseError(f"host {name!r} cannot be drained: lease(s) {', '.join(str(l.id) for l in fixed)} "
                             "are advance reservations or immediate leases (fixed start): cancel them first")
    for lease in planned:
        cluster.scheduler.requeue(lease, now)
    cluster.table.remove_host(name)
    cluster.hosts.pop(name, None)
    if planned:
        cluster.scheduler.schedule(now)   # re-plan them on the hosts that remain
    cluster.save(now)
    cluster.store.remove_host(name)
    cluster.store.append_event(now, "host-removed", None, host=name, drained=[l.id for l in planned])
    out = []
    for lease in planned:
        vm = lease.last_vm if lease.last_vm is not None and lease.last_vm in cluster.table else None
        out.append({"id": lease.id, "state": lease.state.value,
                    "start": None if vm is None else vm.start.isoformat(),
                    "end": None if vm is None else vm.end.isoformat(),
                    "hosts": None if vm is None else sorted(vm.resources)})
    return out


# -- check ------------------------------------------------------------------------------------------------
def run_checks(record: HostRecord, driver: str, timeout: float,
               images: list[CatalogImage] | None = None) -> list[dict[str, str]]:
    """The pre-flight rows for one host: check, status (PASS | FAIL | SKIP | simulated), detail, and one row
    per catalogued image (can the host read it). The driver named by `[daemon] driver` checks the host
    with a connection of its own (not a running daemon's)."""
    from orchestrator.runtime.driver_factory import make_driver

    try:
        checker = make_driver(driver, [record.config], capacities={record.name: (record.vcpus, record.memory_mib)},
                              retry_attempts=1)
    except (DriverError, ValueError) as exc:
        raise LeasewiseError(str(exc)) from None
    image_rows = []
    try:
        result = checker.check_host(record.name, timeout)
        for image in images or ():
            try:
                seen = checker.image_info(record.name, image.path)
                image_rows.append({"check": f"image {image.name}", "status": "PASS",
                                   "detail": f"{image.path}: {seen.format}, {seen.virtual_size / 2**30:.1f} GiB"})
            except DriverError as exc:
                hint = f" (`leasewise image sync {image.name} --host {record.name}` copies it)" if image.copied else ""
                image_rows.append({"check": f"image {image.name}", "status": "FAIL", "detail": f"{exc}{hint}"})
    finally:
        checker.close()
    rows = []
    for item in result.items:
        detail = item.detail
        if item.check == "connect" and item.status == "PASS":   # the driver knows the host, the store what was added
            detail += f" (store: {record.vcpus} vCPUs, {record.memory_mib} MiB)"
        rows.append({"check": item.check, "status": item.status, "detail": detail})
    return rows + image_rows


def run_pair_checks(records: list[HostRecord], driver: str, timeout: float,
                    host: str | None = None) -> list[dict[str, Any]]:
    """The rows of every ordered pair of hosts (source, destination), or of those with `host` on either side:
    source, destination, check (peer link, migration port, cpu), status, detail. The pairs are checked side
    by side, each within a few times `timeout` (a probe migration is several contacts)."""
    names = [r.name for r in records]
    pairs = [(s, d) for s in names for d in names if s != d and host in (None, s, d)]
    if not pairs:
        return []
    checker = hosts_driver(records, driver)
    limit = 3 * timeout
    try:
        answers = answers_within({f"{s}\0{d}": partial(checker.check_pair, s, d, limit) for s, d in pairs},
                                 limit + timeout)
    finally:
        checker.close()
    rows: list[dict[str, Any]] = []
    for (source, destination), answer in zip(pairs, answers.values()):
        pair = {"source": source, "destination": destination}
        if answer.value is None:
            why = f"no answer within {limit + timeout:g} s" if answer.timed_out else str(answer.error)
            rows += [{**pair, "check": name, "status": "FAIL", "detail": why, "link_mib_s": None} for name in PAIR_CHECKS]
            continue
        measured = answer.value.link_mib_s
        rows += [{**pair, "check": item.check, "status": item.status, "detail": item.detail,
                  "link_mib_s": measured if item.check == "peer link" else None}
                 for item in answer.value.items]
    return rows


def seed_links(store: Store, rows: list[dict[str, Any]], at: datetime) -> dict[str, float]:
    """The rates the pair checks' probe migrations measured (`link_mib_s` of their "peer link" rows) as the
    first learned rates of those pairs' live migrations, where the daemon has learned none from its own
    (orchestrator.state.learned.seed); pair -> rate, of those stored."""
    seeded = {}
    for row in rows:
        rate = row.get("link_mib_s")
        if isinstance(rate, (int, float)) and rate > 0:
            key = pair_key(row["source"], row["destination"])
            if seed(store, LIVE_MIGRATE, key, float(rate), at):
                seeded[key] = float(rate)
    return seeded


# -- images -----------------------------------------------------------------------------------------------
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
        raise LeasewiseError(str(exc)) from None


def read_on_hosts(driver: Driver, hosts: list[str], path: str) -> dict[str, ImageInfo | str]:
    """host -> what it sees at `path`, or why it cannot read it."""
    seen: dict[str, ImageInfo | str] = {}
    for host in hosts:
        try:
            seen[host] = driver.image_info(host, path)
        except DriverError as exc:
            seen[host] = str(exc)
    return seen


def refuse_image_taken(store: Store, name: str) -> None:
    if any(i.name == name for i in store.images()):
        raise InvalidRequest("NAME", f"image {name!r} already exists (remove it first, or pick another name)")


def image_on_hosts(records: list[HostRecord], driver_name: str, values: dict[str, Any], added_by: str,
                   progress: CopyProgress | None = None) -> tuple[CatalogImage, list[HostCopy]]:
    """The catalogue entry for `values` (CatalogImage's fields, `format` None: as the hosts read it) once
    the hosts hold it: hosts that see its files on storage they share read them there; the others are
    given copies of this machine's files (when it has them), checked on each host. The format the hosts
    agree on, its largest virtual size, and what became of each host. Refused when a host that should read
    it cannot, when no host could be given a copy, or when a host holds another file at its path."""
    if not records:
        raise InvalidRequest("image", "there are no hosts to check it on (add one with `leasewise host add`)")
    path, fmt = values["path"], values.get("format")
    files = tuple(f for f in (path, values.get("kernel"), values.get("initrd")) if f is not None)
    copying = [r for r in records if needs_copies(r.config, files)]
    checksums = local_checksums(files) if copying else None
    if checksums is not None:   # (bad input refused before anything is copied)
        check_image_file(path, fmt)
    driver = hosts_driver(records, driver_name)
    try:
        copies = {r.name: HostCopy(r.name, "shared") for r in records}
        if checksums is not None:
            refuse_different_files(driver, [r.config for r in copying], checksums)
            for record in copying:
                copies[record.name] = place_on_host(driver, record.config, checksums, overwrite=False,
                                                    progress=progress)
            if not any(copies[r.name].holds for r in copying):
                first = copies[copying[0].name]
                raise InvalidRequest("PATH", f"could not be copied to any host without shared storage "
                                             f"({first.host}: {first.detail})")
        holders = [h for h, c in copies.items() if c.holds]
        seen = read_on_hosts(driver, holders, path)
    finally:
        driver.close()
    missing = {h: why for h, why in seen.items() if isinstance(why, str)}
    if missing:
        host, why = next(iter(missing.items()))
        more = f" (and {len(missing) - 1} more host{'s' if len(missing) > 2 else ''})" if len(missing) > 1 else ""
        raise InvalidRequest("PATH", f"{host} cannot read it: {why}{more}")
    infos = [i for i in seen.values() if isinstance(i, ImageInfo)]
    formats = {i.format for i in infos}
    if len(formats) > 1:
        raise InvalidRequest("PATH", f"the hosts read it in different formats ({', '.join(sorted(formats))})")
    found = formats.pop()
    if fmt is not None and fmt != found:
        raise InvalidRequest("--format", f"the hosts read {path} as {found}, not {fmt}")
    if found not in IMAGE_FORMATS:
        raise InvalidRequest("PATH", f"is a {found} image; leasewise boots {' or '.join(IMAGE_FORMATS)} images")
    if max(i.virtual_size for i in infos) <= 0:   # (/dev/null, an empty file: read as a raw image of 0 bytes)
        raise InvalidRequest("PATH", f"{path} holds nothing (0 bytes): not a disk image")
    image = CatalogImage(**{**values, "format": found}, size_bytes=max(i.virtual_size for i in infos),
                         added_by=added_by, checksums=tuple(checksums.items()) if checksums is not None else ())
    return image, list(copies.values())


def check_image_file(path: str, fmt: str | None) -> None:
    """What this machine's file is, before it is copied: a disk image leasewise boots, in the format given."""
    try:
        found = probe_image(path)
    except DriverError as exc:
        raise InvalidRequest("PATH", str(exc)) from None
    if fmt is not None and fmt != found.format:
        raise InvalidRequest("--format", f"{path} is {found.format}, not {fmt}")
    if found.virtual_size <= 0:
        raise InvalidRequest("PATH", f"{path} holds nothing (0 bytes): not a disk image")


def refuse_different_files(driver: Driver, configs: list[HostConfig], checksums: dict[str, str]) -> None:
    """Before anything is copied: refuse when a host holds another file at one of the image's paths."""
    for config in configs:
        for path, wanted in checksums.items():
            if config.is_shared(path):
                continue
            try:
                found = driver.image_checksum(config.name, path)
            except DriverError:
                continue   # (the copy will fail on it, and say why)
            if found is not None and found != wanted:
                raise InvalidRequest("PATH", f"{config.name} holds a different file at {path} "
                                             f"(sha256 {found[:16]}...); remove it there, or use another path")


def sync_image(records: list[HostRecord], driver_name: str, image: CatalogImage,
               progress: CopyProgress | None = None) -> list[HostCopy]:
    """`image sync`: every host of `records` given the copied image's files it lacks or holds wrong, from
    this machine's files (refused when they are no longer the ones catalogued)."""
    if not image.copied:
        raise InvalidRequest("NAME", f"image {image.name!r} is on storage the hosts share: nothing to copy")
    here = local_checksums(image.files)
    if here is None:
        raise InvalidRequest("NAME", f"image {image.name!r}: {', '.join(image.files)} is no longer here to copy")
    if here != dict(image.checksums):
        changed = next(f for f in image.files if here.get(f) != dict(image.checksums).get(f))
        raise InvalidRequest("NAME", f"image {image.name!r}: {changed} changed since it was added "
                                     "(remove the image and add it again)")
    driver = hosts_driver(records, driver_name)
    try:
        return [place_on_host(driver, r.config, here, overwrite=True, progress=progress) for r in records]
    finally:
        driver.close()


# -- MAC addresses --------------------------------------------------------------------------------------------
def mac_prefixes_in_use(configs: list[HostConfig], driver_name: str) -> set[str]:
    """The MAC prefixes (three octets) of the domains on these hosts, leasewise's or not, which a new
    installation's prefix must avoid; a host that does not answer adds none (it was asked for its capacity
    already, so it usually does)."""
    if driver_name != "libvirt" or not configs:
        return set()
    from orchestrator.runtime.driver_factory import make_driver

    try:
        driver = make_driver(driver_name, configs, retry_attempts=1)
    except (DriverError, ValueError):
        return set()
    prefixes: set[str] = set()
    try:
        for config in configs:
            try:
                prefixes.update(mac[:8] for mac in driver.domain_macs(config.name))
            except DriverError:
                continue
    finally:
        driver.close()
    return prefixes
