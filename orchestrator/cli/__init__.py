"""The `leasewise` command line (typer + rich).

Each command group lives in its own module and registers itself on the one typer app here. Errors that
leasewise raises on purpose become one red line and exit code 2; nothing prints a traceback for bad input.
"""

from __future__ import annotations

import functools
import sys

import typer
from rich.console import Console
from rich.markup import escape

from drivers.errors import DriverError
from orchestrator.model.errors import LeasewiseError


class ErrorLineTyper(typer.Typer):
    """A Typer whose commands turn leasewise's own errors into one red line and exit code 2, both from
    the console script and under typer's test runner (which calls commands without `main`)."""

    def command(self, *args, **kwargs):
        register = super().command(*args, **kwargs)

        def decorator(func):
            @functools.wraps(func)
            def wrapper(*a, **kw):
                try:
                    return func(*a, **kw)
                except (LeasewiseError, DriverError) as exc:
                    raise fail(str(exc)) from None

            register(wrapper)
            return func

        return decorator


app = ErrorLineTyper(
    name="leasewise",
    help="Plan and enact VM leases on lab KVM clusters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

err_console = Console(stderr=True, highlight=False)


def fail(message: str, code: int = 2) -> "typer.Exit":
    """Print one error line and return the Exit to raise."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", markup=True, soft_wrap=True)
    return typer.Exit(code)


def _register_commands() -> None:
    from orchestrator.cli import (  # noqa: F401  (each module adds its commands to `app`)
        calibrate,
        hosts,
        leases,
        migrate,
        plan,
        report,
        run,
        simulate,
    )


_register_commands()


def main() -> None:
    """Console-script entry point: one line for our own errors, never a traceback for bad input."""
    try:
        app()
    except LeasewiseError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
