"""The catalogue of base images a lease may boot."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from orchestrator.model.errors import LeasewiseError
from orchestrator.model.images import CatalogImage
from orchestrator.model.states import FINAL_STATES
from orchestrator.model.timeutil import UTC
from orchestrator.state.store.connection import StoreConnection
from orchestrator.state.store.errors import StoreError
from orchestrator.state.store.rows import decode_time, encode_time

_IMAGE_COLUMNS = ("name", "path", "format", "login_user", "os", "kernel", "initrd", "cmdline", "size_bytes",
                  "added_at", "added_by")


class ImageRepository(StoreConnection):
    """The images table: catalogued base images, refused removal while a lease uses one."""

    def add_image(self, image: CatalogImage) -> CatalogImage:
        """Catalogue a base image; `StoreError` if the name is taken."""
        added = image if image.added_at is not None else replace(image, added_at=datetime.now(UTC))
        values = tuple(getattr(added, c) for c in _IMAGE_COLUMNS)
        values = (*values[:9], encode_time(added.added_at), added.added_by)
        self._insert_new("images", _IMAGE_COLUMNS, values, f"image {image.name!r}")
        return added

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
