"""Input as it enters the service, checked once for every client: a host's settings and a catalogue
entry, with each problem on one line naming the argument or option the client gave it in.

The command line builds its requests with these (so a bad `--uri` is refused before any host or server
is asked) and the API turns JSON into the same values with them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drivers.errors import DriverConfigError
from drivers.inventory import HostConfig
from orchestrator.model.errors import ConfigError, InvalidRequest
from orchestrator.model.images import IMAGE_FORMATS, CatalogImage


def host_config(values: dict[str, Any], option_of: Callable[[str], str] = lambda field: field) -> HostConfig:
    """A host's settings as given (options or JSON); a bad one is one line naming `option_of(field)`."""
    try:
        return HostConfig(**values)
    except (ConfigError, DriverConfigError) as exc:
        raise InvalidRequest(option_of(exc.field), exc.problem) from None
    except TypeError as exc:   # an unknown key (JSON from another client)
        raise InvalidRequest("host", str(exc)) from None


def image_option(field: str) -> str:
    """The `image add` argument or option a field of the catalogue entry comes from."""
    return {"name": "NAME", "path": "PATH", "os": "--os", "login_user": "--login-user", "format": "--format",
            "kernel": "--kernel", "initrd": "--initrd", "size": "PATH"}.get(field, field)


def check_image_request(values: dict[str, Any]) -> None:
    """The catalogue entry's own checks, before any host is asked (one line naming the argument)."""
    fmt = values.get("format")
    if fmt is not None and fmt not in IMAGE_FORMATS:
        raise InvalidRequest("--format", f"must be one of {', '.join(IMAGE_FORMATS)} (got {fmt!r})")
    try:
        CatalogImage(**{**values, "format": fmt or "qcow2"})
    except InvalidRequest as exc:
        raise InvalidRequest(image_option(exc.field), exc.problem) from None
    except TypeError as exc:   # an unknown key (JSON from another client)
        raise InvalidRequest("image", str(exc)) from None
