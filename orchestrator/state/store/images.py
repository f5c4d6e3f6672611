"""The catalogue of base images a lease may boot."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime

from orchestrator.model.errors import LeasewiseError
from orchestrator.model.images import CatalogImage
from orchestrator.model.states import FINAL_STATES
from orchestrator.model.timeutil import UTC
from orchestrator.state.store.connection import StoreConnection
from orchestrator.state.store.errors import StoreError
from orchestrator.state.store.rows import decode_time, encode_json, encode_time

_IMAGE_COLUMNS = ("name", "path", "format", "login_user", "os", "kernel", "initrd", "cmdline", "size_bytes",
                  "added_at", "added_by", "checksums")
#: how a host holds an image: a copy of its own, or the file on storage it shares
HOLDINGS = ("copied", "shared")


class ImageRepository(StoreConnection):
    """The images table: catalogued base images, refused removal while a lease uses one; and which hosts
    hold a copied image (image_hosts)."""

    def add_image(self, image: CatalogImage, held_by: Mapping[str, str] | None = None) -> CatalogImage:
        """Catalogue a base image, and the hosts holding it (host -> one of HOLDINGS); `StoreError` if the
        name is taken."""
        added = image if image.added_at is not None else replace(image, added_at=datetime.now(UTC))
        values = tuple(getattr(added, c) for c in _IMAGE_COLUMNS)
        values = (*values[:9], encode_time(added.added_at), added.added_by,
                  encode_json([list(pair) for pair in added.checksums]))
        with self.transaction():
            self._insert_new("images", _IMAGE_COLUMNS, values, f"image {image.name!r}")
            for host, how in (held_by or {}).items():
                self.set_image_host(image.name, host, how)
        return added

    def set_image_host(self, name: str, host: str, how: str, at: datetime | None = None) -> None:
        """Record that `host` holds the image `name` (`how`: one of HOLDINGS)."""
        if how not in HOLDINGS:
            raise StoreError(f"how a host holds an image must be one of {', '.join(HOLDINGS)} (got {how!r})")
        self._conn.execute("INSERT INTO image_hosts (image, host, how, at) VALUES (?, ?, ?, ?) "
                           "ON CONFLICT (image, host) DO UPDATE SET how = excluded.how, at = excluded.at",
                           (name, host, how, encode_time(at or datetime.now(UTC))))

    def drop_image_host(self, name: str, host: str) -> None:
        """`host` no longer holds the image `name` (its copy is missing or wrong)."""
        self._conn.execute("DELETE FROM image_hosts WHERE image = ? AND host = ?", (name, host))

    def image_hosts(self, name: str) -> dict[str, str]:
        """host -> how it holds the image `name` (one of HOLDINGS), by host name."""
        rows = self._conn.execute("SELECT host, how FROM image_hosts WHERE image = ? ORDER BY host", (name,))
        return dict(rows.fetchall())

    def image_holders(self) -> dict[str, frozenset[str]]:
        """For each image copied to the hosts' own storage, the hosts holding it (an image on shared storage,
        which every host reads, is not listed): what the planner's image filter reads."""
        rows = self._conn.execute("SELECT i.name, h.host FROM images i LEFT JOIN image_hosts h ON h.image = i.name "
                                  "WHERE i.checksums != '[]'").fetchall()
        holders: dict[str, set[str]] = {}
        for name, host in rows:
            holders.setdefault(name, set())
            if host is not None:
                holders[name].add(host)
        return {name: frozenset(hosts) for name, hosts in holders.items()}

    def images(self) -> list[CatalogImage]:
        rows = self._conn.execute(f"SELECT {', '.join(_IMAGE_COLUMNS)} FROM images ORDER BY name").fetchall()
        return [self._image(row) for row in rows]

    def image(self, name: str) -> CatalogImage:
        row = self._conn.execute(f"SELECT {', '.join(_IMAGE_COLUMNS)} FROM images WHERE name = ?",
                                 (name,)).fetchone()
        if row is None:
            raise StoreError(f"no image named {name!r}")
        return self._image(row)

    def _image(self, row: tuple) -> CatalogImage:
        values = dict(zip(_IMAGE_COLUMNS, row))
        values["added_at"] = decode_time(values["added_at"])
        values["checksums"] = tuple(tuple(pair) for pair in json.loads(values["checksums"]))
        try:
            return CatalogImage(**values)
        except LeasewiseError as exc:
            raise StoreError(f"{self.path}: image {values['name']!r} is invalid in the store: {exc}") from None

    def leases_using_image(self, name: str) -> list[int]:
        """The leases not yet in a final state that boot the catalogued image `name`."""
        final = tuple(s.value for s in FINAL_STATES)
        rows = self._conn.execute(
            f"SELECT id FROM leases WHERE json_extract(image, '$.name') = ? "
            f"AND state NOT IN ({', '.join('?' * len(final))}) ORDER BY id", (name, *final)).fetchall()
        return [r[0] for r in rows]

    def remove_image(self, name: str) -> None:
        """Forget a catalogued image (the file stays); refused while a lease still uses it."""
        with self.transaction():
            users = self.leases_using_image(name)
            if users:
                raise StoreError(f"image {name!r} is used by lease{'s' if len(users) > 1 else ''} "
                                 f"{', '.join(map(str, users))}")
            if self._conn.execute("DELETE FROM images WHERE name = ?", (name,)).rowcount == 0:
                raise StoreError(f"no image named {name!r}")
