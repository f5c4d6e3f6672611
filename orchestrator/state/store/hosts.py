"""The hosts the store knows: how to reach each, its capacity, and whether leases may use it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

from drivers.inventory import HostConfig
from orchestrator.model.errors import LeasewiseError
from orchestrator.model.resources import Resources
from orchestrator.model.site import SiteShape, site_shape
from orchestrator.model.timeutil import UTC, as_utc
from orchestrator.state.store.connection import StoreConnection
from orchestrator.state.store.errors import StoreError
from orchestrator.state.store.rows import decode_time, encode_json, encode_time


@dataclass(frozen=True)
class HostRecord:
    """A host as the store knows it: how to reach it, its capacity, and whether leases may use it."""

    config: HostConfig
    vcpus: int
    memory_mib: int
    available: bool
    added_at: datetime
    unavailable_from: datetime | None = None     # a drained host: leases may not use it from then on

    @property
    def name(self) -> str:
        return self.config.name

    @cached_property
    def capacity(self) -> Resources:
        # (made once per record: a submission is checked against every host's capacity)
        return Resources.of(self.vcpus, self.memory_mib)


_HOST_COLUMNS = ("name", "uri", "domain_type", "ssh", "ssh_key", "known_hosts", "migration_uri", "state_dir",
                 "shared_storage", "vcpus", "memory_mib", "available", "added_at", "unavailable_from", "network",
                 "network_type", "disk_dir", "peer_uri", "properties", "peer_ssh_key", "peer_known_hosts")


def _capacity(value: object, what: str, host: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise StoreError(f"host {host!r}: {what} must be a positive integer (got {value!r})")
    return value


class HostRepository(StoreConnection):
    """The hosts table: adding, changing, draining and forgetting hosts."""

    def add_host(self, config: HostConfig, vcpus: int, memory_mib: int, *, available: bool = True,
                 at: datetime | None = None) -> HostRecord:
        name = config.name
        record = HostRecord(config=config, vcpus=_capacity(vcpus, "vcpus", name),
                            memory_mib=_capacity(memory_mib, "memory_mib", name), available=bool(available),
                            added_at=as_utc(at, "added_at") if at is not None else datetime.now(UTC))
        values = (name, config.uri, config.domain_type, config.ssh, config.ssh_key, config.known_hosts,
                  config.migration_uri, config.state_dir, encode_json(list(config.shared_storage)), record.vcpus,
                  record.memory_mib, int(record.available), encode_time(record.added_at), None, config.network,
                  config.network_type, config.disk_dir, config.peer_uri, encode_json(dict(config.properties)),
                  config.peer_ssh_key, config.peer_known_hosts)
        self._insert_new("hosts", _HOST_COLUMNS, values, f"host {name!r}")
        return record

    def _update_host(self, name: str, sql: str, params: tuple) -> None:
        with self.transaction():
            if self._conn.execute(f"UPDATE hosts SET {sql} WHERE name = ?", (*params, name)).rowcount == 0:
                raise StoreError(f"no host named {name!r}")

    def update_host_capacity(self, name: str, vcpus: int, memory_mib: int) -> None:
        self._update_host(name, "vcpus = ?, memory_mib = ?",
                          (_capacity(vcpus, "vcpus", name), _capacity(memory_mib, "memory_mib", name)))

    def set_host_properties(self, name: str, properties: tuple[tuple[str, str], ...]) -> None:
        """Replace a host's properties (checked by the caller: `orchestrator.model.placement`)."""
        self._update_host(name, "properties = ?", (encode_json(dict(properties)),))

    def set_host_available(self, name: str, available: bool, since: datetime | None = None) -> None:
        """Mark a host (un)available to leases; `since`: from when (a drain), kept until it is available again."""
        since = as_utc(since, "since") if since is not None and not available else None
        self._update_host(name, "available = ?, unavailable_from = ?", (int(bool(available)), encode_time(since)))

    def remove_host(self, name: str) -> None:
        """Forget a host. Does not look at reservations: the caller refuses to remove a host in use."""
        with self.transaction():
            if self._conn.execute("DELETE FROM hosts WHERE name = ?", (name,)).rowcount == 0:
                raise StoreError(f"no host named {name!r}")

    def hosts(self) -> list[HostRecord]:
        """Every host, in the order they were added."""
        # (decoded once per connection until the hosts table changes, which its triggers count: every
        # submission is checked against every host, and decoding a thousand rows each time cost more than
        # the rest of the check)
        return list(self._current_hosts()[1])

    def site_shape(self) -> SiteShape:
        """The hosts' count and largest capacity (what every submission is first checked against), computed
        once per change of the hosts."""
        seen = self._current_hosts()
        decoded = self._decoded_hosts()
        if decoded[1] is None or decoded[1][0] is not seen:
            decoded[1] = (seen, site_shape(h.capacity for h in seen[1]))
        return decoded[1][1]

    def _current_hosts(self) -> tuple[int, tuple[HostRecord, ...]]:
        changes = self._conn.execute("SELECT count FROM hosts_changes").fetchone()[0]
        decoded = self._decoded_hosts()
        seen = decoded[0]
        if seen is None or seen[0] != changes:
            rows = self._conn.execute(f"SELECT {', '.join(_HOST_COLUMNS)} FROM hosts ORDER BY rowid").fetchall()
            seen = decoded[0] = (changes, tuple(self._host(row) for row in rows))
        return seen

    def share_decoded_hosts(self, other: HostRepository) -> None:
        """Keep the hosts decoded once for this connection and `other`, connections of one process to one
        file (the server's readers and its writer): each new request thread's first submission would
        otherwise decode them all again. Each keeps the count it decoded at, so a connection reading an
        older snapshot decodes its own."""
        self.__dict__["_decoded"] = other._decoded_hosts()

    def _decoded_hosts(self) -> list:
        """[(hosts_changes count, hosts decoded at it), (that pair, their SiteShape)], each None until made: a
        box, which connections may share."""
        return self.__dict__.setdefault("_decoded", [None, None])

    def host(self, name: str) -> HostRecord:
        row = self._conn.execute(f"SELECT {', '.join(_HOST_COLUMNS)} FROM hosts WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise StoreError(f"no host named {name!r}")
        return self._host(row)

    def _host(self, row: tuple) -> HostRecord:
        (name, uri, domain_type, ssh, ssh_key, known_hosts, migration_uri, state_dir, shared, vcpus, memory,
         available, added_at, unavailable_from, network, network_type, disk_dir, peer_uri, properties, peer_ssh_key,
         peer_known_hosts) = row
        try:
            config = HostConfig(name=name, uri=uri, domain_type=domain_type, ssh=ssh, ssh_key=ssh_key,
                                known_hosts=known_hosts, migration_uri=migration_uri, state_dir=state_dir,
                                shared_storage=tuple(json.loads(shared)), network=network,
                                network_type=network_type, disk_dir=disk_dir, peer_uri=peer_uri,
                                peer_ssh_key=peer_ssh_key, peer_known_hosts=peer_known_hosts,
                                properties=tuple(sorted(json.loads(properties).items())))
        except LeasewiseError as exc:
            raise StoreError(f"{self.path}: host {name!r} is invalid in the store: {exc}") from None
        return HostRecord(config=config, vcpus=vcpus, memory_mib=memory, available=bool(available),
                          added_at=decode_time(added_at), unavailable_from=decode_time(unavailable_from))
