"""The CLI's own store, called as the server is called: `LocalBackend` answers a command's one call with
the server's use cases (`operations.LeaseService`) over a cluster rebuilt from the store in each
transaction, as the caller who can write the store and so is trusted with it (an admin,
`identity.local_caller`).

What the server has and a command on its own store has not, this adds: a driver made for the call when a
lease's VMs are looked at (the simulated one reads the hosts `leasewise run` keeps next to the store), and
a look at every host before a lease naming a catalogued image is stored (its VMs would otherwise start
on some hosts and fail on others). Commands that only read create no store: an absent one answers as an
empty one would, or `NoStore` where there is nothing to show; one named by `--state` must exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from drivers.base import Driver
from drivers.clock import Clock
from drivers.errors import DriverError
from drivers.inventory import HostConfig
from orchestrator.config import Config
from orchestrator.model.errors import InvalidRequest, LeasewiseError
from orchestrator.model.lease import Lease, LeaseRequest, VMImage
from orchestrator.model.timeutil import parse_duration, parse_time
from orchestrator.runtime.host_admin import hosts_driver, read_on_hosts
from orchestrator.runtime.image_copies import CopyProgress
from orchestrator.runtime.vm_access import vm_access_from_json
from orchestrator.service.backend import PAGE, Access, NoStore, VMAccess
from orchestrator.service.identity import local_caller
from orchestrator.service.models import EndChange, FreeQuery, LeaseSubmission, Shortening
from orchestrator.service.models import responses as answers
from orchestrator.service.models.responses import shaped
from orchestrator.service.operations import LeaseService
from orchestrator.state.session import FreshCluster
from orchestrator.state.store import Event, Store, default_store_path


def store_path(state: Path | None, config: Config) -> Path:
    """The store a command works on: `--state`, else `[daemon] store`, else the user's default."""
    if state is not None:
        return Path(state)
    if config.daemon.store:
        return Path(config.daemon.store)
    return default_store_path()


def inventory_driver(inventory: Path):
    """The libvirt driver over an inventory's hosts: for what works on hosts without a store (`migrate`
    by hand, and its dry run reading a VM)."""
    from drivers.inventory import load_inventory
    from orchestrator.runtime.driver_factory import make_driver

    try:
        return make_driver("libvirt", load_inventory(inventory))
    except (DriverError, ValueError) as exc:
        raise LeasewiseError(str(exc)) from None


def simulated_hosts_path(store: Path) -> Path:
    """Where the simulated driver keeps its hosts between commands (next to the store), so `run` and
    `lease show` / `lease ssh` see the same simulated VMs."""
    return store.with_suffix(".hosts.json")


class LocalBackend:
    def __init__(self, path: Path, config: Config, clock: Clock, *, named_by: str | None = None):
        """`named_by`: the option that named the store (it must then exist), None for the default one."""
        self.path = path
        self._config = config
        self._clock = clock
        self._named_by = named_by
        self._caller = local_caller(config.auth.admin_group)
        self._store: Store | None = None
        self._service: LeaseService | None = None

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._service is not None:
            self._service.close()
        if self._store is not None:
            self._store.close()

    # -- the store ---------------------------------------------------------------------------------------------
    def _writing(self) -> LeaseService:
        """The use cases over the store, which is created if it is not there yet."""
        if self._service is None:
            store = self._store = Store.open(self.path)
            self._service = LeaseService(store, self._config, FreshCluster(store, self._config), self._clock, None,
                                         vms_driver=lambda: hosts_driver(store.hosts(), self._config.daemon.driver,
                                                                         simulated_hosts_path(self.path)),
                                         one_connection=True)
        return self._service

    def _reading(self, what: str) -> LeaseService:
        """The use cases over a store that exists: `NoStore` (naming `what` was looked for) if the default
        store is not there yet, one line naming the option if the store it named is not."""
        if self._service is None and not self.path.exists():
            if self._named_by is not None:
                raise InvalidRequest(self._named_by, f"{self.path} does not exist")
            raise NoStore(self.path, what)
        return self._writing()

    def _exists(self) -> bool:
        """Whether there is a store to read (one named but absent is an error)."""
        try:
            self._reading("")
        except NoStore:
            return False
        return True

    # -- leases ------------------------------------------------------------------------------------------------
    def whoami(self) -> dict[str, Any]:
        me = self._caller
        return shaped(answers.Whoami, {"user": me.user, "admin": me.admin, "groups": sorted(me.groups), "via": me.via})

    def submit(self, submission: LeaseSubmission) -> dict[str, Any]:
        """The use case's submission, with a look at every host before a lease naming a catalogued image is
        stored."""
        service = self._writing()

        def readable(request: LeaseRequest) -> None:
            if request.image is not None and request.image.name is not None:
                self._readable_everywhere(service, request.image)

        return shaped(answers.SubmitAnswer, service.submit(self._caller, submission, check=readable))

    def _readable_everywhere(self, service: LeaseService, image: VMImage) -> None:
        """Refuse a lease whose catalogued image some available host cannot read, before anything is
        written: its VMs would otherwise start on some hosts and fail on others. An image copied to the
        hosts' own storage is asked of the hosts holding it (the planner places its VMs there only)."""
        store = service.reader()
        with store.snapshot():
            records = [r for r in store.hosts() if r.available]
            holders = store.image_holders().get(image.name) if image.name is not None else None
        if holders is not None:
            records = [r for r in records if r.name in holders]
            if not records:
                raise InvalidRequest("image", f"{image.name}: no available host holds a copy of it "
                                              f"(`leasewise image sync {image.name}`)")
        if not records:
            return
        driver: Driver = hosts_driver(records, self._config.daemon.driver)
        try:
            seen = read_on_hosts(driver, [r.name for r in records], str(image.disk))
        finally:
            driver.close()
        for host, what in seen.items():
            if isinstance(what, str):
                raise InvalidRequest("image", f"{image.name} ({image.disk}) cannot be read on {host}: {what}")

    def lease_page(self, states: list[str] | None = None, user: str | None = None, everyone: bool = False,
                   after: int | None = None, limit: int | None = None) -> tuple[list[Lease], int | None]:
        if not self._exists():
            return [], None
        wanted = PAGE if limit is None else limit
        page = self._writing().leases(self._caller, states, user, everyone, after, wanted + 1)
        return page[:wanted], (page[wanted - 1].id if len(page) > wanted else None)

    def leases(self, states: list[str] | None = None, user: str | None = None,
               everyone: bool = False) -> list[Lease]:
        return self._writing().leases(self._caller, states, user, everyone) if self._exists() else []

    def lease(self, lease_id: int, vms: bool = True) -> tuple[Lease, list[Event], list[VMAccess] | None]:
        return self._reading(_no_lease(lease_id)).lease(self._caller, lease_id, vms)

    def cancel(self, lease_id: int) -> dict[str, Any]:
        return shaped(answers.Cancelled, self._reading(_no_lease(lease_id)).cancel(self._caller, lease_id))

    def extend(self, lease_id: int, by: str) -> dict[str, Any]:
        return shaped(answers.Extended, self._reading(_no_lease(lease_id)).extend(self._caller, lease_id,
                                                                           parse_duration(by, "--by")))

    def shorten(self, lease_id: int, change: Shortening) -> dict[str, Any]:
        return shaped(answers.Reshaped, self._reading(_no_lease(lease_id)).shorten(self._caller, lease_id, change))

    def update(self, lease_id: int, change: EndChange) -> dict[str, Any]:
        return shaped(answers.Reshaped, self._reading(_no_lease(lease_id)).update(self._caller, lease_id, change))

    def free_windows(self, query: FreeQuery) -> dict[str, Any]:
        return shaped(answers.FreeWindows,
                      self._reading("no hosts: add one with `leasewise host add`").free_windows(self._caller, query))

    def access(self, lease_id: int, node: int | None) -> Access:
        answer = shaped(answers.AccessAnswer, self._reading(_no_lease(lease_id)).access(self._caller, lease_id, node))
        return Access(vm_access_from_json(answer["vm"]), answer["console"], answer["console_error"])

    def events(self, lease_id: int | None) -> list[Event]:
        return self._reading("no events").events(self._caller, lease_id)

    def plan(self, start: str | None, end: str | None) -> tuple[list, list[str], dict[int, str]]:
        return self._reading("nothing planned").plan(self._caller, parse_time(start, "--from") if start else None,
                                                     parse_time(end, "--to") if end else None)

    # -- hosts and images --------------------------------------------------------------------------------------
    def hosts(self, timeout: float) -> list[dict[str, Any]]:
        rows = self._writing().hosts(self._caller, timeout) if self._exists() else []
        return shaped(answers.HostList, {"hosts": rows})["hosts"]

    def host_add(self, config: HostConfig, cpus: int | None, memory: int | None, timeout: float) -> dict[str, Any]:
        return shaped(answers.HostAdded, self._writing().host_add(self._caller, config, cpus, memory, timeout))

    def host_import(self, configs: list[HostConfig], cpus: int | None, memory: int | None, timeout: float,
                    source: str) -> dict[str, Any]:
        done = self._writing().host_import(self._caller, configs, cpus, memory, timeout, source)
        return shaped(answers.HostsImported, done)

    def host_set(self, host: str, properties: dict[str, str], unset: list[str]) -> dict[str, Any]:
        return shaped(answers.HostPropertiesSet,
                      self._reading(_no_host(host)).host_set(self._caller, host, properties, unset))

    def host_remove(self, host: str, drain: bool) -> dict[str, Any]:
        return shaped(answers.HostRemoved, self._reading(_no_host(host)).host_remove(self._caller, host, drain))

    def host_check(self, host: str, timeout: float) -> dict[str, Any]:
        return shaped(answers.HostChecked, self._reading(_no_host(host)).host_check(self._caller, host, timeout))

    def drain(self, host: str, by: str | None) -> dict[str, Any]:
        return shaped(answers.Drained, self._reading(_no_host(host)).drain(self._caller, host,
                                                                   parse_time(by, "--by") if by else None))

    def undrain(self, host: str) -> dict[str, Any]:
        return shaped(answers.Undrained, self._reading(_no_host(host)).undrain(self._caller, host))

    def images(self) -> list[dict[str, Any]]:
        images = self._writing().images(self._caller) if self._exists() else []
        return shaped(answers.ImageList, {"images": images})["images"]

    def image_add(self, values: Mapping[str, Any], progress: CopyProgress | None = None) -> dict[str, Any]:
        return shaped(answers.ImageAdded, self._writing().image_add(self._caller, dict(values), progress))

    def image_sync(self, name: str, host: str | None = None, progress: CopyProgress | None = None) -> dict[str, Any]:
        return shaped(answers.ImageSynced,
                      self._reading(f"no image named {name!r}").image_sync(self._caller, name, host, progress))

    def image_remove(self, name: str) -> None:
        self._reading(f"no image named {name!r}").image_remove(self._caller, name)

    # -- quotas and tokens -------------------------------------------------------------------------------------
    def quota_set(self, subject: str, changes: Mapping[str, Any]) -> dict[str, Any]:
        return shaped(answers.QuotaSet, self._writing().quota_set(self._caller, subject, dict(changes)))

    def quota_remove(self, subject: str) -> None:
        self._reading(f"no quota for {subject!r}").quota_remove(self._caller, subject)

    def quota_list(self) -> list[dict[str, Any]]:
        quotas = self._writing().quota_list(self._caller) if self._exists() else []
        return shaped(answers.QuotaList, {"quotas": quotas})["quotas"]

    def quota_show(self, user: str) -> dict[str, Any]:
        if not self._exists():   # nothing is held, and nothing limits anyone
            nothing = {"vcpus": 0, "memory_mib": 0, "vms": 0}
            return shaped(answers.QuotaShown, {"user": user, "groups": [], "holding": nothing, "quotas": []})
        return shaped(answers.QuotaShown, self._writing().quota_show(self._caller, user))

    def token_create(self, user: str | None, admin: bool, expires: timedelta | None, note: str) -> dict[str, Any]:
        return shaped(answers.TokenMade, self._writing().token_create(self._caller, user, admin, expires, note))

    def token_list(self, user: str | None) -> list[dict[str, Any]]:
        tokens = self._writing().token_list(self._caller, user) if self._exists() else []
        return shaped(answers.TokenList, {"tokens": tokens})["tokens"]

    def token_revoke(self, token_id: int) -> dict[str, Any]:
        revoked = self._reading(f"no token with id {token_id}").token_revoke(self._caller, token_id)
        return shaped(answers.TokenRevoked, revoked)


def _no_lease(lease_id: int) -> str:
    return f"lease: no lease with id {lease_id}"


def _no_host(host: str) -> str:
    return f"no host named {host!r}"
