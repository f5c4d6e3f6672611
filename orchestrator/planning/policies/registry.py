"""A name -> class registry; one instance per extension point (admission, preemption, host selection)."""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

from orchestrator.model.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, extension_point: str, config_key: str):
        self.extension_point = extension_point
        self.config_key = config_key
        self._classes: dict[str, type[T]] = {}

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        def decorate(cls: type[T]) -> type[T]:
            if name in self._classes:
                raise ValueError(f"{self.extension_point} policy {name!r} registered twice")
            self._classes[name] = cls
            cls.name = name  # type: ignore[attr-defined]
            return cls
        return decorate

    def create(self, name: str, **kwargs) -> T:
        try:
            cls = self._classes[name]
        except KeyError:
            known = ", ".join(sorted(self._classes))
            raise ConfigError(self.config_key, f"unknown {self.extension_point} policy {name!r} (known: {known})") from None
        return cls(**kwargs)

    def names(self) -> list[str]:
        return sorted(self._classes)
