"""What the server does for a caller: each use case checks who may do it, then works on the one scheduler
kept in memory (writes) or on a read connection of its own thread (reads).

Writes go through the `SharedCluster`'s lock, which stands for the store's write lock in this process:
the server is the store's only writer, so a write never waits for another process, and never for a
host either (the daemon's operations run off the lock). Reads use one SQLite connection per thread (WAL:
they see the last commit and block no one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from drivers.base import Driver
from drivers.clock import Clock
from drivers.base import MigrationReport
from drivers.errors import DriverError, MigrationFailed
from drivers.inventory import HostConfig
from orchestrator.config import Config
from orchestrator.model.errors import InvalidRequest, LeasewiseError
from orchestrator.model.lease import Lease, LeaseRequest
from orchestrator.model.lease_fields import InlineGuest, request_from_fields
from orchestrator.model.states import RUNNING_STATES, LeaseState
from orchestrator.runtime.driver_enactor import parse_vm_name
from orchestrator.runtime.image_copies import CopyProgress, copy_json
from orchestrator.runtime.host_admin import (
    capacities,
    capacity_source,
    image_on_hosts,
    mac_prefixes_in_use,
    sync_image,
    import_partition,
    refuse_image_taken,
    refuse_taken,
    remove_host,
    run_checks,
    run_pair_checks,
)
from orchestrator.runtime.host_probe import host_rows, leases_on_hosts, probe_hosts
from orchestrator.runtime.host_watch import SILENT_HOSTS
from orchestrator.runtime.vm_access import lease_vms
from orchestrator.service.calendar import CalendarWindow, Copied
from orchestrator.service.identity import Caller, NotAllowed
from orchestrator.service.backend import catalogue
from orchestrator.service.inputs import check_image_request, check_reachable
from orchestrator.service.limits import SubmissionRate
from orchestrator.service.models import LeaseSubmission
from orchestrator.state.answers import hosts_of
from orchestrator.state.cluster import Cluster, check_site_can_hold
from orchestrator.state.codec import image_json, migration_report_json
from orchestrator.state.session import ClusterSession
from orchestrator.model.quota import check_subject, check_user
from orchestrator.state.quotas import list_quotas, remove_quota, set_quota, show_quota
from orchestrator.state.store import Event, Store, StoreError
from orchestrator.state.tokens import check_note, create_token, list_tokens, revoke_token, token_state

T = TypeVar("T")

#: states in which a lease's VMs exist on hosts (so `lease show` asks the hosts about them)
_VMS_EXIST = frozenset(RUNNING_STATES) | {LeaseState.SUSPENDED_PENDING, LeaseState.SUSPENDED_QUEUED,
                                          LeaseState.SUSPENDED_SCHEDULED, LeaseState.MIGRATING}


class Refused(LeasewiseError):
    """Well-formed, but the scheduler says no (exit code 3): an extension that does not fit."""

    exit_code = 3


class LeaseService:
    def __init__(self, store: Store, config: Config, session: ClusterSession, clock: Clock, driver: Driver | None,
                 *, wake: Callable[[], None] = lambda: None, vms_driver: Callable[[], Driver] | None = None,
                 one_connection: bool = False, submissions: SubmissionRate | None = None):
        """`store`: the writer (used under the session's lock only); `driver`: the daemon's (None: the CLI
        on its own store); `wake`: tells the daemon's loop to step now (a lease may start at once).
        Without a driver, `vms_driver` makes one for a call that looks at a lease's VMs (closed after it).
        `one_connection`: reads go through `store` too (one thread, a command of its own: opening the store
        again would check the file again). `submissions`: each user's rate of lease submissions, for every
        client of a server (admins are not limited; None: no limit, as on the CLI's own store)."""
        self.store = store
        self.submissions = submissions
        self.config = config
        self.session = session
        self.clock = clock
        self.driver = driver
        self.wake = wake
        self._vms_driver = vms_driver
        self._one_connection = one_connection
        self._local = threading.local()
        self._readers: list[Store] = []
        self._readers_lock = threading.Lock()
        # one lease list is made at a time (`listed`): each is CPU-bound under the GIL, and several at once
        # take the GIL from whoever holds the scheduler's lock, which the submissions wait for
        self._listing = threading.Lock()

    # -- plumbing ---------------------------------------------------------------------------------------------
    def now(self) -> datetime:
        """Plans are made in whole seconds (as the CLI's)."""
        return self.clock.now().replace(microsecond=0)

    def reader(self) -> Store:
        """This thread's read connection to the store."""
        if self._one_connection:
            return self.store
        store = getattr(self._local, "store", None)
        if store is None:
            store = Store.open(self.store.path)
            self._local.store = store
            with self._readers_lock:
                self._readers.append(store)
        return store

    def close(self) -> None:
        with self._readers_lock:
            for store in self._readers:
                try:
                    store.close()
                except Exception:
                    pass
            self._readers.clear()

    @staticmethod
    def _owner_check(caller: Caller, lease: Lease, doing: str) -> None:
        owner = lease.request.user
        if not caller.may_act_for(owner):
            raise NotAllowed(f"lease {lease.id} belongs to {owner or 'nobody'}: only its owner or an admin may {doing} it")

    @staticmethod
    def _admin_check(caller: Caller, doing: str) -> None:
        if not caller.admin:
            raise NotAllowed(f"{doing} is for admins ({caller.user} is not one)")

    @contextmanager
    def _vm_lookup(self) -> Iterator[Driver]:
        """The driver that finds a lease's VMs: the daemon's, else one made for this call."""
        if self.driver is not None or self._vms_driver is None:
            yield self.driver   # type: ignore[misc]
            return
        driver = self._vms_driver()
        try:
            yield driver
        finally:
            driver.close()

    def _stored(self, lease_id: int) -> Lease:
        try:
            return self.reader().lease(lease_id)
        except StoreError:
            raise InvalidRequest("lease", f"no lease with id {lease_id}") from None

    # -- leases -------------------------------------------------------------------------------------------------
    def submit(self, caller: Caller, submission: LeaseSubmission, *, key: str | None = None,
               check: Callable[[LeaseRequest], None] | None = None) -> dict[str, Any]:
        """`lease submit` for every client (the API, the web form, the CLI on its own store): the caller's
        rate of submissions taken from, the submission checked (`request_of`), `check(request)` (the CLI's
        look at its hosts), then admitted. With an idempotency `key`, a submission the caller made with the
        same key is answered as it was the first time, and makes no second lease."""
        fingerprint = submission.fingerprint() if key is not None else None
        if key is not None:
            answered = self._answered(self.reader(), caller, key, fingerprint)
            if answered is not None:
                return answered
        if self.submissions is not None and not caller.admin:
            self.submissions.take(caller.user)
        request = self.request_of(caller, submission)
        if check is not None:
            check(request)
        return self._admit(caller, request, key, fingerprint)

    def request_of(self, caller: Caller, submission: LeaseSubmission) -> LeaseRequest:
        """The request a submission asks for, checked by the one validation every client's request goes
        through (`lease_fields.request_from_fields`) against the catalogue and the hosts as they are."""
        store = self.reader()
        with store.snapshot():
            images = store.images()
            capacities = [h.capacity for h in store.hosts()]
        resolve = catalogue(lambda: images, "none; an admin adds them with `leasewise image add`")
        return request_from_fields(submission.values(), self.now(), default_user=caller.user, guest=InlineGuest(),
                                   images=resolve, site=lambda n, node: check_site_can_hold(capacities, n, node))

    @staticmethod
    def _answered(store: Store, caller: Caller, key: str, fingerprint: str | None) -> dict[str, Any] | None:
        """The answer given before to the caller's submission with `key`, if any."""
        found = store.submission(caller.user, key)
        if found is None:
            return None
        if found[0] != fingerprint:
            raise InvalidRequest("Idempotency-Key", f"was used before for another submission (lease "
                                                    f"{found[1]['id']}): give each submission a key of its own")
        return found[1]

    def _admit(self, caller: Caller, request: LeaseRequest, key: str | None, fingerprint: str | None) -> dict[str, Any]:
        """Admit and plan a checked request for the caller; the answer of `lease submit --json`."""
        if not request.user:
            request = replace(request, user=caller.user)
        if request.user != caller.user and not caller.admin:
            raise NotAllowed(f"{caller.user} may not submit leases for {request.user} (only admins may)")
        if not caller.admin and request.image is not None and request.image.name is None:
            raise NotAllowed("image: only catalogued images may be booted by users (`leasewise image list`); "
                             "a path on the hosts is for admins")
        now = self.now()
        request = replace(request, submit_time=now)

        def submit(cluster: Cluster) -> dict[str, Any]:
            if key is not None:   # (again under the lock: the same key may come twice at once)
                answered = self._answered(cluster.store, caller, key, fingerprint)
                if answered is not None:
                    return answered
            wanted = request
            if wanted.image is not None and wanted.image.name is not None:
                wanted = replace(wanted, image=self._catalogued(wanted, cluster.store))
            answer = cluster.admit(wanted, now)
            cluster.save(now)
            if key is not None:
                cluster.store.record_submission(caller.user, key, fingerprint or "", answer, now)
            return answer

        answer = self.session.run(submit)   # (with any other submissions waiting: one commit)
        self.wake()
        return answer

    @staticmethod
    def _catalogued(request: LeaseRequest, store: Store):
        """The server's own catalogue entry for the image the client named (its paths, not the client's)."""
        name = request.image.name
        for image in store.images():
            if image.name == name:
                return image.vm_image()
        raise InvalidRequest("image", f"{name!r} is not a catalogued image")

    def leases(self, caller: Caller, states: Iterable[str] | None = None, user: str | None = None,
               everyone: bool = False, after: int | None = None, limit: int | None = None) -> list[Lease]:
        """The leases (in these states) of `user`, else of everyone with `everyone`, else the caller's own;
        oldest first. A page with `after` (ids above it) and `limit` (at most that many)."""
        return self.reader().leases(state=_lease_states(states), user=_owner(caller, user, everyone),
                                    after=after, limit=limit)

    def lease_page_json(self, caller: Caller, states: Iterable[str] | None, user: str | None, everyone: bool,
                        after: int | None, limit: int) -> str:
        """A page of `leases` as the API sends it: `{"leases": [...], "next": id or null}`, the leases as the
        codec sends them, one JSON array encoded by the store (straight from their rows), and `next` the id
        to list the following page after (null: no more)."""
        store, wanted, owner = self.reader(), _lease_states(states), _owner(caller, user, everyone)
        ids = store.lease_ids(wanted, owner, after, limit + 1)
        body = store.lease_records_json(wanted, owner, after, limit)
        return f'{{"leases":{body},"next":{ids[limit - 1] if len(ids) > limit else "null"}}}'

    def listed(self, make: Callable[[], T]) -> T:
        """`make()` (a lease list read and encoded) while no other list is being made."""
        with self._listing:
            return make()

    def lease(self, caller: Caller, lease_id: int, with_vms: bool = True) -> tuple[Lease, list[Event], list | None]:
        """The lease, its events, and its VMs as the hosts see them (None when it has none)."""
        store = self.reader()
        with store.snapshot():
            lease = self._stored(lease_id)
            events = store.events(lease_id=lease_id)
        vms = None
        if with_vms and lease.state in _VMS_EXIST:
            with self._vm_lookup() as driver:
                vms = lease_vms(lease, driver)
        return lease, events, vms

    def cancel(self, caller: Caller, lease_id: int) -> dict[str, Any]:
        lease = self._stored(lease_id)
        self._owner_check(caller, lease, "cancel")
        if lease.is_final:
            raise InvalidRequest("lease", f"lease {lease_id} is already {lease.state}")
        now = self.now()

        def cancel(cluster: Cluster) -> dict[str, Any]:
            lease = cluster.lease(lease_id)
            was_running = lease.state in RUNNING_STATES or lease.state is LeaseState.MIGRATING
            hosts = hosts_of(lease.last_vm) if was_running else []
            cluster.cancel(lease_id, now)
            cluster.save(now)
            return {"id": lease_id, "was_running": was_running, "hosts": hosts}

        answer = self.session.run(cancel)
        self.wake()
        return answer

    def extend(self, caller: Caller, lease_id: int, by: timedelta) -> dict[str, Any]:
        lease = self._stored(lease_id)
        self._owner_check(caller, lease, "extend")
        now = self.now()
        try:
            with self.session.open() as cluster:
                lease = cluster.extend(lease_id, by, now)
                vm = lease.last_vm
                end = vm.end if vm is not None and vm in cluster.table else None
                duration = lease.request.duration
                cluster.save(now)
        except InvalidRequest as exc:
            if exc.field == "duration":   # the lease would end after the year 9998: --by is absurd
                raise InvalidRequest("--by", exc.problem) from None
            if exc.field == "by":
                raise Refused(f"lease {lease_id} not extended: {exc.problem}") from None
            raise
        self.wake()
        return {"id": lease_id, "by_s": by.total_seconds(), "duration_s": duration.total_seconds(),
                "end": None if end is None else end.isoformat()}

    def access(self, caller: Caller, lease_id: int, node: int | None) -> dict[str, Any]:
        """How to reach one VM of the caller's lease: its ssh line and its console command."""
        lease = self._stored(lease_id)
        self._owner_check(caller, lease, "log into")
        if node is not None and not 0 <= node < lease.numnodes:
            raise InvalidRequest("NODE", f"lease {lease_id} has nodes 0..{lease.numnodes - 1} (got {node})")
        with self._vm_lookup() as driver:
            vm = lease_vms(lease, driver)[node or 0]
            if vm.host is None or vm.state in ("not running", "gone"):
                raise InvalidRequest("lease", f"lease {lease_id}: {vm.name} does not run ({lease.state.value})")
            try:
                console = driver.console_command(vm.name)
                console_error = None
            except (DriverError, NotImplementedError) as exc:
                console, console_error = None, str(exc)
        return {"vm": vm.to_json(), "console": console, "console_error": console_error}

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
                "leases": {str(i): what for i, what in plan.leases.items()}}

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

    def _mac_prefixes_to_avoid(self, configs: list[HostConfig]) -> set[str]:
        """Before the installation's MAC prefix is drawn (with its first hosts): the prefixes the domains on
        these hosts use, asked off the lock."""
        if self.reader().mac_prefix() is not None:
            return set()
        return mac_prefixes_in_use(configs, self.config.daemon.driver)

    def host_remove(self, caller: Caller, host: str, drain: bool) -> dict[str, Any]:
        """`host remove [--drain]`: the leases requeued, each {id, state, start, end, hosts}."""
        self._admin_check(caller, "removing hosts")
        now = self.now()
        with self.session.open() as cluster:
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
        return {"host": host, "uri": record.config.uri, "checks": run_checks(record, driver, timeout, images),
                "pairs": run_pair_checks(records, driver, timeout, host)}

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

    def events(self, caller: Caller, lease_id: int | None) -> list[Event]:
        """The event log (of one lease): what `report` is computed from."""
        store = self.reader()
        with store.snapshot():
            if lease_id is not None:
                self._stored(lease_id)
            return store.events(lease_id=lease_id)

    def plan(self, caller: Caller, start: datetime | None, end: datetime | None) -> tuple[list, list[str], dict[int, str]]:
        """The (lease, reservation) pairs meeting [start, end), the hosts, and each lease's label (`plan`):
        read from the store as `plan` on the head node reads it."""
        store = self.reader()
        with store.snapshot():
            cluster = Cluster(store, self.config)
            pairs = cluster.plan(start, end)
            hosts = list(cluster.hosts)
            labels = {lease.id: cluster.workload_id(lease) or str(lease.id) for lease, _ in pairs}
        return pairs, hosts, labels

    def calendar(self, caller: Caller, start: datetime, end: datetime) -> CalendarWindow:
        """What the web calendar draws of [start, end): the live leases' reservations copied from the
        scheduler in memory under its lock, the ended leases' from the store, and the hosts (drained,
        silent). Anyone may look, as at `plan`."""
        with self.session.read() as cluster:
            copied = Copied.of(cluster.plan(start, end), cluster.hosts.values())
        store = self.reader()
        with store.snapshot():
            ended = store.ended_leases(start, end)
            silent = store.get_meta(SILENT_HOSTS) or {}
        return copied.window(start, end, self.now(), ended, silent)

    # -- quotas (admins set them; a user may look at their own) -----------------------------------------------
    def quota_set(self, caller: Caller, subject: str, changes: dict[str, Any]) -> dict[str, Any]:
        self._admin_check(caller, "setting quotas")
        with self.session.open() as cluster:
            return set_quota(cluster.store, check_subject(subject, "SUBJECT"), changes, self.now())

    def quota_remove(self, caller: Caller, subject: str) -> None:
        self._admin_check(caller, "removing quotas")
        with self.session.open() as cluster:
            remove_quota(cluster.store, check_subject(subject, "SUBJECT"))

    def quota_list(self, caller: Caller) -> list[dict[str, Any]]:
        self._admin_check(caller, "listing every quota")
        return list_quotas(self.reader())

    def quota_show(self, caller: Caller, user: str | None) -> dict[str, Any]:
        user = check_user(user or caller.user, "USER")
        if user != caller.user and not caller.admin:
            raise NotAllowed(f"{caller.user} may see their own quotas only (not {user}'s)")
        return show_quota(self.reader(), user)

    # -- API tokens (a user makes and revokes their own; admins anyone's, and admin tokens) ---------------------
    def token_create(self, caller: Caller, user: str | None, admin: bool, expires: timedelta | None,
                     note: str) -> dict[str, Any]:
        owner = user or caller.user
        if (owner != caller.user or admin) and not caller.admin:
            raise NotAllowed(f"{caller.user} may make tokens for themselves only, and no admin tokens")
        check_note(note, "--note")
        with self.session.open() as cluster:
            text, record = create_token(cluster.store, owner, admin=admin, expires=expires, now=self.now(),
                                        note=note)
        return {"token": text, **record.public()}

    def token_list(self, caller: Caller, user: str | None) -> list[dict[str, Any]]:
        if not caller.admin:
            if user is not None and user != caller.user:
                raise NotAllowed(f"{caller.user} may list their own tokens only")
            user = caller.user
        return list_tokens(self.reader(), user, now=self.now())

    def token_state(self, token_id: int) -> str:
        """`active`, `expired`, `revoked` or `unknown`: whether a web session opened with this token goes on
        (checked at each of its requests, so a revocation ends it at once)."""
        record = self.reader().token(token_id)
        return "unknown" if record is None else token_state(record, self.now())

    def token_revoke(self, caller: Caller, token_id: int) -> dict[str, Any]:
        with self.session.open() as cluster:
            record = cluster.store.token(token_id)
            if record is None:
                raise StoreError(f"no token with id {token_id}")
            if record.user != caller.user and not caller.admin:
                raise NotAllowed(f"token {token_id} belongs to {record.user}: only they or an admin may revoke it")
            return revoke_token(cluster.store, token_id, self.now())


def _owner(caller: Caller, user: str | None, everyone: bool) -> str | None:
    """Whose leases a list shows: the named user's, everyone's (None), else the caller's own."""
    if user is not None:
        return user
    return None if everyone else caller.user


def _lease_states(states: Iterable[str] | None) -> list[str] | None:
    """The states a lease list asks for, each one checked."""
    if states is None:
        return None
    states = list(states)
    for state in states:
        if state not in {s.value for s in LeaseState}:
            raise InvalidRequest("status", f"{state!r} is not a lease state")
    return states
