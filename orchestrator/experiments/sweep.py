"""Running a sweep: the runs not finished yet go to the engine, at most as many at once as it has slots, and
each is recorded the moment it finishes, so that killing the sweep loses only the runs under way.

The engine is started only when there is something to run (a resumed sweep that is complete starts nothing).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from orchestrator.experiments.engine import RunFailed
from orchestrator.experiments.results import ResultsDir
from orchestrator.experiments.spec import Run, Sweep


class Engine(Protocol):
    slots: int
    dashboard_url: str | None

    def put(self, value: Any) -> Any: ...
    def submit(self, *args: Any) -> Any: ...
    def next_done(self, pending: list[Any]) -> Any: ...
    def result(self, ref: Any) -> dict[str, Any]: ...


@dataclass
class SweepOutcome:
    total: int
    before: int                        # finished by an earlier session
    ran: int = 0                       # finished by this one
    failed: list[tuple[Run, str]] = field(default_factory=list)
    session: str = ""
    table: Path | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)


#: called as each run ends: (the run, finished so far including earlier sessions, total, seconds, error or None)
OnRun = Callable[[Run, int, int, float, "str | None"], None]


def run_sweep(sweep: Sweep, results: ResultsDir, engine: Callable[[], AbstractContextManager[Engine]], *,
              with_leases: bool = False, on_start: Callable[[Engine], None] | None = None,
              on_run: OnRun | None = None) -> SweepOutcome:
    """Run what is not finished in `results`, record each run as it ends, then write the table."""
    results.prepare()
    finished = results.finished()
    results.log_unlogged(finished)
    remaining = [run for run in sweep.runs if run.id not in finished]
    outcome = SweepOutcome(total=len(sweep.runs), before=len(sweep.runs) - len(remaining),
                           session=uuid.uuid4().hex[:12])
    if remaining:
        with engine() as opened:
            if on_start is not None:
                on_start(opened)
            _run_all(opened, remaining, results, outcome, with_leases, on_run)
    outcome.table, outcome.rows = results.write_table(sweep)
    return outcome


def _run_all(engine: Engine, runs: list[Run], results: ResultsDir, outcome: SweepOutcome, with_leases: bool,
             on_run: OnRun | None) -> None:
    shipped: dict[Path, Any] = {}

    def ref(path: Path, raw: bytes) -> Any:
        if path not in shipped:
            shipped[path] = engine.put(raw)   # each file goes to the object store once, whatever the runs
        return shipped[path]

    queue = list(runs)
    under_way: dict[Any, tuple[Run, float]] = {}
    done = outcome.before
    while queue or under_way:
        while queue and len(under_way) < engine.slots:
            run = queue.pop(0)
            extra = run.inject
            task = engine.submit(run.workload.name, ref(run.workload.path, run.workload.raw),
                                 extra.name if extra else None, ref(extra.path, extra.raw) if extra else None,
                                 run.config, with_leases)
            results.started(run, outcome.session)
            under_way[task] = (run, time.perf_counter())
        task = engine.next_done(list(under_way))
        run, began = under_way.pop(task)
        seconds = time.perf_counter() - began
        try:
            result = engine.result(task)
        except RunFailed as exc:
            results.failed(run, str(exc), outcome.session)
            outcome.failed.append((run, str(exc)))
            error: str | None = str(exc)
        else:
            results.done(run, result, outcome.session, seconds)
            outcome.ran += 1
            done += 1
            error = None
        if on_run is not None:
            on_run(run, done, outcome.total, seconds, error)
