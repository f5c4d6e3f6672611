"""`leasewise token ...`: create, list and revoke the API tokens callers of the server present over TCP.

`token create` prints the token once, alone on stdout (so `TOKEN=$(leasewise token create)` works), and says
on stderr that it cannot be shown again: the store keeps only a salted hash of it. Each command parses its
input, makes one call on the backend its shared options select (the server, or the local store: the same
use cases) and prints the answer.

Exit codes: 0 done; 2 bad input (one line naming the option, nothing written), or an unknown token id.
"""

# No `from __future__ import annotations`: typer reads the option types at runtime.

from datetime import timedelta

import typer
from rich.markup import escape

from orchestrator.cli import common
from orchestrator.cli.application import command_group, fail
from orchestrator.cli.common import StoreOptions, store_options
from orchestrator.cli.leasefile import current_user
from orchestrator.cli.output import counted, emit_json, make_console, when
from orchestrator.cli.tables import Column, print_table
from orchestrator.model.numbers import ascii_whole
from orchestrator.model.quota import check_user, duration_text
from orchestrator.model.timeutil import end_of, parse_duration, parse_time

token_app = command_group("token", "Create, list and revoke API tokens for the server.")

#: how long a token lasts unless --expires says otherwise
DEFAULT_EXPIRES = "90d"
NEVER = "never"


def _expires(text: str) -> timedelta | None:
    if text.strip().lower() == NEVER:
        return None
    value = parse_duration(text, "--expires")
    if value <= timedelta(0):
        raise fail(f"--expires: must be a duration greater than zero, or never (got {text!r})")
    return value


def _user(text: str | None) -> str:
    return check_user((text if text is not None else current_user()).strip(), "--user")


def _token_id(text: str) -> int:
    number = ascii_whole(text)
    if number is None or not 0 < number <= common.MAX_LEASE_ID:
        raise fail(f"ID: {text!r} is not a token id (a positive whole number)")
    return number


def _time(text: str | None) -> str:
    return "-" if text is None else when(parse_time(text))


@token_app.command("create")
@store_options()
def create(
    opts: StoreOptions,
    user: str | None = typer.Option(None, "--user", metavar="U", help="Whose token (default: you)"),
    expires: str = typer.Option(DEFAULT_EXPIRES, "--expires", metavar="D|never", help="How long it is valid: 90d, 12h, never"),
    admin: bool = typer.Option(False, "--admin", help="It may do what an admin may (hosts, images, quotas, tokens)"),
    note: str = typer.Option("", "--note", metavar="TEXT", help="What it is for (shown by token list)"),
    json_out: bool = typer.Option(False, "--json", help="Answer as JSON (the token included)"),
) -> None:
    """Make a token and print it once: only a salted hash of it is kept."""
    owner = _user(user)
    lifetime = _expires(expires)
    if lifetime is not None:
        end_of(common.now(), lifetime, "--expires")
    with opts.backend() as backend:   # (the caller is the owner unless --user names another)
        made = backend.token_create(None if user is None else owner, admin, lifetime, note)
    if json_out:
        emit_json(made)
    else:
        until = f"expires {_time(made['expires_at'])} (in {duration_text(lifetime)})" if lifetime else "never expires"
        err = make_console(stderr=True)
        err.print(f"token {made['id']} for {escape(made['user'])}{' (admin)' if admin else ''}, {until}:", soft_wrap=True)
        print(made["token"])
    make_console(stderr=True).print("this is the only time it is shown: it cannot be shown again "
                                    "(`leasewise token revoke` it if it is lost)", soft_wrap=True)


@token_app.command("list")
@store_options()
def list_(
    opts: StoreOptions,
    user: str | None = typer.Option(None, "--user", metavar="U", help="Only this user's tokens"),
    json_out: bool = typer.Option(False, "--json", help="Print JSON"),
) -> None:
    """Tokens: id, user, admin, state, created, expires, revoked, last used, note (never the token)."""
    owner = None if user is None else _user(user)
    with opts.backend() as backend:
        rows = backend.token_list(owner)
    if json_out:
        emit_json(rows)
        return
    if not rows:
        make_console().print("no tokens (make one with `leasewise token create`)")
        return
    columns = [Column("id", "right"), Column("user", wraps=True), Column("admin", drop=4), Column("state"),
               Column("created", drop=3), Column("expires"), Column("revoked", drop=2), Column("last used", drop=1),
               Column("note", wraps=True, drop=5)]
    cells = [[str(r["id"]), escape(r["user"]), "yes" if r["admin"] else "no", r["state"], _time(r["created_at"]),
              _time(r["expires_at"]) if r["expires_at"] else "never", _time(r["revoked_at"]),
              _time(r["last_used_at"]), escape(r["note"])] for r in rows]
    print_table(make_console(), columns, cells, title=counted(len(rows), "token"))


@token_app.command("revoke")
@store_options()
def revoke(
    opts: StoreOptions,
    token_id: str = typer.Argument(..., metavar="ID", help="Token id (token list)"),
) -> None:
    """Revoke a token: refused from now on, by every process."""
    number = _token_id(token_id)
    with opts.backend() as backend:
        answer = backend.token_revoke(number)
    if answer["already"]:
        make_console().print(f"token {number} ({escape(answer['user'])}) was already revoked at "
                             f"{_time(answer['revoked_at'])}", soft_wrap=True)
    else:
        make_console().print(f"token {number} ({escape(answer['user'])}) revoked", soft_wrap=True)
