"""The CLI's own store, called as the server is called: `LocalBackend` has the `Client`'s methods, so a
command makes one call (`backend.host_add(...)`) whether a server answers it or the store at hand does.

Both run the same use cases (`orchestrator.service.operations.LeaseService`); here over a cluster rebuilt
from the store in each transaction, as the caller who can write the store and so is trusted with it (an
admin, `identity.local_caller`). Hosts are asked before the write lock is taken, as on the server.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from drivers.inventory import HostConfig
from orchestrator.cli import common
from orchestrator.config import Config
from orchestrator.model.timeutil import parse_time
from orchestrator.service.identity import local_caller
from orchestrator.service.operations import LeaseService
from orchestrator.state.session import FreshCluster
from orchestrator.state.store import Store


class _CommandClock:
    """The commands' own clock (`common.now`, which tests fix), as the service reads a clock."""

    moves_by_itself = True

    def now(self) -> datetime:
        return common.now()


class LocalBackend:
    def __init__(self, state: Path | None, config: Config):
        self._path = common.store_path(state, config)
        self._config = config
        self._store: Store | None = None
        self._service: LeaseService | None = None
        self._caller = local_caller(config.auth.admin_group)

    def __enter__(self) -> "LocalBackend":
        self._store = Store.open(self._path)
        self._service = LeaseService(self._store, self._config, FreshCluster(self._store, self._config),
                                     _CommandClock(), None)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._service is not None:
            self._service.close()
        if self._store is not None:
            self._store.close()

    @property
    def service(self) -> LeaseService:
        assert self._service is not None, "use the backend as a context manager"
        return self._service

    # -- the Client's methods --------------------------------------------------------------------------------
    def host_add(self, config: HostConfig, cpus: int | None, memory: int | None, timeout: float) -> dict[str, Any]:
        return self.service.host_add(self._caller, config, cpus, memory, timeout)

    def host_import(self, configs: list[HostConfig], cpus: int | None, memory: int | None, timeout: float,
                    source: str) -> dict[str, Any]:
        return self.service.host_import(self._caller, configs, cpus, memory, timeout, source)

    def host_remove(self, host: str, drain: bool) -> dict[str, Any]:
        return self.service.host_remove(self._caller, host, drain)

    def host_check(self, host: str, timeout: float) -> dict[str, Any]:
        return self.service.host_check(self._caller, host, timeout)

    def drain(self, host: str, by: str | None) -> dict[str, Any]:
        return self.service.drain(self._caller, host, parse_time(by, "--by") if by else None)

    def undrain(self, host: str) -> dict[str, Any]:
        return self.service.undrain(self._caller, host)

    def image_add(self, values: Mapping[str, Any]) -> dict[str, Any]:
        return self.service.image_add(self._caller, dict(values))

    def image_remove(self, name: str) -> None:
        self.service.image_remove(self._caller, name)


def backend(server: str | None, state: Path | None, config: Config):
    """The configured server's client, else the local store: both used as `with backend(...) as b`."""
    remote = common.client(server, config)
    return remote if remote is not None else LocalBackend(state, config)
