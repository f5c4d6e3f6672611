"""The modules `pip install` compiles with mypyc, and loading their Python sources instead.

The scheduler's hot path (below) is compiled as one group, so that calls and attribute reads between
these modules are native; the sources stay the reference and what a reader reads. Python's import
system prefers a built extension to a source file of the same name, which would hide an edit made in
an editable install until the next `pip install -e .`: a module whose source is not the one it was
built from makes the whole group load from source (with one line on stderr saying so), and
`LEASEWISE_PURE_PYTHON=1` asks for the sources outright (the tests compare the two that way).

setup.py reads `MODULES` as text (it cannot import the package it builds): keep it a literal tuple.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import sys
from collections.abc import Callable
from importlib.abc import PathEntryFinder
from pathlib import Path

#: the compiled group, as paths from the repository's root
MODULES = (
    "orchestrator/model/lease.py",
    "orchestrator/model/reservations.py",
    "orchestrator/model/resources.py",
    "orchestrator/model/states.py",
    "orchestrator/model/timeutil.py",
    "orchestrator/planning/overheads.py",
    "orchestrator/planning/evacuation.py",
    "orchestrator/planning/mapper.py",
    "orchestrator/planning/vm_scheduler.py",
    "orchestrator/planning/lease_scheduler.py",
    "orchestrator/planning/slottable/keys.py",
    "orchestrator/planning/slottable/shared_usage.py",
    "orchestrator/planning/slottable/hoststates.py",
    "orchestrator/planning/slottable/table.py",
    "orchestrator/runtime/eventloop.py",
    "orchestrator/runtime/simulator.py",
    "orchestrator/workloads/swf.py",
    "orchestrator/runtime/lease_records.py",
)
#: the group's shared library (mypyc's `group_name`): orchestrator/compiled_core__mypyc.*.so
GROUP = "orchestrator.compiled_core"
PURE_ENV = "LEASEWISE_PURE_PYTHON"
#: beside this file: {module: sha256 of the source it was built from}
MANIFEST = "compiled_sources.json"

_PACKAGE = Path(__file__).resolve().parent
_ROOT = _PACKAGE.parent


def built(module: str, root: Path = _ROOT) -> Path | None:
    """The extension built for one of `MODULES` (a path like theirs, under `root`), or None."""
    source = root / module
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = source.with_suffix(suffix)
        if candidate.exists():
            return candidate
    return None


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stale_modules(root: Path = _ROOT) -> list[str]:
    """The compiled modules whose source is not the one they were built from (setup.py writes the
    sources' digests to `MANIFEST` as it builds; file times would not do: a wheel's files all get the
    time they were unpacked). A group built in part (or without its shared library) is stale whole."""
    compiled = [module for module in MODULES if built(module, root) is not None]
    if not compiled:
        return []
    group = built(GROUP.replace(".", "/") + "__mypyc.py", root)
    if len(compiled) < len(MODULES) or group is None:
        return compiled
    try:
        recorded = json.loads((root / "orchestrator" / MANIFEST).read_text())
    except (OSError, ValueError):
        return compiled
    return [module for module in compiled if recorded.get(module) != digest(root / module)]


def in_use() -> bool:
    """Whether the compiled group is what `import` gives here (all of it or none of it is)."""
    module = sys.modules.get("orchestrator.planning.lease_scheduler")
    path = module.__file__ if module is not None else None
    return path is not None and not path.endswith(".py")


def choose(environ: dict[str, str] | os._Environ = os.environ) -> str | None:
    """Called once as the package is imported: load the group from source when asked or when its build is
    stale, before any of it is imported. Returns why the sources are used, or None."""
    if environ.get(PURE_ENV, "") not in ("", "0"):
        reason = f"{PURE_ENV} is set"
    else:
        stale = stale_modules()
        if not stale:
            return None
        reason = (f"{stale[0]} changed after it was compiled: run `pip install -e .` again to rebuild "
                  "(the Python sources are used until then)")
        print(f"leasewise: {reason}", file=sys.stderr)
    sys.path_hooks.insert(0, _sources_first_hook(_PACKAGE))
    for path in list(sys.path_importer_cache):
        if Path(path).is_relative_to(_PACKAGE):
            del sys.path_importer_cache[path]
    return reason


def _sources_first_hook(package: Path) -> Callable[[str], PathEntryFinder]:
    """A path hook for the package's own directories whose finder tries a .py file before an extension
    (Python's default order is the reverse); other directories are left to the usual hooks."""
    sources = (importlib.machinery.SourceFileLoader, importlib.machinery.SOURCE_SUFFIXES)
    extensions = (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES)
    bytecode = (importlib.machinery.SourcelessFileLoader, importlib.machinery.BYTECODE_SUFFIXES)
    make = importlib.machinery.FileFinder.path_hook(sources, extensions, bytecode)

    def hook(path: str) -> PathEntryFinder:
        if not Path(path).resolve().is_relative_to(package):
            raise ImportError("not a directory of leasewise's package")
        return make(path)

    return hook
