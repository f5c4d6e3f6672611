"""What the server does for a caller: each use case checks who may do it, then works on the one scheduler
kept in memory (writes) or on a read connection of its own thread (reads).

Writes go through the `SharedCluster`'s lock, which stands for the store's write lock in this process:
the server is the store's only writer, so a write never waits for another process, and never for a
host either (the daemon's operations run off the lock). Reads use one SQLite connection per thread (WAL:
they see the last commit and block no one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from drivers.base import Driver
from drivers.clock import Clock
from drivers.errors import DriverError
from orchestrator.model.config import Config
from orchestrator.model.errors import InvalidRequest, LeasewiseError
from orchestrator.model.lease import Lease, LeaseRequest
from orchestrator.model.states import FINAL_STATES, RUNNING_STATES, LeaseState
from orchestrator.model.timeutil import parse_time
from orchestrator.runtime.host_probe import host_rows, leases_on_hosts, probe_hosts
from orchestrator.runtime.vm_access import lease_vms
from orchestrator.service.identity import Caller, NotAllowed
from orchestrator.state.answers import affected, hosts_of, plan_snapshot, submit_answer
from orchestrator.state.cluster import Cluster, check_site_can_hold
from orchestrator.state.codec import image_json, lease_to_json
from orchestrator.state.session import SharedCluster
from orchestrator.model.quota import check_subject, check_user
from orchestrator.state.quotas import list_quotas, remove_quota, set_quota, show_quota
from orchestrator.state.store import Event, Store, StoreError
from orchestrator.state.tokens import check_note, create_token, list_tokens, revoke_token

T = TypeVar("T")

#: states in which a lease's VMs exist on hosts (so `lease show` asks the hosts about them)
_VMS_EXIST = frozenset(RUNNING_STATES) | {LeaseState.SUSPENDED_PENDING, LeaseState.SUSPENDED_QUEUED,
                                          LeaseState.SUSPENDED_SCHEDULED, LeaseState.MIGRATING}


class Refused(LeasewiseError):
    """Well-formed, but the scheduler says no (exit code 3): an extension that does not fit."""

    exit_code = 3


class LeaseService:
    def __init__(self, store: Store, config: Config, session: SharedCluster, clock: Clock, driver: Driver,
                 *, wake: Callable[[], None] = lambda: None):
        """`store`: the writer (used under the session's lock only); `wake`: tells the daemon's loop to
        step now (a lease may start at once)."""
        self.store = store
        self.config = config
        self.session = session
        self.clock = clock
        self.driver = driver
        self.wake = wake
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

    def _stored(self, lease_id: int) -> Lease:
        try:
            return self.reader().lease(lease_id)
        except StoreError:
            raise InvalidRequest("lease", f"no lease with id {lease_id}") from None

    # -- leases -------------------------------------------------------------------------------------------------
    def submit(self, caller: Caller, request: LeaseRequest) -> dict[str, Any]:
        """Admit and plan a lease for the caller; the answer of `lease submit --json`."""
        if not request.user:
            request = replace(request, user=caller.user)
        if request.user != caller.user and not caller.admin:
            raise NotAllowed(f"{caller.user} may not submit leases for {request.user} (only admins may)")
        if not caller.admin and request.image is not None and request.image.name is None:
            raise NotAllowed("image: only catalogued images may be booted by users (`leasewise image list`); "
                             "a path on the hosts is for admins")
        now = self.now()
        request = replace(request, submit_time=now)
        with self.session.open() as cluster:
            if request.image is not None and request.image.name is not None:
                request = replace(request, image=self._catalogued(request, cluster.store))
            check_site_can_hold([h.capacity for h in cluster.hosts.values()], request.numnodes, request.nodes[0])
            if request.guest is not None and request.guest.network:
                macs = cluster.store.allocate_macs(request.numnodes)
                request = replace(request, guest=replace(request.guest, macs=macs))
            before = plan_snapshot(cluster)
            lease = cluster.submit(request, now)
            answer = submit_answer(lease, affected(cluster, before, lease.id))
            cluster.save(now)
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

    def leases(self, caller: Caller, states: Iterable[str] | None = None, user: str | None = None) -> list[dict]:
        """The leases as the codec sends them (read straight from their rows)."""
        if states is not None:
            states = list(states)
            for state in states:
                if state not in {s.value for s in LeaseState}:
                    raise InvalidRequest("status", f"{state!r} is not a lease state")
        return self.reader().lease_records(states, user)

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
            vms = lease_vms(lease, self.driver)
        return lease, events, vms

    def cancel(self, caller: Caller, lease_id: int) -> dict[str, Any]:
        lease = self._stored(lease_id)
        self._owner_check(caller, lease, "cancel")
        if lease.is_final:
            raise InvalidRequest("lease", f"lease {lease_id} is already {lease.state}")
        now = self.now()
        with self.session.open() as cluster:
            lease = cluster.lease(lease_id)
            was_running = lease.state in RUNNING_STATES or lease.state is LeaseState.MIGRATING
            hosts = hosts_of(lease.last_vm) if was_running else []
            cluster.cancel(lease_id, now)
            cluster.save(now)
        self.wake()
        return {"id": lease_id, "was_running": was_running, "hosts": hosts}

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
        vm = lease_vms(lease, self.driver)[node or 0]
        if vm.host is None or vm.state in ("not running", "gone"):
            raise InvalidRequest("lease", f"lease {lease_id}: {vm.name} does not run ({lease.state.value})")
        try:
            console = self.driver.console_command(vm.name)
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
        with self.session.open() as cluster:
            records = list(cluster.hosts.values())
            usage = leases_on_hosts(cluster, now)
        infos = probe_hosts([r.config for r in records], timeout) if self.config.daemon.driver == "libvirt" else None
        return host_rows(records, usage, infos)

    def images(self, caller: Caller) -> list[dict[str, Any]]:
        """The catalogue, each image with the leases that use it (`image list`)."""
        store = self.reader()
        with store.snapshot():
            return [{**image_json(i), "leases": store.leases_using_image(i.name)} for i in store.images()]

    def image_remove(self, caller: Caller, name: str) -> None:
        self._admin_check(caller, "removing an image from the catalogue")
        with self.session.open() as cluster:
            cluster.store.remove_image(name)

    def events(self, caller: Caller, lease_id: int | None) -> list[Event]:
        """The event log (of one lease): what `report` is computed from."""
        store = self.reader()
        with store.snapshot():
            if lease_id is not None:
                self._stored(lease_id)
            return store.events(lease_id=lease_id)

    def plan(self, caller: Caller, start: datetime | None, end: datetime | None) -> dict[str, Any]:
        """The reservations meeting [start, end) with their leases, and the hosts (`plan`): read from the
        store as `plan` on the head node reads it."""
        store = self.reader()
        with store.snapshot():
            cluster = Cluster(store, self.config)
            pairs = cluster.plan(start, end)
            hosts = list(cluster.hosts)
            labels = {lease.id: cluster.workload_id(lease) or str(lease.id) for lease, _ in pairs}
        leases = {lease.id: lease for lease, _ in pairs}
        return {"hosts": hosts, "leases": [lease_to_json(l) for l in leases.values()],
                "pairs": [[lease.id, rr.id] for lease, rr in pairs], "labels": {str(k): v for k, v in labels.items()}}

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
        with self.session.open() as cluster:
            text, record = create_token(cluster.store, owner, admin=admin, expires=expires, now=self.now(),
                                        note=check_note(note, "--note"))
        return {"token": text, **record.public()}

    def token_list(self, caller: Caller, user: str | None) -> list[dict[str, Any]]:
        if not caller.admin:
            if user is not None and user != caller.user:
                raise NotAllowed(f"{caller.user} may list their own tokens only")
            user = caller.user
        return list_tokens(self.reader(), user, now=self.now())

    def token_revoke(self, caller: Caller, token_id: int) -> dict[str, Any]:
        with self.session.open() as cluster:
            record = cluster.store.token(token_id)
            if record is None:
                raise InvalidRequest("ID", f"no token with id {token_id}")
            if record.user != caller.user and not caller.admin:
                raise NotAllowed(f"token {token_id} belongs to {record.user}: only they or an admin may revoke it")
            return revoke_token(cluster.store, token_id, self.now())


def live_states() -> list[str]:
    return [s.value for s in LeaseState if s not in FINAL_STATES]


def parse_by(text: str | None) -> datetime | None:
    return parse_time(text, "by") if text else None
