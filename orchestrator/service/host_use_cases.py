"""The admins' use cases on hosts and images, part of `LeaseService` (which inherits them): draining,
adding, importing, setting, checking and removing hosts, adding and removing images, migrating a VM by
hand. Kept apart from the users' lease use cases so each module holds one audience's operations."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from drivers.base import Driver
from drivers.base import MigrationReport
from drivers.errors import DriverError, MigrationFailed
from drivers.inventory import HostConfig
from orchestrator.config import Config
from orchestrator.model.errors import InvalidRequest, LeasewiseError
from orchestrator.model.placement import check_property_key, properties_of
from orchestrator.runtime.driver_enactor import parse_vm_name
from orchestrator.runtime.image_copies import CopyProgress, copy_json
from orchestrator.runtime.host_admin import (
    mac_prefixes_in_use,
    sync_image,
    capacities,
    capacity_source,
    image_on_hosts,
    import_partition,
    refuse_image_taken,
    refuse_taken,
    remove_host,
    run_checks,
    run_pair_checks,
    seed_links,
)
from orchestrator.runtime.host_probe import host_rows, leases_on_hosts, probe_hosts
from orchestrator.service.identity import Caller, NotAllowed, Refused
from orchestrator.service.inputs import check_image_request, check_reachable
from orchestrator.state.codec import image_json, migration_report_json
from orchestrator.state.session import ClusterSession
from orchestrator.state.store import Store, StoreError



class HostUseCases:
    """What `LeaseService` provides to these use cases: its session, driver, configuration, wake-up, clock
    and read connection."""

    session: ClusterSession
    driver: Driver | None
    config: Config
    wake: Callable[[], None]

    def now(self) -> datetime:
        raise NotImplementedError

    def reader(self) -> Store:
        raise NotImplementedError

    @staticmethod
    def _admin_check(caller: Caller, doing: str) -> None:
        if not caller.admin:
            raise NotAllowed(f"{doing} is for admins ({caller.user} is not one)")

    # -- hosts -------------------------------------------------------------------------------------------------
    def drain(self, caller: Caller, host: str, by: datetime | None) -> dict[str, Any]:
        self._admin_check(caller, "draining a host")
        now = self.now()
        with self.session.open() as cluster:
            if host not in cluster.hosts:
                raise InvalidRequest("host", f"no host named {host!r}")
            plan = cluster.drain(host, by or now, now)
            cluster.save(now)
        self.wake()
        return {"host": host, "unavailable_from": plan.unavailable_from.isoformat(),
                "leases": [{"id": i, "change": what} for i, what in sorted(plan.leases.items())]}

    def undrain(self, caller: Caller, host: str) -> dict[str, Any]:
        self._admin_check(caller, "undraining a host")
        now = self.now()
        with self.session.open() as cluster:
            if host not in cluster.hosts:
                raise InvalidRequest("host", f"no host named {host!r}")
            cluster.undrain(host, now)
            cluster.save(now)
        self.wake()
        return {"host": host}

    def hosts(self, caller: Caller, timeout: float) -> list[dict[str, Any]]:
        """`host list`'s rows; the hosts are asked (libvirt) after the lock is let go."""
        now = self.now()
        with self.session.read() as cluster:
            records = list(cluster.hosts.values())
            usage = leases_on_hosts(cluster, now)
        infos = probe_hosts([r.config for r in records], timeout) if self.config.daemon.driver == "libvirt" else None
        return host_rows(records, usage, infos)

    def images(self, caller: Caller) -> list[dict[str, Any]]:
        """The catalogue, each image with the leases that use it (`image list`)."""
        store = self.reader()
        with store.snapshot():
            return [{**image_json(i), "leases": store.leases_using_image(i.name), "hosts": store.image_hosts(i.name)}
                    for i in store.images()]

    def image_remove(self, caller: Caller, name: str) -> None:
        self._admin_check(caller, "removing an image from the catalogue")
        with self.session.open() as cluster:
            cluster.store.remove_image(name)

    # -- host and catalogue administration (admins): hosts are asked before the lock is taken -----------------
    # The daemon's driver knows every host the store has (and for a moment more, never fewer): it learns a
    # new host in the transaction that adds it (one it refuses is not added), before the scheduler in memory
    # is rebuilt with it, and forgets a host once its removal is committed. Without a driver (a CLI's own
    # store) the next `run` makes its driver from the store.
    def _reach(self, added: list[tuple[HostConfig, int, int]]) -> None:
        """The new hosts (config, vCPUs, MiB) to the driver, inside the store's transaction."""
        if self.driver is None:
            return
        known = set(self.driver.hosts())   # (a driver made with a host already keeps it as it is)
        reached: list[str] = []
        try:
            for config, vcpus, mib in added:
                if config.name not in known:
                    self.driver.add_host(config, vcpus, mib)
                    reached.append(config.name)
        except (DriverError, ValueError) as exc:
            for name in reached:
                self.driver.remove_host(name)
            raise LeasewiseError(f"host {config.name!r}: the server's driver refused it ({exc}): nothing added") from None

    def _forget(self, host: str) -> None:
        """A removed host out of the driver, after the commit."""
        if self.driver is not None and host in self.driver.hosts():
            self.driver.remove_host(host)

    def host_add(self, caller: Caller, config: HostConfig, cpus: int | None, memory: int | None,
                 timeout: float) -> dict[str, Any]:
        """`host add`: the capacity given, else asked of the host (off the lock); the scheduler in memory
        is rebuilt to know the new host."""
        self._admin_check(caller, "adding hosts")
        check_reachable(config, self.config.daemon.driver)
        properties_of(config.properties, "--property")
        refuse_taken(self.reader(), config.name)   # before contacting it; checked again on insert
        vcpus, mib, info = capacities([config], self.config.daemon.driver, cpus, memory, timeout)[config.name]
        avoid = self._mac_prefixes_to_avoid([config])
        with self.session.open() as cluster:
            cluster.store.add_host(config, vcpus, mib)
            cluster.store.ensure_mac_prefix(avoid)
            self._reach([(config, vcpus, mib)])
        self.session.invalidate()
        self.wake()   # (leases waiting for room may fit now)
        return {"name": config.name, "vcpus": vcpus, "memory_mib": mib, "source": capacity_source(info)}

    def host_import(self, caller: Caller, configs: list[HostConfig], cpus: int | None, memory: int | None,
                    timeout: float, source: str) -> dict[str, Any]:
        """`host import`: the new hosts of an inventory in one transaction (`source` names it in errors)."""
        self._admin_check(caller, "importing hosts")
        for config in configs:
            check_reachable(config, self.config.daemon.driver)
            properties_of(config.properties, f"host {config.name!r}.properties")
        new, _ = import_partition(self.reader(), configs, source)
        found = capacities(new, self.config.daemon.driver, cpus, memory, timeout) if new else {}
        avoid = self._mac_prefixes_to_avoid(new)
        with self.session.open() as cluster:
            new_now, skipped = import_partition(cluster.store, configs, source)   # again, under the lock
            for cfg in new_now:
                if cfg.name not in found:   # added by someone else meanwhile and removed again: ask
                    raise LeasewiseError(f"host {cfg.name!r} changed in the store while importing: run the import again")
                cluster.store.add_host(cfg, *found[cfg.name][:2])
            if new_now:
                cluster.store.ensure_mac_prefix(avoid)
            self._reach([(c, *found[c.name][:2]) for c in new_now])
        if new_now:
            self.session.invalidate()
            self.wake()
        return {"added": [{"name": c.name, "vcpus": found[c.name][0], "memory_mib": found[c.name][1]} for c in new_now],
                "skipped": skipped}

    def host_set(self, caller: Caller, host: str, properties: Mapping[str, str], unset: list[str]) -> dict[str, Any]:
        """`host set`: properties set or replaced, keys removed (the names checked here, for every client).
        Refused, naming them, when a lease planned on the host would no longer meet its constraints."""
        self._admin_check(caller, "changing hosts")
        given = dict(properties_of(dict(properties), "--property"))
        gone = [check_property_key(key, "--unset") for key in unset]
        both = sorted(set(given) & set(gone))
        if both:
            raise InvalidRequest("--unset", f"{both[0]} is both set and unset")
        with self.session.open() as cluster:
            record = cluster.store.host(host)   # (StoreError: no host named NAME)
            missing = [key for key in gone if key not in record.config.property_map]
            if missing:
                raise InvalidRequest("--unset", f"host {host!r} has no property {missing[0]!r}")
            now_properties = {k: v for k, v in {**record.config.property_map, **given}.items() if k not in gone}
            changed = properties_of(now_properties, "--property")
            stranded = cluster.stranded_by(host, dict(changed))
            if stranded:
                raise Refused(f"host {host!r} not changed: lease(s) {', '.join(map(str, stranded))} would no longer "
                              "meet their constraints there, or anywhere (cancel them, or drain the host first)")
            cluster.store.set_host_properties(host, changed)
        self.session.invalidate()
        self.wake()   # (leases waiting for hosts with these properties may fit now)
        return {"host": host, "properties": dict(changed)}

    def _mac_prefixes_to_avoid(self, configs: list[HostConfig]) -> set[str]:
        """Before the installation's MAC prefix is drawn (with its first hosts): the prefixes the domains on
        these hosts use, asked off the lock."""
        if self.reader().mac_prefix() is not None:
            return set()
        return mac_prefixes_in_use(configs, self.config.daemon.driver)

    def host_remove(self, caller: Caller, host: str, drain: bool) -> dict[str, Any]:
        """`host remove [--drain]`: the leases requeued, each {id, state, start, end, hosts}. Refused, naming
        them and why, when a live lease's placement could then be met by no remaining host (planned or
        queued: it would wait for ever)."""
        self._admin_check(caller, "removing hosts")
        now = self.now()
        with self.session.open() as cluster:
            if host in cluster.hosts:
                stranded = cluster.stranded_without(host)
                if stranded:
                    why = "; ".join(f"lease {i}: {reason}" for i, reason in sorted(stranded.items()))
                    raise Refused(f"host {host!r} not removed: without it, no host could hold what lease(s) "
                                  f"{', '.join(map(str, sorted(stranded)))} ask ({why}); cancel them first")
            moved = remove_host(cluster, host, drain, now)
        self._forget(host)
        self.wake()
        return {"host": host, "requeued": moved}

    def host_check(self, caller: Caller, host: str, timeout: float) -> dict[str, Any]:
        """`host check`'s rows, by a connection of its own, and the rows of every pair of hosts with it on
        either side; for admins, since it reaches the host with the server's credentials (its libvirt, its
        ssh key)."""
        self._admin_check(caller, "checking hosts")
        store = self.reader()
        with store.snapshot():
            record = store.host(host)
            records = store.hosts()
            images = store.images()
        driver = self.config.daemon.driver
        checks = run_checks(record, driver, timeout, images)
        pairs = run_pair_checks(records, driver, timeout, host)
        if any(row.get("link_mib_s") for row in pairs):   # (the probes' rates: the first plans' for their pairs)
            with self.session.open() as cluster:
                seed_links(cluster.store, pairs, self.now())
                cluster.refresh_learned()
        return {"host": host, "uri": record.config.uri, "checks": checks, "pairs": pairs}

    def image_add(self, caller: Caller, values: dict[str, Any], progress: CopyProgress | None = None) -> dict[str, Any]:
        """`image add`: catalogued once the hosts hold it (asked, and given copies where they share no storage
        with this machine, off the lock); `values` are CatalogImage's fields as given (`format` None: as the
        hosts read it)."""
        self._admin_check(caller, "adding an image to the catalogue")
        check_image_request(values)
        store = self.reader()
        with store.snapshot():
            records = store.hosts()
            refuse_image_taken(store, values["name"])
        image, copies = image_on_hosts(records, self.config.daemon.driver, values, caller.user, progress)
        with self.session.open() as cluster:
            refuse_image_taken(cluster.store, image.name)
            known = set(cluster.hosts)
            held = {c.host: c.how for c in copies if c.holds and c.host in known} if image.copied else {}
            cluster.store.add_image(image, held)
            cluster.refresh_images()
        return {**image_json(image), "hosts": sum(c.holds for c in copies), "copies": [copy_json(c) for c in copies]}

    def image_sync(self, caller: Caller, name: str, host: str | None = None,
                   progress: CopyProgress | None = None) -> dict[str, Any]:
        """`image sync`: the copied image given to the hosts (or `host`) that lack it or hold a wrong copy,
        off the lock; what became of each host is recorded (a host that failed no longer counts as holding
        it)."""
        self._admin_check(caller, "copying images to hosts")
        store = self.reader()
        with store.snapshot():
            image = next((i for i in store.images() if i.name == name), None)
            records = store.hosts()
        if image is None:
            raise InvalidRequest("NAME", f"no image named {name!r}")
        if host is not None:
            records = [r for r in records if r.name == host]
            if not records:
                raise InvalidRequest("--host", f"no host named {host!r}")
        copies = sync_image(records, self.config.daemon.driver, image, progress)
        with self.session.open() as cluster:
            if any(i.name == name for i in cluster.store.images()):
                known = set(cluster.hosts)
                for copy in copies:
                    if copy.holds and copy.host in known:
                        cluster.store.set_image_host(name, copy.host, copy.how)
                    elif not copy.holds:
                        cluster.store.drop_image_host(name, copy.host)
                cluster.refresh_images()
        return {"name": name, "copies": [copy_json(c) for c in copies]}

    def migrate(self, caller: Caller, vm: str, to: str, max_downtime_ms: float, bandwidth_mib_s: float | None,
                timeout_s: float, on_timeout: str) -> dict[str, Any]:
        """`migrate VM --to HOST`: one live migration by hand, through the server's driver, off the lock.

        For admins only, not a lease's owner: as on the head node (where it needs the hosts' libvirt), it
        moves a domain behind the scheduler's back, so the plan no longer says where its memory is, and it
        takes room on the destination that the plan may have given to other leases. For the same reason the
        VMs of leases the plan still holds are refused: `host drain` moves those, and the plan with them."""
        self._admin_check(caller, "migrating a VM by hand")
        if self.driver is None:
            raise LeasewiseError("migrate: this service has no driver (`leasewise serve` has one)")
        owner = parse_vm_name(vm)
        if owner is not None:
            try:
                lease = self.reader().lease(owner[0])
            except StoreError:
                lease = None
            if lease is not None and not lease.is_final:
                raise InvalidRequest("VM", f"{vm} is lease {lease.id}'s, which the plan places: move it with "
                                           "`leasewise host drain HOST` (the plan moves with it)")
        try:
            report = self.driver.migrate(vm, to, max_downtime_ms=max_downtime_ms, bandwidth_mib_s=bandwidth_mib_s,
                                         timeout_s=timeout_s, on_timeout=on_timeout)  # type: ignore[arg-type]
        except MigrationFailed as exc:
            if not isinstance(exc.report, MigrationReport):
                raise
            return {"report": migration_report_json(exc.report), "error": str(exc)}
        except ValueError as exc:
            raise LeasewiseError(str(exc)) from None
        return {"report": migration_report_json(report), "error": None}
