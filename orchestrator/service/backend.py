"""What a command of the CLI works on: one interface, answered by a server (`client.Client`) or by the
store at hand (`local.LocalBackend`).

Both run the same use cases (`operations.LeaseService`) and answer in the same shapes, so a command is
parse, one call on a backend, render, whichever answers it: leases as `Lease`s, a lease's VMs as
`VMAccess`es, events as `Event`s (rebuilt from the API's `LeaseRecord`s and `EventRecord`s), every
other answer as the JSON data of the API's answer model for it, read through that model by both
(`models.responses.shaped`). A lease is submitted as the API's `LeaseSubmission`, which the use case
checks (`LeaseService.submit`) whichever backend answers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from drivers.inventory import HostConfig
from orchestrator.model.errors import InvalidRequest, LeasewiseError
from orchestrator.model.images import CatalogImage
from orchestrator.model.lease import Lease, VMImage
from orchestrator.runtime.image_copies import CopyProgress
from orchestrator.runtime.vm_access import VMAccess
from orchestrator.state.store import Event

if TYPE_CHECKING:
    from orchestrator.service.models import EndChange, FreeQuery, LeaseSubmission, Shortening

__all__ = ["Access", "Backend", "Event", "NoStore", "VMAccess", "catalogue"]

#: a catalogued image's name -> what a lease naming it boots (`InvalidRequest` for an unknown name)
ImageResolver = Callable[[str], VMImage]


@dataclass(frozen=True)
class Access:
    """How to reach one VM of a lease: the VM, and the command that attaches to its console (or why
    there is none)."""

    vm: VMAccess
    console: list[str] | None
    console_error: str | None



#: leases a page of a lease list holds unless asked otherwise, and the most it may hold (the API's limit)
PAGE = 100
MAX_PAGE = 1000

class NoStore(LeasewiseError):
    """The CLI's own store does not exist yet (and no `--state` named it): nothing is stored, planned or
    enacted. `path` is where it would be; the message says what was looked for."""

    def __init__(self, path: Path, what: str):
        super().__init__(f"{what} (there is no store at {path})")
        self.path = path


def catalogue(images: Callable[[], list[CatalogImage]], none_yet: str) -> ImageResolver:
    """Resolves an image's name through `images()` (asked when a name is given); `none_yet` says what to
    do when there is none."""

    def resolve(name: str) -> VMImage:
        known = images()
        for image in known:
            if image.name == name:
                return image.vm_image()
        names = ", ".join(i.name for i in known) or none_yet
        raise InvalidRequest("image", f"{name!r} is neither a catalogued image nor an absolute path "
                                      f"(catalogued: {names})")

    return resolve


class Backend(Protocol):
    """The use cases a command calls, with the caller bound in (the server knows who calls; the local
    store trusts whoever can write it). Used as `with backend as b:`."""

    def __enter__(self) -> Backend: ...

    def __exit__(self, *exc: object) -> None: ...

    def whoami(self) -> dict[str, Any]: ...

    # -- leases
    def submit(self, submission: LeaseSubmission) -> dict[str, Any]: ...

    def lease_page(self, states: list[str] | None = None, user: str | None = None, everyone: bool = False,
                   after: int | None = None, limit: int | None = None) -> tuple[list[Lease], int | None]:
        """A page of leases by id (the caller's own unless `user` or `everyone`; `limit`, default PAGE),
        and the id to list the next page `after` (None: no more)."""

    def leases(self, states: list[str] | None = None, user: str | None = None,
               everyone: bool = False) -> list[Lease]:
        """Every such lease, page after page."""

    def lease(self, lease_id: int, vms: bool = True) -> tuple[Lease, list[Event], list[VMAccess] | None]: ...

    def cancel(self, lease_id: int) -> dict[str, Any]: ...

    def extend(self, lease_id: int, by: str) -> dict[str, Any]: ...

    def shorten(self, lease_id: int, change: Shortening) -> dict[str, Any]: ...

    def update(self, lease_id: int, change: EndChange) -> dict[str, Any]: ...

    def free_windows(self, query: FreeQuery) -> dict[str, Any]:
        """The next windows in which a lease of the query's size would fit (`plan --free`)."""

    def access(self, lease_id: int, node: int | None) -> Access: ...

    def events(self, lease_id: int | None) -> list[Event]: ...

    def plan(self, start: str | None, end: str | None) -> tuple[list, list[str], dict[int, str]]: ...

    # -- hosts and images
    def hosts(self, timeout: float) -> list[dict[str, Any]]: ...

    def host_add(self, config: HostConfig, cpus: int | None, memory: int | None, timeout: float) -> dict[str, Any]: ...

    def host_import(self, configs: list[HostConfig], cpus: int | None, memory: int | None, timeout: float,
                    source: str) -> dict[str, Any]: ...

    def host_set(self, host: str, properties: dict[str, str], unset: list[str]) -> dict[str, Any]: ...

    def host_remove(self, host: str, drain: bool) -> dict[str, Any]: ...

    def host_check(self, host: str, timeout: float) -> dict[str, Any]: ...

    def drain(self, host: str, by: str | None) -> dict[str, Any]: ...

    def undrain(self, host: str) -> dict[str, Any]: ...

    def images(self) -> list[dict[str, Any]]: ...

    def image_add(self, values: Mapping[str, Any], progress: CopyProgress | None = None) -> dict[str, Any]: ...

    def image_sync(self, name: str, host: str | None = None, progress: CopyProgress | None = None) -> dict[str, Any]: ...

    def image_remove(self, name: str) -> None: ...

    # -- quotas and tokens
    def quota_set(self, subject: str, changes: Mapping[str, Any]) -> dict[str, Any]: ...

    def quota_remove(self, subject: str) -> None: ...

    def quota_list(self) -> list[dict[str, Any]]: ...

    def quota_show(self, user: str) -> dict[str, Any]: ...

    def token_create(self, user: str | None, admin: bool, expires: timedelta | None, note: str) -> dict[str, Any]: ...

    def token_list(self, user: str | None) -> list[dict[str, Any]]: ...

    def token_revoke(self, token_id: int) -> dict[str, Any]: ...
