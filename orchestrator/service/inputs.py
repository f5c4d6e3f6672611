"""Input as it enters the service, checked once for every client: a host's settings and a catalogue
entry, with each problem on one line naming the argument or option the client gave it in.

The command line builds its requests with these (so a bad `--uri` is refused before any host or server
is asked) and the API turns JSON into the same values with them.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from typing import Any

from drivers.errors import DriverConfigError
from drivers.inventory import HostConfig
from orchestrator.model.errors import ConfigError, InvalidRequest, shown
from orchestrator.model.lease_fields import MAX_PATH
from orchestrator.model.placement import properties_of
from orchestrator.model.text import check_printable
from orchestrator.model.images import IMAGE_FORMATS, CatalogImage


#: a host's name: one DNS label (RFC 1123)
HOST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
SIMULATED_SCHEME = "sim"


def check_reachable(config: HostConfig, driver: str) -> None:
    """A host the server's driver can reach: a `sim://` URI only where the simulated driver is configured."""
    if driver != "simulated" and config.uri.split(":", 1)[0].lower() == SIMULATED_SCHEME:
        raise InvalidRequest("--uri", f"{shown(config.uri)} is a simulated host's, and this site's driver is "
                                      f"{driver} ([daemon] driver = \"simulated\" takes them)")


def host_config(values: dict[str, Any], option_of: Callable[[str], str] = lambda field: field) -> HostConfig:
    """A host's settings as given (options or JSON); a bad one is one line naming `option_of(field)`. A
    name is a short host name (one DNS label: it names VMs' places in every table and log); no text holds
    control or format characters."""
    name = values.get("name")
    if isinstance(name, str) and not HOST_NAME.fullmatch(name):
        raise InvalidRequest(option_of("name"), f"{shown(name)} is not a short host name (letters, digits and "
                                                "'-', at most 63, not starting or ending with '-')")
    if values.get("properties") is not None:   # (short names, checked here for every client)
        values = {**values, "properties": properties_of(values["properties"], option_of("properties"))}
    for key, value in values.items():
        if key == "properties":
            continue
        for text in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(text, str):
                check_printable(text, option_of(key), max_length=MAX_PATH, allow_empty=True)
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


#: where no disk image lives: devices and the kernel's files (/dev/zero reads as an endless raw image)
NOT_IMAGES = ("/dev/", "/proc/", "/sys/", "/run/")


def check_image_request(values: dict[str, Any]) -> None:
    """The catalogue entry's own checks, before any host is asked (one line naming the argument)."""
    path = values.get("path")
    if isinstance(path, str) and posixpath.normpath(path).startswith(NOT_IMAGES):
        raise InvalidRequest("PATH", f"{shown(path)} is a device or a kernel file, not a disk image")
    fmt = values.get("format")
    if fmt is not None and fmt not in IMAGE_FORMATS:
        raise InvalidRequest("--format", f"must be one of {', '.join(IMAGE_FORMATS)} (got {fmt!r})")
    try:
        CatalogImage(**{**values, "format": fmt or "qcow2"})
    except InvalidRequest as exc:
        raise InvalidRequest(image_option(exc.field), exc.problem) from None
    except TypeError as exc:   # an unknown key (JSON from another client)
        raise InvalidRequest("image", str(exc)) from None
