"""Structured logging: logfmt lines on stderr, levels, one record one line, and `run --log-level`."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.cli.logs import LogfmtFormatter, configure_logging, parse_level, quote
from orchestrator.model.errors import InvalidRequest
from orchestrator.model.timeutil import UTC, iso

ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ level=(debug|info|warning|error) logger=\S+ msg="(?:[^"\\]|\\.)*"'
                  r'(?: [a-z_]+=(?:[^\s"=\\]+|"(?:[^"\\]|\\.)*"))*$')


@pytest.fixture
def root_logger():
    """configure_logging sets up the root logger: put it back as it was after the test."""
    root = logging.getLogger()
    saved = (root.level, list(root.handlers), logging.getLogger("paramiko").level)
    yield root
    root.handlers[:] = saved[1]
    root.setLevel(saved[0])
    logging.getLogger("paramiko").setLevel(saved[2])


def record(message: str, *args, level=logging.INFO, **extra) -> logging.LogRecord:
    rec = logging.LogRecord("orchestrator.runtime.daemon", level, __file__, 1, message, args, None)
    rec.__dict__.update(extra)
    return rec


def test_a_record_is_one_logfmt_line_with_its_extra_fields():
    line = LogfmtFormatter().format(record("lease %d: %s", 7, "stopped", lease=7, host="lab 1"))
    assert re.fullmatch(r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ level=info logger=orchestrator.runtime.daemon '
                        r'msg="lease 7: stopped" lease=7 host="lab 1"', line), line
    assert LINE.match(line)


def test_quotes_newlines_and_tracebacks_stay_on_one_line():
    try:
        raise RuntimeError('bad "thing"\nsecond line')
    except RuntimeError:
        rec = record('said "%s"\n\tthen', "x=1", level=logging.ERROR)
        rec.exc_info = sys.exc_info()
    line = LogfmtFormatter().format(rec)
    assert "\n" not in line and LINE.match(line), line
    assert 'msg="said \\"x=1\\"\\n\\tthen"' in line and "level=error" in line
    assert 'exc="Traceback (most recent call last):\\n' in line and 'RuntimeError: bad \\"thing\\"' in line


@pytest.mark.parametrize("value, shown", [("plain", "plain"), ("", '""'), ("a b", '"a b"'), ("k=v", '"k=v"'),
                                          ('q"', '"q\\""'), ("back\\slash", '"back\\\\slash"'), (None, "null"),
                                          (7, "7"), ("\x00", '"\\x00"')])
def test_values_are_bare_only_when_plain(value, shown):
    assert quote(value) == shown


def test_levels_and_a_bad_one_naming_the_option():
    assert [parse_level(t) for t in ("debug", "INFO", " warning ", "error")] == [10, 20, 30, 40]
    with pytest.raises(InvalidRequest) as info:
        parse_level("loud")
    assert info.value.field == "--log-level" and "debug, info, warning, error" in str(info.value)


def test_configure_logging_filters_by_level_and_replaces_itself(root_logger, capsys):
    configure_logging("warning")
    configure_logging("info")          # called again: one handler, the new level
    log = logging.getLogger("orchestrator.test")
    log.debug("hidden")
    log.info("shown %d", 1, extra={"lease": 3})
    logging.getLogger("paramiko.transport").info("connected")   # a chatty library: from warning on
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].endswith('level=info logger=orchestrator.test msg="shown 1" lease=3'), err
    configure_logging("debug")
    log.debug("now shown")
    assert "now shown" in capsys.readouterr().err


def leasewise(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The command line in a process of its own (its stderr apart from its stdout)."""
    code = "import sys; from orchestrator.cli import main; sys.argv[0] = 'leasewise'; main()"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_run_logs_logfmt_to_stderr_at_its_level(tmp_path):
    state = str(tmp_path / "state.sqlite")
    assert leasewise("host", "add", "sim1", "--uri", "sim://sim1", "--cpus", "2", "--memory", "2048",
                     "--state", state, cwd=tmp_path).returncode == 0
    assert leasewise("lease", "submit", "--nodes", "1", "--cpus", "1", "--memory", "512", "--duration", "10m",
                     "--state", state, cwd=tmp_path).returncode == 0
    ran = leasewise("run", "--fast", "--until-idle", "--state", state, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    lines = [l for l in ran.stderr.splitlines() if l]
    assert lines and all(LINE.match(l) for l in lines), ran.stderr
    assert any("level=info logger=orchestrator.runtime.driver_enactor" in l and "lease 1:" in l for l in lines)
    assert leasewise("lease", "submit", "--nodes", "1", "--cpus", "1", "--memory", "512", "--duration", "10m",
                     "--state", state, cwd=tmp_path).returncode == 0
    quiet = leasewise("run", "--fast", "--until-idle", "--log-level", "warning", "--state", state, cwd=tmp_path)
    assert quiet.returncode == 0 and quiet.stderr == "" and "lease 2" in quiet.stdout
    bad = leasewise("run", "--log-level", "loud", "--state", state, cwd=tmp_path)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().splitlines() == ["error: --log-level: must be one of debug, info, warning, error (got 'loud')"]


def test_restoring_puts_the_loggers_back(root_logger, capsys):
    before = (root_logger.level, list(root_logger.handlers))
    restore = configure_logging("debug")
    assert root_logger.level == logging.DEBUG and len(root_logger.handlers) == len(before[1]) + 1
    restore()
    assert (root_logger.level, list(root_logger.handlers)) == before
    logging.getLogger("orchestrator.test").warning("after")
    assert "level=warning" not in capsys.readouterr().err


def test_run_in_process_leaves_no_handler_behind(tmp_path, root_logger):
    from typer.testing import CliRunner

    from orchestrator.cli import app
    handlers = list(root_logger.handlers)
    result = CliRunner().invoke(app, ["run", "--state", str(tmp_path / "none.sqlite"), "--log-level", "debug"])
    assert result.exit_code == 2 and "--state: no store" in result.output
    assert root_logger.handlers == handlers


def test_a_formatter_given_a_clock_stamps_its_time():
    simulated = datetime(2031, 5, 4, 3, 2, 1, 999000, tzinfo=UTC)
    line = LogfmtFormatter(now=lambda: simulated).format(record("lease %d: started", 7))
    assert line.startswith("2031-05-04T03:02:01Z level=info ")


def test_run_fast_logs_at_the_simulated_time_of_the_events_beside_them(tmp_path):
    """Under --fast the clock jumps to an advance reservation two days ahead: the log lines of its start and
    stop carry those simulated times (the times of the events the store records), not the wall clock's."""
    state = str(tmp_path / "state.sqlite")
    start = (datetime.now(UTC) + timedelta(days=2)).replace(second=0, microsecond=0)
    assert leasewise("host", "add", "sim1", "--uri", "sim://sim1", "--cpus", "2", "--memory", "2048",
                     "--state", state, cwd=tmp_path).returncode == 0
    assert leasewise("lease", "submit", "--cpus", "1", "--memory", "512", "--duration", "10m", "--start",
                     start.isoformat(), "--state", state, cwd=tmp_path).returncode == 0
    ran = leasewise("run", "--fast", "--until-idle", "--state", state, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    stamps = {line.split(" ")[0] for line in ran.stderr.splitlines() if "lease 1:" in line}
    shown = json.loads(leasewise("lease", "show", "1", "--json", "--state", state, cwd=tmp_path).stdout)
    enacted = {event["time"] for event in shown["events"] if event["kind"] == "enacted"}
    expected = {iso(start), iso(start + timedelta(minutes=10))}
    assert stamps == enacted == expected, (ran.stderr, shown["events"])
