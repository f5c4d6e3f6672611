"""The modules Cython compiles (`orchestrator/compiled.py`): built by pip install (or `python3 setup.py
build_ext --inplace`), planning exactly as their Python sources do, set aside for the sources when one of
their inputs (a `.py` or its `.pxd`) is edited after the build, and all run from source when asked."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import pickle
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from orchestrator import compiled
from orchestrator.model.lease import LeaseRequest, LeaseType, VMImage
from orchestrator.model.reservations import Reservation, ReservationKind
from orchestrator.model.resources import Resources
from tests.support.times import EPOCH

ROOT = Path(__file__).resolve().parents[1]
KTH = ROOT / "benchmarks" / "data" / "KTH-SP2-1996-2.1-cln.swf.gz"
CLI = "from orchestrator.cli import main; main()"
#: which file each compiled module was loaded from, and whether the set is in use
PROBE = ("import orchestrator.compiled as c, importlib, pathlib; cwd = str(pathlib.Path.cwd())\n"
         "print(*[importlib.import_module(c.module_name(m)).__file__.removeprefix(cwd) for m in c.MODULES], "
         "c.in_use())")

needs_build = pytest.mark.skipif(not compiled.in_use(), reason="the compiled modules are not built here (a checkout "
                                 "without `python3 setup.py build_ext --inplace`: everything runs from source)")


def _python(code: str, *args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in (compiled.PURE_ENV, "PYTHONPATH")}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env={**environ, **(env or {})},
                          capture_output=True, text=True, timeout=600)


@needs_build
def test_every_compiled_module_is_built_from_its_current_inputs():
    """Each module and its .pxd have the digests recorded at the build; `import` gives the extensions."""
    assert compiled.stale_modules() == [], "run `python3 setup.py build_ext --inplace` again: the build is older"
    recorded = json.loads((ROOT / "orchestrator" / compiled.MANIFEST).read_text())
    assert recorded == compiled.digests()
    assert any(path.endswith(".pxd") for path in recorded)   # (the C types are inputs too)
    for module in compiled.MODULES:
        assert compiled.built(module) is not None, module
    assert compiled.in_use()


@needs_build
def test_the_variable_runs_every_module_from_source():
    pure = _python(PROBE, cwd=ROOT, env={compiled.PURE_ENV: "1"})
    *files, in_use = pure.stdout.split()
    assert in_use == "False" and all(f.endswith(".py") for f in files) and len(files) == len(compiled.MODULES)
    assert pure.stderr == ""   # (asked for: nothing to warn about)
    *files, in_use = _python(PROBE, cwd=ROOT).stdout.split()
    assert in_use == "True" and not any(f.endswith(".py") for f in files)


def _simulate(workload: Path, config: str, tmp: Path, pure: bool) -> dict:
    (tmp / "config.toml").write_text(config)
    out = tmp / ("pure.json" if pure else "compiled.json")
    run = _python(CLI, "simulate", str(workload), "--config", str(tmp / "config.toml"), "--json", str(out),
                  "--quiet", cwd=ROOT, env={compiled.PURE_ENV: "1"} if pure else None)
    assert run.returncode == 0, run.stderr
    result = json.loads(out.read_text())
    del result["metrics"]["wall_seconds"]
    return result


@needs_build
@pytest.mark.parametrize("workload, config", [
    (ROOT / "examples" / "preemption.lwf", '[simulation]\nstart = "2026-01-01T13:00:00Z"\n'),
    (ROOT / "examples" / "mixed.lwf", ""),
    (KTH, '[scheduling]\nbackfilling = "aggressive"\n[workload.swf]\nfirst = 4000\n'),
    (KTH, '[scheduling]\npreemption_mode = "migrate-first"\n[workload.swf]\nfirst = 1500\n'),
])
def test_the_compiled_modules_plan_exactly_as_their_sources(workload, config, tmp_path):
    """Every lease's record (its reservations, hosts, times and states) and every metric but the wall time."""
    compiled_run = _simulate(workload, config, tmp_path, pure=False)
    pure_run = _simulate(workload, config, tmp_path, pure=True)
    assert compiled_run["leases"] and compiled_run == pure_run


def _copy_of_the_package(tmp: Path, built: bool = True) -> Path:
    """The package (with its build, or without: its sources alone) under `tmp`."""
    left_out = ["__pycache__"] + ([] if built else ["*.so", "*.c", compiled.MANIFEST])
    shutil.copytree(ROOT / "orchestrator", tmp / "orchestrator", ignore=shutil.ignore_patterns(*left_out))
    shutil.copytree(ROOT / "drivers", tmp / "drivers", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp


@needs_build
@pytest.mark.parametrize("edited", [compiled.MODULES[-1], next(
    p.replace(".py", ".pxd") for p in compiled.MODULES if (ROOT / p.replace(".py", ".pxd")).exists())])
def test_an_edited_input_sets_the_stale_build_aside_with_one_line_saying_so(tmp_path, edited):
    """A copy of the built package: compiled as it is; after an edit to one input (a source, or the .pxd
    beside one), every compiled module loads from source, and a simulation runs."""
    root = _copy_of_the_package(tmp_path)
    before = _python(PROBE, cwd=root)
    assert before.stdout.split()[-1] == "True" and before.stderr == ""
    path = root / edited
    path.write_text(path.read_text() + "\n# an edit\n")
    module = edited.replace(".pxd", ".py")
    assert compiled.stale_modules(root) == [module]
    *files, in_use = _python(PROBE, cwd=root).stdout.split()
    assert in_use == "False" and all(f.endswith(".py") for f in files)
    after = _python(PROBE, cwd=root)
    assert after.stderr.count("\n") == 1 and f"{module} changed after it was compiled" in after.stderr
    run = _python(CLI, "simulate", str(ROOT / "examples" / "mixed.lwf"), "--quiet", cwd=root)
    assert run.returncode == 0 and "leases done" in run.stdout


@needs_build
def test_a_set_built_in_part_or_without_its_record_is_stale_whole(tmp_path):
    root = _copy_of_the_package(tmp_path)
    assert compiled.stale_modules(root) == []
    (root / "orchestrator" / compiled.MANIFEST).unlink()
    assert compiled.stale_modules(root) == list(compiled.MODULES)
    shutil.copy(ROOT / "orchestrator" / compiled.MANIFEST, root / "orchestrator" / compiled.MANIFEST)
    compiled.built(compiled.MODULES[0], root).unlink()
    assert compiled.stale_modules(root) == list(compiled.MODULES[1:])
    assert _python(PROBE, cwd=root).stdout.split()[-1] == "False"


def test_a_module_that_does_not_compile_fails_the_build(tmp_path):
    """setup.py does not go on without a module it could not compile: the build (and so pip install, and
    deploy/install.sh) fails, naming it."""
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    _copy_of_the_package(tmp_path, built=False)
    broken = tmp_path / compiled.MODULES[0].replace(".py", ".pxd")
    broken.write_text("cdef class \n")   # (not Cython)
    build = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=600)
    assert build.returncode != 0
    assert compiled.MODULES[0].replace(".py", ".pxd") in build.stdout + build.stderr
    assert compiled.built(compiled.MODULES[0], tmp_path) is None


def test_frozen_values_copy_as_themselves_and_pickle_by_value():
    """Immutable values: a copy is the value itself, and a pickle its constructor's arguments."""
    image = VMImage(disk="debian12.qcow2", size_mib=2048, login_user="debian")
    request = LeaseRequest(LeaseType.BEST_EFFORT, (Resources.of(2, 4096),) * 3, timedelta(hours=1), EPOCH,
                           image=image, real_duration=timedelta(minutes=20))
    assert copy.deepcopy(request) is request and copy.copy(image) is image
    back = pickle.loads(pickle.dumps(request))
    assert back == request and back.image == image and back.total == request.total
    assert back.uniform == Resources.of(2, 4096) and back.numnodes == 3


def test_a_deep_copy_of_a_reservation_keeps_every_field_and_its_links_within_the_copy():
    """The intents' snapshots deep-copy a VM reservation with its overheads, which point back at it."""
    vm = Reservation(7, ReservationKind.VM, EPOCH, EPOCH + timedelta(hours=1), {"h1": Resources.of(1, 512)},
                     nodes={0: "h1"}, id=3, premature_end=EPOCH + timedelta(minutes=30), extra={"k": [1]})
    vm.post.append(Reservation(7, ReservationKind.SUSPEND, vm.end, vm.end + timedelta(minutes=1),
                               {"h1": Resources.of(1, 512)}, nodes={0: "h1"}, id=4, vm=vm))
    for twin in (copy.deepcopy(vm), pickle.loads(pickle.dumps(vm))):
        assert twin is not vm and twin.post[0] is not vm.post[0] and twin.post[0].vm is twin
        for field in dataclasses.fields(Reservation):
            if field.name not in ("post", "vm"):
                assert getattr(twin, field.name) == getattr(vm, field.name), field.name
                assert getattr(twin.post[0], field.name) == getattr(vm.post[0], field.name), field.name
        assert twin.extra is not vm.extra and twin.nodes is not vm.nodes
    fresh = Reservation(1, ReservationKind.VM, EPOCH, EPOCH, {})
    assert (fresh.nodes, fresh.pre, fresh.post, fresh.extra, fresh.id, fresh.vm) == ({}, [], [], {}, 0, None)
    assert fresh.nodes is not Reservation(1, ReservationKind.VM, EPOCH, EPOCH, {}).nodes
