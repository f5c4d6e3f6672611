"""`leasewise quota ...`: set, list, show and remove the quotas of users (`alice`) and Unix groups (`@lab`).

Each command parses its input, makes one call on the backend its shared options select (the server, or the
local store: the same use cases) and prints the answer. A user quota limits what the user's live leases hold; a group quota limits the
sum over the group's users (primary or supplementary group); `lease submit` and `lease extend` refuse a
request over either with the figure, exit code 3.

Exit codes: 0 done; 2 bad input (one line naming the option, nothing written), or no quota to remove.
"""

# No `from __future__ import annotations`: typer reads the option types at runtime.

from datetime import timedelta

import typer
from rich.markup import escape

from orchestrator.cli.application import command_group, fail
from orchestrator.cli.common import StoreOptions, store_options
from orchestrator.cli.leasefile import current_user
from orchestrator.cli.output import counted, emit_json, make_console
from orchestrator.cli.tables import Column, print_table
from orchestrator.model.numbers import ascii_whole, parse_whole
from orchestrator.model.quota import check_subject, check_user, duration_text
from orchestrator.model.timeutil import parse_duration

quota_app = command_group("quota", "Set, list, show and remove quotas of users and @groups.")

#: what a limit option takes to remove that limit
NONE = "none"
_SUBJECT_HELP = "A user (alice) or a Unix group (@lab)"


# -- parsing -----------------------------------------------------------------------------------------------------
def _amount(option: str, text: str) -> int | None:
    """A count limit: a whole number >= 0, or `none` (unlimited)."""
    if text.strip().lower() == NONE:
        return None
    number = ascii_whole(text)
    if number is None or number < 0:
        raise fail(f"{option}: must be a whole number >= 0 (got {text!r})")
    return parse_whole(number, option, minimum=0)


def _duration(option: str, text: str) -> timedelta | None:
    """A duration limit: `24h`, `14d`, ... (0 allowed), or `none` (unlimited)."""
    if text.strip().lower() == NONE:
        return None
    value = parse_duration(text, option)
    if value < timedelta(0):
        raise fail(f"{option}: must not be negative (got {text!r})")
    return value


def _subject(text: str, label: str = "SUBJECT") -> str:
    return check_subject(text.strip(), label)


# -- rendering ---------------------------------------------------------------------------------------------------
def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def _time_limit(seconds: float | None) -> str:
    return "-" if seconds is None else duration_text(timedelta(seconds=seconds))


def _limits_text(limits: dict) -> str:
    def shown(value: object) -> str:
        return "unlimited" if value is None else str(value)

    return (f"vCPUs {shown(limits['vcpus'])}, memory {shown(limits['memory_mib'])}"
            f"{'' if limits['memory_mib'] is None else ' MiB'}, VMs {shown(limits['vms'])}, "
            f"max duration {_time_limit(limits['max_duration_s']).replace('-', 'unlimited')}, "
            f"max ahead {_time_limit(limits['max_ahead_s']).replace('-', 'unlimited')}")


def _holding_text(holding: dict) -> str:
    def plural(n: int, what: str) -> str:
        return f"{n} {what}{'' if n == 1 else 's'}"

    return f"{plural(holding['vcpus'], 'vCPU')}, {holding['memory_mib']} MiB, {plural(holding['vms'], 'VM')}"


# -- commands ----------------------------------------------------------------------------------------------------
@quota_app.command("set")
@store_options()
def set_(
    opts: StoreOptions,
    subject: str = typer.Argument(..., metavar="SUBJECT", help=_SUBJECT_HELP),
    vcpus: str | None = typer.Option(None, "--vcpus", metavar="N|none", help="vCPUs held at once"),
    memory: str | None = typer.Option(None, "--memory", metavar="MIB|none", help="Memory held at once, MiB"),
    vms: str | None = typer.Option(None, "--vms", metavar="N|none", help="VMs held at once"),
    max_duration: str | None = typer.Option(None, "--max-duration", metavar="D|none", help="Longest lease: 24h, 7d"),
    max_ahead: str | None = typer.Option(None, "--max-ahead", metavar="D|none",
                                         help="Furthest start of an advance reservation from now: 14d"),
) -> None:
    """Set the limits given (the others stay as they are; `none` removes a limit)."""
    name = _subject(subject)
    changes: dict = {}
    for key, option, text, parse in (("vcpus", "--vcpus", vcpus, _amount), ("memory_mib", "--memory", memory, _amount),
                                     ("vms", "--vms", vms, _amount),
                                     ("max_duration", "--max-duration", max_duration, _duration),
                                     ("max_ahead", "--max-ahead", max_ahead, _duration)):
        if text is not None:
            changes[key] = parse(option, text)
    if not changes:
        raise fail("--vcpus, --memory, --vms, --max-duration, --max-ahead: give at least one limit to set")
    with opts.backend() as backend:
        answer = backend.quota_set(name, changes)
    make_console().print(f"quota of {escape(name)} set: {_limits_text(answer['limits'])}", soft_wrap=True)


@quota_app.command("list")
@store_options()
def list_(
    opts: StoreOptions,
    json_out: bool = typer.Option(False, "--json", help="Print JSON"),
) -> None:
    """Every quota with its limits and what its subject holds now (a group: its users together)."""
    with opts.backend() as backend:
        rows = backend.quota_list()
    if json_out:
        emit_json(rows)
        return
    if not rows:
        make_console().print("no quotas: every user is unlimited (set one with `leasewise quota set`)")
        return
    columns = [Column("subject", wraps=True), Column("vCPUs", "right"), Column("memory MiB", "right"),
               Column("VMs", "right"), Column("max duration", "right", drop=2), Column("max ahead", "right", drop=1),
               Column("holds now", wraps=True)]
    cells = [[escape(r["subject"]), _count(r["limits"]["vcpus"]), _count(r["limits"]["memory_mib"]),
              _count(r["limits"]["vms"]), _time_limit(r["limits"]["max_duration_s"]),
              _time_limit(r["limits"]["max_ahead_s"]), _holding_text(r["holding"])] for r in rows]
    print_table(make_console(), columns, cells,
                title=f"{counted(len(rows), 'quota')} (-: unlimited)")


@quota_app.command("show")
@store_options()
def show(
    opts: StoreOptions,
    user: str | None = typer.Argument(None, metavar="USER", help="Whose quotas (default: you)"),
    json_out: bool = typer.Option(False, "--json", help="Print JSON"),
) -> None:
    """A user's own quota and each group quota that applies: limit, what is held, what is left."""
    name = check_user((user if user is not None else current_user()).strip(), "USER")
    with opts.backend() as backend:
        answer = backend.quota_show(name)
    if json_out:
        emit_json(answer)
        return
    console = make_console()
    groups = f" (groups: {', '.join(answer['groups'])})" if answer["groups"] else ""
    console.print(f"{escape(name)}{escape(groups)} holds {_holding_text(answer['holding'])}", soft_wrap=True)
    if not answer["quotas"]:
        console.print(f"no quota applies to {escape(name)}: unlimited", soft_wrap=True)
        return
    cells = []
    for q in answer["quotas"]:
        limits, holding, left = q["limits"], q["holding"], q["left"]
        for key, label in (("vcpus", "vCPUs"), ("memory_mib", "memory MiB"), ("vms", "VMs")):
            if limits[key] is not None:
                over = f" (over by {holding[key] - limits[key]})" if key in q["over"] else ""
                cells.append([escape(q["subject"]), label, str(limits[key]), str(holding[key]), f"{left[key]}{over}"])
        for key, label in (("max_duration_s", "max duration"), ("max_ahead_s", "max ahead")):
            if limits[key] is not None:
                cells.append([escape(q["subject"]), label, _time_limit(limits[key]), "", ""])
        if all(v is None for v in limits.values()):
            cells.append([escape(q["subject"]), "(no limit set)", "", "", ""])
    print_table(console, [Column("quota", wraps=True), Column("limit"), Column("at most", "right"),
                          Column("held", "right"), Column("left", "right")], cells)


@quota_app.command("remove")
@store_options()
def remove(
    opts: StoreOptions,
    subject: str = typer.Argument(..., metavar="SUBJECT", help=_SUBJECT_HELP),
) -> None:
    """Remove a quota: the user (or group) is unlimited again."""
    name = _subject(subject)
    with opts.backend() as backend:
        backend.quota_remove(name)
    make_console().print(f"quota of {escape(name)} removed: unlimited now", soft_wrap=True)
