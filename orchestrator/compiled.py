"""The modules `pip install` compiles with Cython, and loading their Python sources instead.

Each of `MODULES` is an ordinary Python file, the only source of what it does; beside it, a `.pxd` file of
the same name tells Cython the C types of its classes and hot loops (Cython's pure-Python mode). The same
file runs interpreted or compiled, with the same answers (tests/test_compiled.py holds the two side by
side). Only the slot table's core and the mapper's walk are compiled: where the profile of a large
simulation says the time goes, in loops over hosts and breakpoints that typed C code runs many times
faster; the scheduler's decisions around them run as Python.

Python's import system prefers a built extension to a source file of the same name, which would hide an
edit made in a checkout until the next build. setup.py records the digest of every input it compiled
(each module and its `.pxd`) in `MANIFEST`; when any input no longer matches, the whole set loads from
source, with one line on stderr saying so. `LEASEWISE_PURE_PYTHON=1` asks for the sources outright.

setup.py reads `MODULES` and `MANIFEST` as text (it cannot import the package it builds): keep them literals.
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

#: the compiled modules, as paths from the repository's root
MODULES = (
    "orchestrator/planning/slottable/keys.py",
    "orchestrator/planning/slottable/blocks.py",
    "orchestrator/planning/slottable/shared_usage.py",
    "orchestrator/planning/slottable/timeline.py",
    "orchestrator/planning/slottable/hoststates.py",
    "orchestrator/planning/mapper.py",
)
PURE_ENV = "LEASEWISE_PURE_PYTHON"
#: beside this file: {input path: sha256 of the file the build compiled}, written by setup.py
MANIFEST = "compiled_sources.json"

_PACKAGE = Path(__file__).resolve().parent
_ROOT = _PACKAGE.parent


def module_name(module: str) -> str:
    """`orchestrator/planning/mapper.py` -> `orchestrator.planning.mapper`."""
    return module.removesuffix(".py").replace("/", ".")


def inputs(module: str, root: Path = _ROOT) -> list[Path]:
    """What Cython compiles for one of `MODULES`: its source, and its `.pxd` when it has one."""
    source = root / module
    declarations = source.with_suffix(".pxd")
    return [source, declarations] if declarations.exists() else [source]


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


def digests(root: Path = _ROOT) -> dict[str, str]:
    """{input path: digest} of every input of every compiled module, as setup.py records them."""
    return {str(path.relative_to(root)): digest(path) for module in MODULES for path in inputs(module, root)}


def stale_modules(root: Path = _ROOT) -> list[str]:
    """The compiled modules whose inputs are not the ones they were built from. A set built in part is stale
    whole; a checkout with none built has nothing stale (it runs from source)."""
    compiled = [module for module in MODULES if built(module, root) is not None]
    if not compiled:
        return []
    if len(compiled) < len(MODULES):
        return compiled
    try:
        recorded = json.loads((root / "orchestrator" / MANIFEST).read_text())
    except (OSError, ValueError):
        return compiled
    return [module for module in MODULES
            if any(recorded.get(str(path.relative_to(root))) != digest(path) for path in inputs(module, root))]


def in_use() -> bool:
    """Whether `import` gives the compiled modules here (all of them or none of them)."""
    import importlib

    return all(not (importlib.import_module(module_name(m)).__file__ or "").endswith(".py") for m in MODULES)


def describe() -> str:
    """What runs: the compiled modules, or the Python sources and why (for benchmarks' headers)."""
    if in_use():
        return f"{len(MODULES)} modules compiled with Cython"
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return f"Python sources ({PURE_ENV} is set)"
    return "Python sources (not compiled here)"


def choose(environ: dict[str, str] | os._Environ = os.environ) -> str | None:
    """Called once as the package is imported: load every compiled module from source when asked or when
    the build is stale, before any of them is imported. Returns why the sources are used, or None."""
    if environ.get(PURE_ENV, "") not in ("", "0"):
        reason = f"{PURE_ENV} is set"
    else:
        stale = stale_modules()
        if not stale:
            return None
        reason = (f"{stale[0]} changed after it was compiled: run `python3 setup.py build_ext --inplace` (or "
                  "`pip install -e .`) again to rebuild (the Python sources are used until then)")
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
