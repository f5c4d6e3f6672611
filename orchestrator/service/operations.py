"""What the server does for a caller: each use case checks who may do it, then works on the one scheduler
kept in memory (writes) or on a read connection of its own thread (reads).

Writes go through the `SharedCluster`'s lock, which stands for the store's write lock in this process:
the server is the store's only writer, so a write never waits for another process, and never for a
host either (the daemon's operations run off the lock). Reads use one SQLite connection per thread (WAL:
they see the last commit and block no one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from drivers.base import Driver
from drivers.clock import Clock
from drivers.errors import DriverError
from orchestrator.config import Config
from orchestrator.model.errors import InvalidRequest
from orchestrator.model.lease import Lease, LeaseRequest, VMImage
from orchestrator.model.resources import Resources
from orchestrator.model.site import check_site_can_hold
from orchestrator.model.lease_fields import InlineGuest, request_from_fields
from orchestrator.model.placement import Placement, refusal, unknown_keys
from orchestrator.model.states import RUNNING_STATES, LeaseState
from orchestrator.model.timeutil import ZERO, iso, parse_time, positive_duration
from orchestrator.runtime.host_watch import SILENT_HOSTS
from orchestrator.runtime.vm_access import lease_vms
from orchestrator.service.calendar import CalendarWindow, Copied
from orchestrator.service.host_use_cases import HostUseCases
from orchestrator.service.identity import Caller, NotAllowed, Refused
from orchestrator.service.backend import catalogue
from orchestrator.service.limits import SubmissionRate
from orchestrator.service.models import EndChange, FreeQuery, LeaseSubmission, Shortening
from orchestrator.state.answers import hosts_of
from orchestrator.state.cluster import Cluster
from orchestrator.state.session import ClusterSession
from orchestrator.model.quota import check_subject, check_user
from orchestrator.state.quotas import list_quotas, remove_quota, set_quota, show_quota
from orchestrator.state.store import Event, HostRecord, Store, StoreError
from orchestrator.state.tokens import check_note, create_token, list_tokens, revoke_token, token_state

T = TypeVar("T")

#: states in which a lease's VMs exist on hosts (so `lease show` asks the hosts about them)
_VMS_EXIST = frozenset(RUNNING_STATES) | {LeaseState.SUSPENDED_PENDING, LeaseState.SUSPENDED_QUEUED,
                                          LeaseState.SUSPENDED_SCHEDULED, LeaseState.MIGRATING}


def check_placement(request: LeaseRequest, hosts: Mapping[str, Mapping[str, str]],
                    capacity: Mapping[str, Resources]) -> None:
    """A constraint on a property no host has is bad input (a typo: exit 2); constraints no host meets, or
    more VMs to spread than hosts that meet them, are refused (exit 3) with the reason."""
    assert request.placement is not None
    unknown = unknown_keys(request.placement, hosts)
    if unknown:
        known = sorted({k for props in hosts.values() for k in props})
        raise InvalidRequest("where", f"no host has a property {unknown[0]!r} (known: "
                                      f"{', '.join(known) if known else 'none: `leasewise host set NAME --property KEY=VALUE`'})")
    why = refusal(request.placement, request.nodes, hosts, capacity)
    if why is not None:
        raise Refused(f"lease not submitted: {why}")


def whole_host(placement: Placement, hosts: list[HostRecord]) -> Resources:
    """The size of an exclusive VM given no `--cpus`/`--memory`: the smallest host the placement allows
    (on a site of alike hosts, the whole host)."""
    allowed = [h.capacity for h in hosts if placement.admits(h.config.property_map)]
    if not allowed:
        raise Refused(f"lease not submitted: no host meets {', '.join(map(str, placement.where))}")
    return min(allowed, key=lambda c: (c.cpu, c.memory))


class LeaseService(HostUseCases):
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
            store = Store.open(self.store.path, checked=True)   # (by the server's writer, as it opened)
            store.share_decoded_hosts(self.store)
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
            hosts = store.hosts()
            site = store.site_shape()
        resolve = catalogue(lambda: images, "none; an admin adds them with `leasewise image add`")
        request = request_from_fields(submission.values(), self.now(), default_user=caller.user,
                                      guest=InlineGuest(), images=resolve,
                                      site=lambda n, node: check_site_can_hold(site, n, node),
                                      whole_host=lambda p: whole_host(p, hosts))
        if request.placement is not None:
            check_placement(request, {h.name: h.config.property_map for h in hosts},
                            {h.name: h.capacity for h in hosts})
        return request

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
                wanted = replace(wanted, image=self._catalogued(wanted.image.name, cluster.store))
            answer = cluster.admit(wanted, now)
            cluster.save(now)
            if key is not None:
                cluster.store.record_submission(caller.user, key, fingerprint or "", answer, now)
            return answer

        answer = self.session.run(submit)   # (with any other submissions waiting: one commit)
        self.wake()
        return answer

    @staticmethod
    def _catalogued(name: str, store: Store) -> VMImage:
        """The server's own catalogue entry for the image the client named (its paths, not the client's)."""
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
        """A page of `leases` as the API sends it (`LeasePage`): `{"leases": [...], "next": id or null}`, the
        leases as the codec sends them (`LeaseRecord`), one JSON array encoded by the store (straight from
        their rows), and `next` the id to list the following page after (null: no more)."""
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
        def longer(cluster: Cluster, now: datetime) -> Lease:
            try:
                return cluster.extend(lease_id, by, now)
            except InvalidRequest as exc:
                if exc.field == "duration":   # the lease would end after the year 9998: --by is absurd
                    raise InvalidRequest("--by", exc.problem) from None
                raise

        return {**self._reshape(caller, lease_id, "extend", longer), "by_s": by.total_seconds()}

    def shorten(self, caller: Caller, lease_id: int, change: Shortening) -> dict[str, Any]:
        """`lease shorten --by D | --to T`: capacity it frees goes at once to the plan and the queue."""
        by = None if change.by is None else positive_duration(change.by, "by")
        to = None if change.to is None else parse_time(change.to, "to")

        def shorter(cluster: Cluster, now: datetime) -> Lease:
            if by is not None:
                amount = by
            else:
                assert to is not None   # (a Shortening has --by or --to)
                amount = self._end_of(cluster, lease_id, "to") - to
            if amount <= ZERO:
                raise InvalidRequest("to", f"{iso(to)} is not before the planned end "
                                           f"({iso(self._end_of(cluster, lease_id, 'to'))}): `lease update --end` "
                                           "makes a lease longer")
            return cluster.shorten(lease_id, amount, now)

        return self._reshape(caller, lease_id, "shorten", shorter)

    def update(self, caller: Caller, lease_id: int, change: EndChange) -> dict[str, Any]:
        """`lease update --end T`: the planned end moved to T, earlier (as `shorten`) or later (as `extend`)."""
        end = parse_time(change.end, "end")

        def moved(cluster: Cluster, now: datetime) -> Lease:
            delta = end - self._end_of(cluster, lease_id, "end")
            if delta > ZERO:
                return cluster.extend(lease_id, delta, now)
            if delta < ZERO:
                return cluster.shorten(lease_id, -delta, now)
            return cluster.lease(lease_id)

        return self._reshape(caller, lease_id, "update", moved)

    @staticmethod
    def _end_of(cluster: Cluster, lease_id: int, field: str) -> datetime:
        try:
            return cluster.scheduler.planned_end(lease_id)
        except InvalidRequest as exc:
            raise InvalidRequest(field, exc.problem) from None

    def _reshape(self, caller: Caller, lease_id: int, verb: str,
                 change: Callable[[Cluster, datetime], Lease]) -> dict[str, Any]:
        """A lease's length changed by `change(cluster, now)` for its owner: the answer says its duration and
        planned end now; the scheduler's refusal (it does not fit, it would end before now) is `Refused`."""
        lease = self._stored(lease_id)
        self._owner_check(caller, lease, verb)
        now = self.now()
        done = {"extend": "extended", "shorten": "shortened", "update": "updated"}[verb]
        try:
            with self.session.open() as cluster:
                lease = change(cluster, now)
                vm = lease.last_vm
                end = vm.end if vm is not None and vm in cluster.table else None
                duration = lease.request.duration
                cluster.save(now)
        except InvalidRequest as exc:
            if exc.field == "by":
                raise Refused(f"lease {lease_id} not {done}: {exc.problem}") from None
            raise
        self.wake()
        return {"id": lease_id, "duration_s": duration.total_seconds(),
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

    def free_windows(self, caller: Caller, query: FreeQuery) -> dict[str, Any]:
        """`plan --free`: the next windows in which a lease of this size would fit as an advance reservation
        (its request checked as a submission's is); anyone may look, as at `plan`."""
        store = self.reader()
        with store.snapshot():
            hosts = store.hosts()
            site = store.site_shape()
        now = self.now()
        request = request_from_fields(query.values(), now, default_user=caller.user,
                                      site=lambda n, node: check_site_can_hold(site, n, node),
                                      whole_host=lambda p: whole_host(p, hosts))
        if request.placement is not None:
            check_placement(request, {h.name: h.config.property_map for h in hosts},
                            {h.name: h.capacity for h in hosts})
        with self.session.read() as cluster:
            windows = cluster.free_windows(request, query.count, now)
        return {"nodes": request.numnodes, "cpus": request.nodes[0].vcpus, "memory_mib": request.nodes[0].memory,
                "duration_s": request.duration.total_seconds(), "not_before": iso(request.start),
                "not_after": iso(request.not_after),
                "windows": [{"start": iso(w.start), "latest_end": iso(w.latest_end),
                             "latest_start": iso(None if w.latest_end is None else w.latest_end - request.duration),
                             "hosts": w.hosts} for w in windows],
                **({} if request.placement is None else {"placement": request.placement.describe()})}

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
