"""`orchestrator.cli.output` and `orchestrator.cli.application`: the one console factory, the JSON writers, and
the app layout (command modules register on cli.application's app; the package imports them, all of them or, for the
console script, those of the command it runs)."""

import importlib
import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import COMMANDS, app
from orchestrator.cli.output import make_console, when, write_json_file
from orchestrator.model.errors import InvalidRequest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def test_write_json_file_writes_the_document_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "out.json"
    write_json_file(path, {"rows": [1, 2], "when": None})
    assert json.loads(path.read_text()) == {"rows": [1, 2], "when": None}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_write_json_file_that_cannot_be_written_names_the_option(tmp_path):
    with pytest.raises(InvalidRequest) as caught:
        write_json_file(tmp_path / "missing" / "out.json", {}, option="--json")
    assert str(caught.value).startswith(f"--json: cannot write {tmp_path / 'missing' / 'out.json'} (")


@pytest.mark.parametrize("command", [["report", "--state", "{store}"], ["simulate", str(EXAMPLES / "preemption.lwf"),
                                                                        "--quiet"]])
def test_json_out_into_a_missing_directory_is_one_error_line(tmp_path, command):
    store = tmp_path / "state.sqlite"
    assert CliRunner().invoke(app, ["host", "add", "h", "--uri", "sim://h", "--cpus", "1", "--memory", "512",
                                    "--state", str(store)]).exit_code == 0
    target = tmp_path / "missing" / "out.json"
    argv = [a.replace("{store}", str(store)) for a in command] + ["--json", str(target)]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: --json: cannot write {target} (") and result.stderr.count("\n") == 1


def test_the_console_writes_to_stdout_or_stderr_as_asked(capsys):
    make_console().print("to stdout")
    make_console(stderr=True).print("to stderr")
    out, err = capsys.readouterr()
    assert (out, err) == ("to stdout\n", "to stderr\n")


def test_when_is_utc_to_the_second():
    assert when(None) == "-"
    assert when(datetime(2027, 3, 1, 10, 0, 0, 999999, tzinfo=timezone(timedelta(hours=1)))) == "2027-03-01T09:00:00Z"


def test_command_modules_import_the_app_not_the_package():
    """No cycle: the package imports the command modules, which take the app from cli.application."""
    for name in ("calibrate", "common", "hosts", "leases", "migrate", "plan", "quotas", "report", "run", "simulate",
                 "sweep", "tokens"):
        source = (ROOT / "orchestrator" / "cli" / f"{name}.py").read_text()
        assert "from orchestrator.cli import app" not in source and "from orchestrator.cli import fail" not in source
    assert importlib.import_module("orchestrator.cli.application").app is app


@pytest.mark.parametrize("first", ["orchestrator.cli.hosts", "orchestrator.cli.common", "orchestrator.cli.application"])
def test_any_cli_module_imported_first_gives_the_whole_app(first):
    code = (f"import {first}; import typer; from orchestrator.cli import app; "
            "print(sorted(typer.main.get_command(app).commands))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ("['calibrate', 'host', 'image', 'lease', 'migrate', 'plan', 'quota', 'report', "
                                  "'run', 'serve', 'simulate', 'sweep', 'token', 'whoami']")


def _main(*argv: str, then: str = "") -> subprocess.CompletedProcess:
    """`leasewise ARGV` in a fresh interpreter (the console script's `main`), then `then`."""
    code = (f"import sys; sys.argv = ['leasewise', *{list(argv)!r}]; from orchestrator.cli import main\n"
            f"try:\n    main()\nexcept SystemExit as exc:\n    code = exc.code\n{then}")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "COLUMNS": "200"})


def test_commands_names_every_command_the_app_has_in_the_order_help_lists_them():
    out = subprocess.run([sys.executable, "-c", "import typer, click; from orchestrator.cli import app; "
                          "group = typer.main.get_command(app); "
                          "print(group.list_commands(click.Context(group)))"],
                         capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == repr(list(COMMANDS))


def test_the_console_script_loads_only_the_command_it_runs():
    out = _main("simulate", "--help", then="import sys; print(sorted(m for m in sys.modules if m.startswith("
                "('orchestrator.cli.', 'orchestrator.service', 'drivers.libvirt', 'ray'))))")
    loaded = eval(out.stdout.strip().splitlines()[-1])   # (the list printed last)
    assert "orchestrator.cli.simulate" in loaded
    assert not {"orchestrator.cli.serve", "orchestrator.cli.sweep", "orchestrator.cli.hosts", "orchestrator.service",
                "drivers.libvirt", "ray"} & set(loaded), loaded


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_command_runs_from_the_console_script_with_only_its_own_module(name):
    """A lone command is still a subcommand: typer would otherwise run an app of one command as that command."""
    out = _main(name, "--help", then="print('exit', code)")
    assert out.returncode == 0, out.stderr
    assert f"Usage: leasewise {name} [OPTIONS]" in out.stdout and out.stdout.rstrip().endswith("exit 0"), out.stdout


def test_the_console_script_knows_every_command_when_the_first_word_is_not_one():
    out = _main("--help", then="print('exit', code)")
    assert all(f" {name} " in out.stdout for name in COMMANDS), out.stdout
    typo = _main("simulat", then="print('exit', code)")
    assert "No such command 'simulat'" in typo.stderr and typo.stdout.rstrip().endswith("exit 2")
