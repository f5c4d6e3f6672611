"""The compiled modules, built at `pip install`: the slot table's timeline
(`orchestrator.planning.slottable.ctimeline`, Cython) and the scheduler's hot path compiled from its
Python sources by mypyc (the group `orchestrator.compiled.MODULES`).

Everything else is in pyproject.toml. Without a C compiler (or with a source mypy rejects) the build goes
on without them: the slot table then uses the reference timeline in Python (`slottable/choice.py`) and
the scheduler runs from its sources: slower, the same answers."""

import ast
import hashlib
import json
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

from Cython.Build import cythonize

ROOT = Path(__file__).resolve().parent


def _compiled_group() -> tuple[tuple[str, ...], str, str]:
    """MODULES, GROUP and MANIFEST from orchestrator/compiled.py, read as text (the package's own
    imports are not installed yet while it builds)."""
    tree = ast.parse((ROOT / "orchestrator" / "compiled.py").read_text())
    values = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = node.value
    return tuple(ast.literal_eval(values[name]) for name in ("MODULES", "GROUP", "MANIFEST"))


MODULES, GROUP, MANIFEST = _compiled_group()


def _skipped(what: str, error: BaseException) -> None:
    print(f"leasewise: {what} was not built ({error}); the Python reference will be used")


def _mypyc_extensions() -> list[Extension]:
    try:
        from mypyc.build import mypycify
        # (mypy's options first: the modules these import are checked only as far as these use them)
        options = ["--ignore-missing-imports", "--follow-imports=silent"]
        return mypycify([*options, *MODULES], opt_level="3", group_name=GROUP)
    except (Exception, SystemExit) as error:   # (mypy reports a type error by exiting)
        _skipped("the compiled scheduler", error)
        return []


class OptionalBuildExt(build_ext):
    """Build the compiled modules if this machine can; say so and go on if it cannot. With the mypyc
    group built, record the digests of the sources it was built from (`orchestrator.compiled` loads the
    sources instead when they no longer match)."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as error:   # (no compiler, no Python headers: setuptools raises several kinds)
            _skipped("a compiled module", error)
        self._write_manifest()

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as error:
            _skipped(ext.name, error)

    def _write_manifest(self) -> None:
        group = Path(self.get_ext_fullpath(GROUP + "__mypyc"))
        if not group.exists():
            return
        digests = {module: hashlib.sha256((ROOT / module).read_bytes()).hexdigest() for module in MODULES}
        (group.parent / MANIFEST).write_text(json.dumps(digests, indent=1) + "\n")


setup(
    ext_modules=cythonize(
        [Extension("orchestrator.planning.slottable.ctimeline",
                   ["orchestrator/planning/slottable/ctimeline.pyx"], extra_compile_args=["-O2"])],
        compiler_directives={"language_level": 3},
    ) + _mypyc_extensions(),
    cmdclass={"build_ext": OptionalBuildExt},
)
