"""Fixtures every test folder may use; plain helpers (fixed instants, scenarios, an SSH server) are in
tests/support/ and imported by name."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """Where a test's SQLite store goes (not created: commands that need one create it)."""
    return tmp_path / "state.sqlite"


@pytest.fixture
def no_matplotlib(monkeypatch):
    """matplotlib unimportable for the test, as on a machine without the `plot` extra."""
    for name in [n for n in sys.modules if n == "matplotlib" or n.startswith("matplotlib.")] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)
