"""What `--help` shows, for every command: the words as written (brackets included), each paragraph as one
paragraph, no type beside a flag; and `leasewise --version`."""

from __future__ import annotations

import importlib.metadata
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from orchestrator.cli import app

ROOT = Path(__file__).resolve().parents[2]
#: wide enough that no option's help wraps
WIDE = "400"


def _commands(command=None, path=()) -> list[tuple[tuple[str, ...], object]]:
    """(path, command) of the app and each of its groups and commands."""
    command = command if command is not None else typer.main.get_command(app)
    found = [(path, command)]
    for name, sub in getattr(command, "commands", {}).items():
        found += _commands(sub, (*path, name))
    return found


COMMANDS = _commands()
IDS = [" ".join(path) or "leasewise" for path, _ in COMMANDS]


def _help(path: tuple[str, ...], width: str = WIDE) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": width})
    assert result.exit_code == 0, result.output
    return result.stdout


def _as_written(text: str | None) -> str:
    """A help text as its author wrote it: one paragraph a line, no markup escapes."""
    if not text:
        return ""
    return "\n".join(" ".join(p.split()) for p in inspect.cleandoc(text).replace("\\[", "[").split("\n\n"))


def test_serve_help_says_where_it_serves():
    shown = " ".join(_help(("serve",), "100").split())
    assert "the API on [serve] socket (and HTTPS on [serve] listen), enacting the plan" in shown


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_every_bracketed_word_of_a_help_text_is_shown(path, command):
    shown = _help(path)
    texts = [inspect.getdoc(command.callback) if command.callback else None, command.help]
    texts += [getattr(param, "help", None) for param in command.params]
    for word in {w for text in texts for w in re.findall(r"\[[a-z][\w.]*\]", _as_written(text))}:
        assert word in shown, (word, shown)


@pytest.mark.parametrize(("path", "command"), [c for c in COMMANDS if hasattr(c[1], "commands")],
                         ids=[i for i, c in zip(IDS, COMMANDS) if hasattr(c[1], "commands")])
def test_a_group_lists_each_command_with_its_whole_first_paragraph_on_one_line(path, command):
    """rich keeps a docstring's line breaks: `report`'s summary used to stop at "with the delta per"."""
    shown = _help(path).splitlines()
    for name, sub in command.commands.items():
        first = _as_written(inspect.getdoc(sub.callback) if sub.callback else sub.help).split("\n")[0]
        row = next(line for line in shown if re.match(rf"│ {re.escape(name)}\s", line))
        assert " ".join(first.split()) in row, (name, row)


def test_report_help_reads_as_one_sentence_at_80_columns():
    shown = _help(("report",), "80")
    words = " ".join(shown.split("╭")[0].split("report [OPTIONS]")[1].split())
    assert words == ("Plan vs reality: planned and enacted start and end of every enacted reservation, with the "
                     "delta per reservation and its mean and worst per kind, from the event log.")


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_no_option_or_argument_shows_a_type_of_typers(path, command):
    """A flag takes no value, so shows none (typer showed `--json <bool>`); every other option and argument
    shows its own metavar (`--state FILE`, `ID`), never a Python type (`<path>`, `<str>`)."""
    shown = _help(path)
    assert not re.search(r"<[a-z]+>|\bBOOLEAN\b", shown), shown


def test_version_is_the_installed_packages():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout == f"leasewise {importlib.metadata.version('leasewise')}\n"
    script = subprocess.run([sys.executable, "-c", "import sys; sys.argv = ['leasewise', '--version']; "
                             "from orchestrator.cli import main; main()"], capture_output=True, text=True,
                            timeout=60, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert script.returncode == 0 and script.stdout == result.stdout, script.stderr
