"""The scheduler's hot path compiled by mypyc (`orchestrator/compiled.py`): built by pip install, planning
exactly as its Python sources do, and set aside for the sources when they are edited after the build."""

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


def _python(code: str, *args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != compiled.PURE_ENV}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env={**environ, **(env or {})},
                          capture_output=True, text=True, timeout=600)


def test_the_compiled_group_is_built_from_the_current_sources():
    """pip install builds it (deploy/install.sh checks that it did); after an edit to one of its sources,
    `pip install -e .` builds it again."""
    import importlib

    assert compiled.stale_modules() == [], "run `pip install -e .` again: the compiled group is older than its sources"
    for module in compiled.MODULES:
        importlib.import_module(module.removesuffix(".py").replace("/", "."))
    assert compiled.in_use(), "the compiled group was not built (pip install builds it with mypy and a C compiler)"
    for module in compiled.MODULES:
        assert not sys.modules[module.removesuffix(".py").replace("/", ".")].__file__.endswith(".py"), module


def test_the_sources_are_used_when_asked_and_the_compiled_timeline_stays():
    code = ("import orchestrator.compiled as c, orchestrator.planning.lease_scheduler as l, "
            "orchestrator.planning.slottable.ctimeline as t; print(l.__file__, c.in_use(), t.__file__)")
    pure = _python(code, cwd=ROOT, env={compiled.PURE_ENV: "1"})
    source, in_use, timeline = pure.stdout.split()
    assert source.endswith("lease_scheduler.py") and in_use == "False" and not timeline.endswith(".pyx")
    assert pure.stderr == ""   # (asked for: nothing to warn about)
    assert _python(code, cwd=ROOT).stdout.split()[1] == "True"


def _simulate(workload: Path, config: str, tmp: Path, pure: bool) -> dict:
    (tmp / "config.toml").write_text(config)
    out = tmp / ("pure.json" if pure else "compiled.json")
    run = _python(CLI, "simulate", str(workload), "--config", str(tmp / "config.toml"), "--json", str(out),
                  "--quiet", cwd=tmp, env={compiled.PURE_ENV: "1"} if pure else None)
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
def test_the_compiled_group_plans_exactly_as_its_sources(workload, config, tmp_path):
    """Every lease's record (its reservations, hosts, times and states) and every metric but the wall time."""
    compiled_run = _simulate(workload, config, tmp_path, pure=False)
    pure_run = _simulate(workload, config, tmp_path, pure=True)
    assert compiled_run["leases"] and compiled_run == pure_run


def _copy_of_the_package(tmp: Path) -> Path:
    shutil.copytree(ROOT / "orchestrator", tmp / "orchestrator", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp


PROBE = ("import orchestrator.compiled as c, orchestrator.planning.lease_scheduler as l; "
         "print(l.__file__.removeprefix(str(__import__('pathlib').Path.cwd())), c.in_use())")


def test_an_edited_source_sets_the_stale_build_aside_with_one_line_saying_so(tmp_path):
    """A copy of the installed package: compiled as it is; after an edit to one source of the group, the
    whole group loads from source (a compiled module would call the others natively), and a simulation runs."""
    root = _copy_of_the_package(tmp_path)
    before = _python(PROBE, cwd=root)
    assert before.stdout.startswith("/orchestrator/planning/lease_scheduler.cpython")   # (the copy's own build)
    assert before.stdout.split()[1] == "True" and before.stderr == ""

    edited = root / "orchestrator" / "planning" / "overheads.py"
    edited.write_text(edited.read_text() + "\n# an edit\n")
    assert compiled.stale_modules(root) == [m for m in compiled.MODULES if m.endswith("overheads.py")]
    after = _python(PROBE, cwd=root)
    assert after.stdout.split() == ["/orchestrator/planning/lease_scheduler.py", "False"]
    assert after.stderr.count("\n") == 1 and "orchestrator/planning/overheads.py changed after it was compiled" in after.stderr
    run = _python(CLI, "simulate", str(ROOT / "examples" / "mixed.lwf"), "--quiet", cwd=root)
    assert run.returncode == 0 and "leases done" in run.stdout


def test_a_group_built_in_part_or_without_its_record_is_stale_whole(tmp_path):
    root = _copy_of_the_package(tmp_path)
    assert compiled.stale_modules(root) == []
    (root / "orchestrator" / compiled.MANIFEST).unlink()
    assert compiled.stale_modules(root) == list(compiled.MODULES)
    shutil.copy(ROOT / "orchestrator" / compiled.MANIFEST, root / "orchestrator" / compiled.MANIFEST)
    compiled.built(compiled.MODULES[0], root).unlink()
    assert compiled.stale_modules(root) == list(compiled.MODULES[1:])
    assert _python(PROBE, cwd=root).stdout.split()[1] == "False"


def test_frozen_values_copy_as_themselves_and_pickle_by_value():
    """Compiled, a frozen dataclass cannot have its fields set one by one, which copy and pickle do by
    default: they are immutable, so a copy is the value itself, and a pickle its constructor's arguments."""
    image = VMImage(disk="debian12.qcow2", size_mib=2048, login_user="debian")
    request = LeaseRequest(LeaseType.BEST_EFFORT, (Resources.of(2, 4096),) * 3, timedelta(hours=1), EPOCH,
                           image=image, real_duration=timedelta(minutes=20))
    assert copy.deepcopy(request) is request and copy.copy(image) is image
    back = pickle.loads(pickle.dumps(request))
    assert back == request and back.image == image and back.total == request.total
    assert back.uniform == Resources.of(2, 4096) and back.numnodes == 3


def test_a_deep_copy_of_a_reservation_keeps_every_field_and_its_links_within_the_copy():
    """Compiled, `Reservation` has a native `__init__` (no bare `__new__` to fill in), so copies and pickles
    go through `__reduce__`; the intents' snapshots deep-copy a VM reservation with its overheads, which
    point back at it."""
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


def test_amounts_and_user_ids_keep_their_type_as_in_the_sources():
    """A `float` annotation would make compiled code turn every int into a float (`2` written back as `2.0`)."""
    code = ("from orchestrator.model.resources import Resources, add, scale\n"
            "from orchestrator.workloads.swf import parse_swf\n"
            "r = Resources.of(2, 4096)\n"
            "w = parse_swf('1 0 0 60 1 -1 -1 1 120 -1 1 17 1 1 1 1 -1 -1\\n')\n"
            "print(add(r, r), scale(r, 3), w.requests[0][1].user)")
    compiled_run = _python(code, cwd=ROOT)
    pure_run = _python(code, cwd=ROOT, env={compiled.PURE_ENV: "1"})
    assert compiled_run.returncode == 0, compiled_run.stderr
    assert compiled_run.stdout == pure_run.stdout and "cpu=400," in compiled_run.stdout
    assert compiled_run.stdout.split()[-1] == "17"
