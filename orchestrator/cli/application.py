"""The one typer app of the `leasewise` command line, and how its commands fail.

Command modules register on `app` (or on a group made with `command_group`) and raise `fail(...)` for bad
input. Errors that leasewise raises on purpose become one red line and exit code 2, or the code an error
that carries an `exit_code` gets that one (over quota 3, not allowed 4); nothing prints a traceback for bad
input. The command modules are imported (so registered) by `orchestrator.cli`, all of them or only the one
a command line names.

Help is shown as it is written: a docstring's or an option's words in brackets (`[serve] socket`) are
words, not rich markup, and a paragraph is one paragraph however its source lines are broken; a flag
shows no type.

Exit codes, for scripts (the README's table): 0 done; 1 a check or measurement failed (`host check`,
`calibrate`); 2 bad input, nothing written; 3 well-formed but refused by the scheduler, or over quota; 4 not
allowed (the server's answer to someone else's lease, an admin's command); 75 the store stayed busy: try again.
"""

from __future__ import annotations

import functools
import inspect
import sys

import typer
from rich.markup import escape
from typer.core import TyperArgument, TyperCommand, TyperGroup

from drivers.errors import DriverError
from orchestrator.cli.output import make_console
from orchestrator.model.errors import LeasewiseError

#: the click that typer runs on (typer >= 0.20 carries its own): its usage errors' base class
_UsageError = typer.BadParameter.__mro__[1]

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
#: a well-formed request the scheduler refused (a rejected lease, an extension that does not fit)
EXIT_REJECTED = 3
#: the caller may not do this (reserved: the multi-user service answers it)
EXIT_NOT_ALLOWED = 4
#: the store stayed busy with another writer for longer than --wait (EX_TEMPFAIL): try again
EXIT_BUSY = 75

#: where error lines go (stdout stays the command's answer, e.g. its JSON)
err_console = make_console(stderr=True)


def plain(text: str | None) -> str | None:
    """Help text as written: each paragraph on one line (rich keeps a docstring's line breaks), and its
    brackets escaped (rich would take `[serve]` for a style and drop it)."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(escape(" ".join(line.strip() for line in p.splitlines())) for p in paragraphs)


class _PlainHelp:
    """Help texts shown as `plain` makes them; no type beside a flag or a named argument (typer would show
`--json <bool>` and `ID <str>`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.help = plain(self.help)
        for param in self.params:
            param.help = plain(getattr(param, "help", None))

    def parse_args(self, ctx, args):
        """A command line click cannot read (an unknown option such as `-1`, a bad choice) is one error line
        naming the command, and exit code 2, like any other bad input (not click's usage box)."""
        try:
            return super().parse_args(ctx, args)
        except _UsageError as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":   # (typer shows the help instead)
                raise
            hint = " (an argument that starts with '-' goes after `--`)" if type(exc).__name__ == "NoSuchOption" else ""
            raise fail(f"{ctx.command_path}: {exc.format_message()}{hint}", exc.exit_code) from None

    def get_params(self, ctx):
        params = super().get_params(ctx)
        for param in params:   # (a flag takes no value; an argument's metavar says what it is)
            if getattr(param, "is_flag", False) or (isinstance(param, TyperArgument) and param.metavar):
                param.display_type_rich = _no_type
        return params


def _no_type(ctx) -> None:
    return None


class Command(_PlainHelp, TyperCommand):
    pass


class Group(_PlainHelp, TyperGroup):
    pass


class ErrorLineTyper(typer.Typer):
    """A Typer whose commands turn leasewise's own errors into one red line and exit code 2 (or the
    error's own), both from the console script and under typer's test runner (which calls commands
    without `main`), and show their help as written (`Command`)."""

    def command(self, *args, **kwargs):
        register = super().command(*args, **{"cls": Command, **kwargs})

        def decorator(func):
            @functools.wraps(func)
            def wrapper(*a, **kw):
                try:
                    return func(*a, **kw)
                except (LeasewiseError, DriverError) as exc:
                    raise fail(str(exc), exit_code_of(exc)) from None

            register(wrapper)
            return func

        return decorator


def _typer(name: str, help: str, **options) -> ErrorLineTyper:
    return ErrorLineTyper(name=name, help=help, no_args_is_help=True, pretty_exceptions_enable=False,
                          add_completion=False, **{"cls": Group, **options})


app = _typer("leasewise", "Plan and enact VM leases on lab KVM clusters.")


def _print_version(asked: bool) -> None:
    if asked:
        from importlib.metadata import version  # noqa: PLC0415

        typer.echo(f"leasewise {version('leasewise')}")
        raise typer.Exit()


@app.callback()
def _always_a_group(
    show_version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                      help="Print leasewise's version and exit"),
) -> None:
    # typer runs an app of one command as that command; `orchestrator.cli.main` may register only one
    pass


def command_group(name: str, help: str, **options) -> ErrorLineTyper:
    """A group of subcommands (`leasewise NAME ...`) with the app's error handling, added to `app`;
    `options` go to typer (e.g. `cls`, a click group class of its own)."""
    group = _typer(name, help, **options)
    app.add_typer(group, name=name)
    return group


def exit_code_of(exc: BaseException) -> int:
    """The exit code of one of leasewise's errors: its own when it carries one (a server's answer, over
    quota: 3, not allowed: 4), else 2 (bad input)."""
    code = getattr(exc, "exit_code", None)
    if isinstance(code, int):
        return code
    return EXIT_BAD_INPUT


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    """Print one error line and return the Exit to raise."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", markup=True, soft_wrap=True)
    return typer.Exit(code)


def main() -> None:
    """Console-script entry point: one line for our own errors, never a traceback for bad input."""
    try:
        app()
    except LeasewiseError as exc:
        sys.exit(fail(str(exc), exit_code_of(exc)).exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
