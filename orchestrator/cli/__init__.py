"""The `leasewise` command line (typer + rich).

Each command group lives in its own module and registers itself on the one typer app here. Errors that
leasewise raises on purpose become one red line and exit code 2; nothing prints a traceback for bad input.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from ..errors import LeasewiseError

app = typer.Typer(
    name="leasewise",
    help="Plan and enact VM leases on lab KVM clusters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

err_console = Console(stderr=True, highlight=False)


def fail(message: str, code: int = 2) -> "typer.Exit":
    """Print one error line and return the Exit to raise."""
    err_console.print(f"[bold red]error:[/] {message}", markup=True, soft_wrap=True)
    return typer.Exit(code)


def _register_commands() -> None:
    from . import migrate, simulate  # noqa: F401  (each module adds its commands to `app`)


_register_commands()


def main() -> None:
    """Console-script entry point: one line for our own errors, never a traceback for bad input."""
    try:
        app()
    except LeasewiseError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
