"""The code is type-checked and stays so: mypy finds nothing in `orchestrator/` and `drivers/`. libvirt,
paramiko and yaml ship no types and are taken as they come. A finding here is mostly a call that can be given
what it does not handle: a `None` where a value is needed, an element a document may lack."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_the_code_passes_mypy():
    if importlib.util.find_spec("mypy") is None:
        pytest.fail("mypy is not installed: it is in the test extra (deploy/install.sh installs it)", pytrace=False)
    done = subprocess.run([sys.executable, "-m", "mypy", "--ignore-missing-imports", "--no-incremental",
                           "--python-version", "3.11", "orchestrator", "drivers"], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
