"""How the commands write: consoles for people, JSON documents for programs, and times for people.

One console factory, so every command gets the same console: no highlighting of numbers, the width of
the terminal (or $COLUMNS; 80 in a pipe), read when it prints. A command given `--json` writes its JSON
document alone on stdout and says anything else (progress, notes) on stderr, so the document stays
parseable while a person still sees what happens.
"""

from __future__ import annotations

from rich.console import Console


def make_console(*, stderr: bool = False) -> Console:
    """A console for people, on stdout (or stderr: errors, and what a `--json` command says besides)."""
    return Console(stderr=stderr, highlight=False)
