"""How the commands write: consoles for people, JSON documents for programs, and times for people.

One console factory, so every command gets the same console: no highlighting of numbers, the width of
the terminal (or $COLUMNS; 80 in a pipe), read when it prints, and every text it prints made `printable`
(stored text never sends its control or bidi characters to a terminal). A command given `--json` writes its JSON
document alone on stdout and says anything else (progress, notes) on stderr, so the document stays
parseable while a person still sees what happens.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from orchestrator.model.errors import InvalidRequest
from orchestrator.model.text import printable_lines
from orchestrator.model.timeutil import iso


class SafeConsole(Console):
    """A console that prints every text through `printable` (line by line): what the store holds, a name
    someone chose, reaches the terminal with its escape codes and bidi overrides spelled out, never obeyed.
    Tables get the same from `orchestrator.cli.tables`."""

    def print(self, *objects: Any, **options: Any) -> None:   # type: ignore[override]
        super().print(*(printable_lines(o) if isinstance(o, str) else o for o in objects), **options)


def make_console(*, stderr: bool = False) -> Console:
    """A console for people, on stdout (or stderr: errors, and what a `--json` command says besides)."""
    return SafeConsole(stderr=stderr, highlight=False)



def emit_json(data: Any) -> None:
    """`data` as one JSON document on stdout."""
    sys.stdout.write(json.dumps(data, indent=1) + "\n")


def write_json_file(path: Path, data: Any, option: str = "--json") -> None:
    """`data` as JSON into `path` (see `write_whole`)."""
    write_whole(path, [(json.dumps(data, indent=1) + "\n").encode()], option)


def write_whole(path: Path, chunks: Iterable[bytes], option: str) -> None:
    """`chunks` into `path`, written next to it and renamed: never half a file. A file that cannot be
    written is one error line naming `option`."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with tmp.open("wb") as fh:
            fh.writelines(chunks)
        tmp.replace(path)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise InvalidRequest(option, f"cannot write {path} ({exc.strerror or exc})") from None


def when(value: datetime | None) -> str:
    """A time for people: ISO 8601 UTC to the second ("-" for none)."""
    if value is None:
        return "-"
    return iso(value.replace(microsecond=0))


def counted(n: int, noun: str) -> str:
    """`3 hosts`, `1 host`: a count and its noun."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
