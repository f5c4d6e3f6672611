"""The compiled modules, built at `pip install` (or in place: `python3 setup.py build_ext --inplace`): the
Python files of `orchestrator.compiled.MODULES`, each with its `.pxd` when it has one, compiled by Cython.

Everything else is in pyproject.toml. A build that fails (no C compiler, no Python headers, a source Cython
rejects) fails the install: nothing is left half-built behind a working-looking package. After building,
the digests of every input are recorded (`orchestrator.compiled` loads the sources instead when they no
longer match)."""

import ast
import hashlib
import json
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def _compiled() -> tuple[tuple[str, ...], str]:
    """MODULES and MANIFEST from orchestrator/compiled.py, read as text (the package's own imports are not
    installed yet while it builds)."""
    tree = ast.parse((ROOT / "orchestrator" / "compiled.py").read_text())
    values = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = node.value
    return ast.literal_eval(values["MODULES"]), ast.literal_eval(values["MANIFEST"])


MODULES, MANIFEST = _compiled()

#: Cython's settings for every module: the C types come from the `.pxd` files alone (the annotations stay
#: Python's, for readers and mypy); index checks stay on unless a `.pxd` turns them off for one function
DIRECTIVES = {"language_level": 3, "annotation_typing": False, "embedsignature": False}


class BuildAndRecord(build_ext):
    """Build every extension (any failure ends the build), then record the digests of their inputs."""

    def run(self) -> None:
        super().run()
        digests = {}
        for module in MODULES:
            source = ROOT / module
            for path in (source, source.with_suffix(".pxd")):
                if path.exists():
                    digests[str(path.relative_to(ROOT))] = hashlib.sha256(path.read_bytes()).hexdigest()
        manifest = Path(self.get_ext_fullpath("orchestrator.compiled")).parent / MANIFEST
        manifest.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")


setup(
    ext_modules=cythonize(
        [Extension(module.removesuffix(".py").replace("/", "."), [module], extra_compile_args=["-O2", "-g0"])
         for module in MODULES],
        compiler_directives=DIRECTIVES,
    ),
    cmdclass={"build_ext": BuildAndRecord},
)
