"""The `leasewise` command line (typer + rich).

The app and its error handling are in `orchestrator.cli.application`; each command (or group of commands) lives
in a module of its own and registers itself on that app when imported. `main`, the console script,
imports only the modules of the command it is asked to run, so that `leasewise simulate` does not first
load the server, the sweeps and the libvirt driver; `app` (typer's test runner) and `leasewise --help`,
or a command name it does not know, have every command, in the order of `COMMANDS`.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.cli.application import ErrorLineTyper

#: each top-level command or group -> the modules that register it (`lease ssh|console` are in access),
#: in the order help lists them (typer lists single commands before groups)
COMMANDS: dict[str, tuple[str, ...]] = {
    "migrate": ("migrate",),
    "plan": ("plan",),
    "report": ("report",),
    "run": ("run",),
    "serve": ("serve",),
    "whoami": ("serve",),
    "simulate": ("simulate",),
    "image": ("images",),
    "lease": ("access", "leases"),
    "calibrate": ("calibrate", "calibrate_show"),
    "host": ("hosts",),
    "quota": ("quotas",),
    "sweep": ("sweep",),
    "token": ("tokens",),
}


def load(names: list[str] | None = None) -> ErrorLineTyper:
    """The app with the commands `names` (None: all of them) registered on it."""
    modules = [m for name in (names if names is not None else COMMANDS) for m in COMMANDS[name]]
    for module in dict.fromkeys(modules):
        importlib.import_module(f"orchestrator.cli.{module}")
    from orchestrator.cli.application import app  # noqa: PLC0415

    return app


def main() -> None:
    """Console-script entry point: the command named first on the command line, else every command."""
    name = sys.argv[1] if len(sys.argv) > 1 else None
    load([name] if name in COMMANDS else None)
    from orchestrator.cli.application import main as run  # noqa: PLC0415

    run()


def __getattr__(name: str) -> object:
    if name == "app":
        return load()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["COMMANDS", "app", "load", "main"]
