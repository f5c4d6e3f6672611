"""The compiled core (`orchestrator/compiled.py`: the slot table's `core.pyx`, Cython): built by pip install
(or `python3 setup.py build_ext --inplace`), planning exactly as the plain reference under tests/reference/
does, refused at import when it is missing or older than its source, and a build that fails fails loudly."""

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
#: the CLI with every slot table on the plain reference core
CLI_ON_REFERENCE = ("import orchestrator.planning.slottable.table as table, tests.reference.core as core; "
                    "table.DEFAULT_CORE = core; from orchestrator.cli import main; main()")
IMPORT = "import orchestrator.planning.slottable.table"


def _python(code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=environ,
                          capture_output=True, text=True, timeout=900)


def test_the_core_is_built_from_its_current_inputs():
    """Its inputs have the digests recorded at the build, and `import` gives the extension."""
    from orchestrator.planning.slottable import core
    assert compiled.problem() is None
    recorded = json.loads((ROOT / "orchestrator" / compiled.MANIFEST).read_text())
    assert recorded == compiled.digests() and sorted(recorded) == sorted(compiled.SOURCES)
    assert core.__name__ == compiled.EXTENSION and Path(core.__file__) == compiled.built()


def _simulate(workload: Path, config: str, tmp: Path, code: str, name: str) -> dict:
    (tmp / "config.toml").write_text(config)
    out = tmp / f"{name}.json"
    run = _python(code, "simulate", str(workload), "--config", str(tmp / "config.toml"), "--json", str(out),
                  "--quiet", cwd=ROOT)
    assert run.returncode == 0, run.stderr
    result = json.loads(out.read_text())
    del result["metrics"]["wall_seconds"]
    return result


@pytest.mark.parametrize("workload, config", [
    (ROOT / "examples" / "preemption.lwf", '[simulation]\nstart = "2026-01-01T13:00:00Z"\n'),
    (ROOT / "examples" / "mixed.lwf", ""),
    (KTH, '[scheduling]\nbackfilling = "aggressive"\n[workload.swf]\nfirst = 4000\n'),
    (KTH, '[scheduling]\npreemption_mode = "migrate-first"\n[workload.swf]\nfirst = 1500\n'),
])
def test_the_compiled_core_plans_exactly_as_the_plain_reference(workload, config, tmp_path):
    """Every lease's record (its reservations, hosts, times and states) and every metric but the wall time."""
    compiled_run = _simulate(workload, config, tmp_path, CLI, "compiled")
    reference_run = _simulate(workload, config, tmp_path, CLI_ON_REFERENCE, "reference")
    assert compiled_run["leases"] and compiled_run == reference_run


def _copy_of_the_package(tmp: Path, built: bool = True) -> Path:
    """The package (with its build, or without: its sources alone) under `tmp`."""
    left_out = ["__pycache__"] + ([] if built else ["*.so", "*.c", compiled.MANIFEST])
    shutil.copytree(ROOT / "orchestrator", tmp / "orchestrator", ignore=shutil.ignore_patterns(*left_out))
    shutil.copytree(ROOT / "drivers", tmp / "drivers", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp


def test_an_edited_source_stops_the_import_with_one_line_saying_what_to_run(tmp_path):
    """A copy of the built package imports; after an edit to core.pyx, importing the slot table (and so
    any command that plans) fails, naming the file and the build command; rebuilt, it runs again."""
    root = _copy_of_the_package(tmp_path)
    assert _python(IMPORT, cwd=root).returncode == 0
    source = root / compiled.SOURCES[0]
    source.write_text(source.read_text() + "\n# an edit\n")
    assert compiled.problem(root) is not None
    failed = _python(IMPORT, cwd=root)
    assert failed.returncode != 0
    last = failed.stderr.strip().splitlines()[-1]
    assert f"{compiled.SOURCES[0]} changed after the compiled core was built" in last and compiled.BUILD in last
    run = _python(CLI, "simulate", str(ROOT / "examples" / "mixed.lwf"), "--quiet", cwd=root)
    assert run.returncode != 0 and compiled.BUILD in run.stderr
    (root / "orchestrator" / compiled.MANIFEST).write_text(json.dumps(compiled.digests(root)))   # (as a build)
    assert _python(IMPORT, cwd=root).returncode == 0


def test_a_core_not_built_or_without_its_record_is_refused(tmp_path):
    root = _copy_of_the_package(tmp_path)
    assert compiled.problem(root) is None
    (root / "orchestrator" / compiled.MANIFEST).unlink()
    assert "changed after the compiled core was built" in compiled.problem(root)
    compiled.built(root).unlink()
    assert "is not built" in compiled.problem(root)
    failed = _python(IMPORT, cwd=root)
    assert failed.returncode != 0 and "is not built" in failed.stderr and compiled.BUILD in failed.stderr


def test_a_core_that_does_not_compile_fails_the_build(tmp_path):
    """setup.py does not go on without the core: the build (and so pip install, and deploy/install.sh)
    fails, naming the file; the copy is left without a core, which its import refuses."""
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    _copy_of_the_package(tmp_path, built=False)
    broken = tmp_path / compiled.SOURCES[0]
    broken.write_text(broken.read_text() + "\ncdef class \n")   # (not Cython)
    build = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=600)
    assert build.returncode != 0
    assert compiled.SOURCES[0] in build.stdout + build.stderr
    assert compiled.built(tmp_path) is None


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
