"""The one compiled module, `orchestrator.planning.slottable.ctimeline` (Cython, built at `pip install`).

Everything else is in pyproject.toml. Without a C compiler the build goes on without the module and the
slot table uses the reference timeline in Python (`slottable/choice.py`): slower, the same answers."""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

from Cython.Build import cythonize


class OptionalBuildExt(build_ext):
    """Build the compiled timeline if this machine can; say so and go on if it cannot."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as error:   # (no compiler, no Python headers: setuptools raises several kinds)
            self._skipped(error)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as error:
            self._skipped(error)

    @staticmethod
    def _skipped(error: Exception) -> None:
        print(f"leasewise: the compiled slot-table timeline was not built ({error}); "
              "the Python reference will be used")


setup(
    ext_modules=cythonize(
        [Extension("orchestrator.planning.slottable.ctimeline",
                   ["orchestrator/planning/slottable/ctimeline.pyx"], extra_compile_args=["-O2"])],
        compiler_directives={"language_level": 3},
    ),
    cmdclass={"build_ext": OptionalBuildExt},
)
