"""`orchestrator.cli.output` and `orchestrator.cli.app`: the one console factory, the JSON writers, and
the app layout (command modules register on cli.app; the package only imports them)."""

import importlib
import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
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
    """No cycle: the package imports the command modules, which take the app from cli.app."""
    for name in ("calibrate", "common", "hosts", "leases", "migrate", "plan", "quotas", "report", "run", "simulate",
                 "sweep", "tokens"):
        source = (ROOT / "orchestrator" / "cli" / f"{name}.py").read_text()
        assert "from orchestrator.cli import app" not in source and "from orchestrator.cli import fail" not in source
    assert importlib.import_module("orchestrator.cli.app").app is app


@pytest.mark.parametrize("first", ["orchestrator.cli.hosts", "orchestrator.cli.common", "orchestrator.cli.app"])
def test_any_cli_module_imported_first_gives_the_whole_app(first):
    code = (f"import {first}; import typer; from orchestrator.cli import app; "
            "print(sorted(typer.main.get_command(app).commands))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ("['calibrate', 'host', 'image', 'lease', 'migrate', 'plan', 'quota', 'report', "
                                  "'run', 'serve', 'simulate', 'sweep', 'token', 'whoami']")
