"""The CLI tests' fixed clock."""

from __future__ import annotations

import pytest

from orchestrator.cli import common
from tests.support.times import CLI_NOW


@pytest.fixture
def clock(monkeypatch):
    """The commands' clock, fixed at CLI_NOW (and movable: set `clock["now"]`) so planned times are exact."""
    box = {"now": CLI_NOW}
    monkeypatch.setattr(common, "now", lambda: box["now"])
    return box
