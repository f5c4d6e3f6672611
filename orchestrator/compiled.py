"""The one compiled module: the slot table's core (`orchestrator/planning/slottable/core.pyx`, Cython).

It holds what the profile of a large simulation says the time goes to, loops over hosts and breakpoints:
the host timelines, a reservation's steps on each of its hosts, the host states' refresh of their rows,
the mapper's walk of alike nodes and the integer keys of times. It is the only source of these (a
deliberately naive reference in plain Python, `tests/reference/core.py`, checks it); everything else runs
as Python. It must be built before the package runs: `pip install` (which
`deploy/install.sh` runs) builds it, and in a checkout `python3 setup.py build_ext --inplace` does.

setup.py records the digest of every input it compiled (`SOURCES`) in `MANIFEST`. A core missing, or built
from inputs that no longer match, stops the import with one line saying what to run (`check`): an edit
never runs unbuilt, and an old build never runs silently.

setup.py reads `SOURCES` and `MANIFEST` as text (it cannot import the package it builds): keep them literals.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
from pathlib import Path

#: every input of the compiled module (its `.pyx` first, then the `.pxi` it includes and any `.pxd` beside
#: it), as paths from the root
SOURCES = (
    "orchestrator/planning/slottable/core.pyx",
    "orchestrator/planning/slottable/core_rows.pxi",
)
#: the module they build
EXTENSION = "orchestrator.planning.slottable.core"
#: beside this file: {input path: sha256 of the file the build compiled}, written by setup.py
MANIFEST = "compiled_sources.json"

_ROOT = Path(__file__).resolve().parent.parent
BUILD = "python3 setup.py build_ext --inplace"


def built(root: Path = _ROOT) -> Path | None:
    """The extension built from `SOURCES` under `root`, or None."""
    base = root / SOURCES[0]
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = base.with_suffix(suffix)
        if candidate.exists():
            return candidate
    return None


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def digests(root: Path = _ROOT) -> dict[str, str]:
    """{input path: digest} of every input present under `root`, as setup.py records them."""
    return {source: digest(root / source) for source in SOURCES if (root / source).exists()}


def problem(root: Path = _ROOT) -> str | None:
    """Why the compiled core under `root` cannot be used (not built, or built from other inputs), or None.

    An installed copy without the sources beside it (a wheel) has nothing to compare: it is used as built."""
    if built(root) is None:
        return (f"the slot table's compiled core ({SOURCES[0]}) is not built: run `{BUILD}` in {root} "
                "(`pip install` and deploy/install.sh build it)")
    present = digests(root)
    if not present:
        return None
    try:
        recorded = json.loads((root / "orchestrator" / MANIFEST).read_text())
    except (OSError, ValueError):
        recorded = {}
    changed = [source for source, value in present.items() if recorded.get(source) != value]
    if changed:
        return f"{changed[0]} changed after the compiled core was built: run `{BUILD}` in {root} again"
    return None


def check() -> None:
    """Raise ImportError, saying what to run, unless the compiled core is built from the sources here."""
    why = problem()
    if why is not None:
        raise ImportError(f"leasewise: {why}")


def describe() -> str:
    """What runs, for benchmarks' headers."""
    return f"the slot table's core compiled with Cython ({SOURCES[0]}); the rest as Python"
