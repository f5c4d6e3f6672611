"""The one typer app of the `leasewise` command line, and how its commands fail.

Command modules register on `app` (or on a group made with `command_group`) and raise `fail(...)` for bad
input. Errors that leasewise raises on purpose become one red line and exit code 2; nothing prints a
traceback for bad input. The command modules are imported (so registered) by `orchestrator.cli`.
"""

from __future__ import annotations

import functools
import sys

import typer
from rich.markup import escape

from drivers.errors import DriverError
from orchestrator.cli.output import make_console
from orchestrator.model.errors import LeasewiseError

#: where error lines go (stdout stays the command's answer, e.g. its JSON)
err_console = make_console(stderr=True)


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


def _typer(name: str, help: str, **options) -> ErrorLineTyper:
    return ErrorLineTyper(name=name, help=help, no_args_is_help=True, pretty_exceptions_enable=False,
                          add_completion=False, **options)


app = _typer("leasewise", "Plan and enact VM leases on lab KVM clusters.")


def command_group(name: str, help: str, **options) -> ErrorLineTyper:
    """A group of subcommands (`leasewise NAME ...`) with the app's error handling, added to `app`;
    `options` go to typer (e.g. `cls`, a click group class of its own)."""
    group = _typer(name, help, **options)
    app.add_typer(group, name=name)
    return group


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print one error line and return the Exit to raise."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", markup=True, soft_wrap=True)
    return typer.Exit(code)


def main() -> None:
    """Console-script entry point: one line for our own errors, never a traceback for bad input."""
    try:
        app()
    except LeasewiseError as exc:
        sys.exit(fail(str(exc)).exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
