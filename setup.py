"""The compiled module, built at `pip install` (or in place: `python3 setup.py build_ext --inplace`): the slot
table's core, `orchestrator.compiled.SOURCES` compiled by Cython into `orchestrator.compiled.EXTENSION`.

Everything else is in pyproject.toml. A build that fails (no C compiler, no Python headers, a source Cython
rejects) fails the install, loudly: the package does not run without its core. After building, the digests
of every input are recorded (`orchestrator.compiled.check` refuses a core built from other inputs)."""

import ast
import hashlib
import json
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def _compiled() -> tuple[tuple[str, ...], str, str]:
    """SOURCES, EXTENSION and MANIFEST from orchestrator/compiled.py, read as text (the package's own imports
    are not installed yet while it builds)."""
    tree = ast.parse((ROOT / "orchestrator" / "compiled.py").read_text())
    values = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = node.value
    return (ast.literal_eval(values["SOURCES"]), ast.literal_eval(values["EXTENSION"]),
            ast.literal_eval(values["MANIFEST"]))


SOURCES, EXTENSION, MANIFEST = _compiled()


class BuildAndRecord(build_ext):
    """Build the extension (any failure ends the build), then record the digests of its inputs."""

    def run(self) -> None:
        super().run()
        digests = {source: hashlib.sha256((ROOT / source).read_bytes()).hexdigest() for source in SOURCES}
        manifest = Path(self.get_ext_fullpath("orchestrator.compiled")).parent / MANIFEST
        manifest.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")


setup(
    ext_modules=cythonize(
        # (the other inputs are included by the first: a change to one of them rebuilds it too)
        [Extension(EXTENSION, [SOURCES[0]], depends=list(SOURCES[1:]), extra_compile_args=["-O2", "-g0"])],
        compiler_directives={"language_level": 3},
    ),
    cmdclass={"build_ext": BuildAndRecord},
)
