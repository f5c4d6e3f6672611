"""The CLI tests' fixed clock, and the command line run against the test's store."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app, common
from tests.support.times import CLI_NOW


@pytest.fixture
def clock(monkeypatch):
    """The commands' clock, fixed at CLI_NOW (and movable: set `clock["now"]`) so planned times are exact."""
    box = {"now": CLI_NOW}
    monkeypatch.setattr(common, "now", lambda: box["now"])
    return box


@pytest.fixture
def cli(store_path, clock):
    """`cli("lease", "list")` runs the command on the test's store at a wide terminal (no table folds)."""
    def invoke(*args: str, config: Path | None = None):
        argv = [*args, "--state", str(store_path)] + (["--config", str(config)] if config else [])
        return CliRunner().invoke(app, argv, env={"COLUMNS": "250"})

    return invoke


@pytest.fixture
def site(cli):
    """Two simulated hosts of 8 vCPUs / 16 GiB."""
    for name in ("lab1", "lab2"):
        result = cli("host", "add", name, "--uri", "test:///default", "--cpus", "8", "--memory", "16384")
        assert result.exit_code == 0, result.output
    return cli
