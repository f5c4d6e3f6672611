"""Sweep files: the runs a sweep expands to, their order, their ids, and the columns of the table.
(Bad sweep files, one line and exit 2 each, are in tests/data/bad_sweeps/, run by tests/cli/test_cli_sweep.py.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from orchestrator.experiments.spec import load_sweep
from orchestrator.config import config_from_dict
from orchestrator.model.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
INJECTED = EXAMPLES / "sweeps" / "data" / "blue" / "injected"


@pytest.fixture
def folder(tmp_path):
    """A folder with two LWF workloads and two injected files, where sweep files are written."""
    for name in ("preemption.lwf", "mixed.lwf"):
        shutil.copy(EXAMPLES / name, tmp_path / name)
    (tmp_path / "ars").mkdir()
    for name in ("work_05-dur_1h-size_1small.lwf.gz", "work_10-dur_2h-size_3large.lwf.gz"):
        shutil.copy(INJECTED / name, tmp_path / "ars" / name)
    return tmp_path


def sweep_file(folder: Path, text: str) -> Path:
    path = folder / "sweep.toml"
    path.write_text(text)
    return path


def test_every_combination_of_workloads_and_axes_is_a_run_in_order(folder):
    sweep = load_sweep(sweep_file(folder, """
[sweep]
workloads = ["*.lwf"]

[simulation]
start = 2026-01-01T13:00:00Z

[axes.scheduling]
suspension = ["none", "all"]
backfilling = ["off", "aggressive", 2]
"""))
    assert sweep.columns == ["run", "workload", "inject", "suspension", "backfilling"]
    assert [(r.workload.name, dict(r.settings)["suspension"], dict(r.settings)["backfilling"]) for r in sweep.runs] == [
        (workload, suspension, backfilling)
        for workload in ("mixed.lwf", "preemption.lwf")
        for suspension in ("none", "all")
        for backfilling in ("off", "aggressive", 2)]
    run = sweep.runs[5]
    assert run.row() == {"run": run.id, "workload": "mixed.lwf", "inject": "", "suspension": "all", "backfilling": 2}
    config = config_from_dict(run.config)
    assert (config.scheduling.suspension, config.scheduling.backfilling) == ("all", 2)
    assert config.simulation.start.isoformat() == "2026-01-01T13:00:00+00:00"


def test_injected_files_multiply_the_runs_and_name_columns(folder):
    sweep = load_sweep(sweep_file(folder, """
[[sweep.workloads]]
path = "mixed.lwf"
inject = ["ars/*.lwf.gz"]
inject_fields = "work_{work}-dur_{duration}h-size_{size}"

[simulation]
site = "144 CPU:400,Memory:16384"
start = 2026-01-01T13:00:00Z
"""))
    assert sweep.columns == ["run", "workload", "inject", "work", "duration", "size"]
    assert [r.row() | {"run": ""} for r in sweep.runs] == [
        {"run": "", "workload": "mixed.lwf", "inject": "ars/work_05-dur_1h-size_1small.lwf.gz",
         "work": 5, "duration": 1, "size": "1small"},
        {"run": "", "workload": "mixed.lwf", "inject": "ars/work_10-dur_2h-size_3large.lwf.gz",
         "work": 10, "duration": 2, "size": "3large"}]


def test_paths_are_read_from_the_sweep_files_folder_not_the_current_one(folder, monkeypatch, tmp_path_factory):
    path = sweep_file(folder, '[sweep]\nworkloads = ["preemption.lwf"]\n')
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    assert [r.workload.path for r in load_sweep(path).runs] == [folder / "preemption.lwf"]


def test_a_run_keeps_its_id_when_the_sweep_grows_and_changes_it_when_its_own_settings_change(folder):
    """What `--resume` relies on: a run already done is recognised, a run whose result would differ is not."""
    def ids(text: str) -> dict:
        return {(r.workload.name, r.settings): r.id for r in load_sweep(sweep_file(folder, text)).runs}

    base = '[sweep]\nworkloads = ["preemption.lwf"]\n[axes.scheduling]\nsuspension = ["none", "all"]\n'
    first = ids(base)
    assert ids(base) == first and len(set(first.values())) == 2
    grown = ids(base.replace('["none", "all"]', '["none", "all", "serial"]'))
    assert {k: v for k, v in grown.items() if k in first} == first and len(grown) == 3
    changed = ids(base + '[scheduling]\nsuspend_rate = 64\n')
    assert not set(changed.values()) & set(first.values())
    (folder / "preemption.lwf").write_text((folder / "preemption.lwf").read_text().replace("01:00:00", "01:00:01", 1))
    assert not set(ids(base).values()) & set(first.values())   # the workload's bytes are part of the id


def test_the_same_workload_twice_is_refused(folder):
    with pytest.raises(ConfigError) as info:
        load_sweep(sweep_file(folder, '[sweep]\nworkloads = ["preemption.lwf", "*.lwf"]\n'))
    assert str(info.value).endswith("sweep.workloads: preemption.lwf is in the sweep twice (preemption.lwf)")
