"""A sweep's results folder: a file per finished run, a log of what happened, and the table.

    OUT/runs/<run>.json      one per finished run: its columns, its metrics, which session ran it and on
                             which Ray node
    OUT/leases/<run>.json    with --leases: the run's `simulate --json` document
    OUT/log.jsonl            one line per run started, done or failed, with the session
    OUT/results.csv          a row per finished run: every column of the sweep, then every metric

Only the driver writes here, one file at a time, each written beside its place and renamed into it: a
sweep killed at any moment leaves each run either finished (its file is whole) or not (no file), which is
what `--resume` reads. The driver writes rather than the workers so that a worker on another machine needs
no access to this folder, and so that a run killed with the driver leaves nothing behind.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from drivers.files import write_whole
from orchestrator.experiments.spec import Run, Sweep, number_or_text
from orchestrator.model.errors import InvalidRequest
from orchestrator.model.timeutil import UTC, iso

TABLE = "results.csv"
LOG = "log.jsonl"


class ResultsDir:
    def __init__(self, path: Path, option: str = "--out"):
        self.path = Path(path)
        self.option = option
        self.runs = self.path / "runs"
        self.leases = self.path / "leases"
        self.table = self.path / TABLE
        self.log = self.path / LOG

    def check(self, resume: bool) -> None:
        """Refuse a folder that is a file, or one that holds something when not resuming (before anything
        is created: a bad --out creates nothing)."""
        if self.path.exists() and not self.path.is_dir():
            raise InvalidRequest(self.option, f"{self.path} is a file, not a folder")
        if not resume and self.path.is_dir() and any(self.path.iterdir()):
            raise InvalidRequest(self.option, f"{self.path} is not empty: pass --resume to finish the sweep "
                                              "that is there, or name another folder")

    def prepare(self) -> None:
        try:
            self.runs.mkdir(parents=True, exist_ok=True)
            self.leases.mkdir(exist_ok=True)
        except OSError as exc:
            raise InvalidRequest(self.option, f"cannot create {self.path} ({exc.strerror or exc})") from None

    def finished(self) -> dict[str, dict[str, Any]]:
        """The records of the runs finished so far, by run id (a file that does not read whole is ignored:
        its run is not finished)."""
        records: dict[str, dict[str, Any]] = {}
        if not self.runs.is_dir():
            return records
        for path in self.runs.glob("*.json"):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(record, dict) and record.get("run") == path.stem:
                records[path.stem] = record
        return records

    # -- what the driver records ---------------------------------------------------------------------------
    def started(self, run: Run, session: str) -> None:
        self._log({"event": "start", "run": run.id, "session": session})

    def done(self, run: Run, outcome: dict[str, Any], session: str, seconds: float) -> dict[str, Any]:
        """Write the run's files (its leases first, so a run file always has them when asked) and log it."""
        if "simulation" in outcome:
            write_whole(self.leases / f"{run.id}.json", json.dumps(outcome["simulation"], indent=1) + "\n")
        record = {"run": run.id, "row": run.row(), "metrics": outcome["metrics"], "session": session,
                  "finished": iso(datetime.now(UTC)), "seconds": round(seconds, 3), "node": outcome.get("node")}
        write_whole(self.runs / f"{run.id}.json", json.dumps(record, indent=1) + "\n")
        self._log({"event": "done", "run": run.id, "session": session, "seconds": round(seconds, 3),
                   "node": outcome.get("node")})
        return record

    def log_unlogged(self, finished: dict[str, dict[str, Any]]) -> None:
        """Log "done" for each finished run whose "done" the log lacks: a driver killed between writing
        the run's file and its log line (the file is the truth; the line says it was found, in the
        session that ran it)."""
        logged = {e["run"] for e in self.events() if e.get("event") == "done"}
        for run_id, record in sorted(finished.items()):
            if run_id not in logged:
                self._log({"event": "done", "run": run_id, "session": record.get("session"),
                           "seconds": record.get("seconds"), "found": True})

    def failed(self, run: Run, message: str, session: str) -> None:
        self._log({"event": "failed", "run": run.id, "session": session, "error": message})

    def _log(self, entry: dict[str, Any]) -> None:
        with self.log.open("a") as fh:
            fh.write(json.dumps({"at": iso(datetime.now(UTC)), **entry}) + "\n")

    def events(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    # -- the table -------------------------------------------------------------------------------------------
    def write_table(self, sweep: Sweep) -> tuple[Path, list[dict[str, Any]]]:
        """results.csv from the finished runs of this sweep, in the sweep's order; returns it and its rows."""
        records = self.finished()
        rows = []
        metric_names: list[str] = []
        for run in sweep.runs:
            record = records.get(run.id)
            if record is None:
                continue
            for name in record["metrics"]:
                if name not in metric_names:
                    metric_names.append(name)
            rows.append({**run.row(), **record["metrics"]})
        columns = sweep.columns + [m for m in metric_names if m not in sweep.columns]
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow([_cell(row.get(column)) for column in columns])
        write_whole(self.table, out.getvalue())
        return self.table, rows


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _value(text: str) -> Any:
    if text == "":
        return None
    if text in ("true", "false"):
        return text == "true"
    return number_or_text(text)


def read_table(path: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """A results table's columns and rows, numbers as numbers; one error line naming the file if it is not one."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise InvalidRequest("RESULTS", f"cannot read {path} ({exc.strerror or exc})") from None
    try:
        table = list(csv.reader(io.StringIO(text)))
    except csv.Error as exc:
        raise InvalidRequest("RESULTS", f"{path} is not a CSV table ({exc})") from None
    if not table:
        raise InvalidRequest("RESULTS", f"{path} is empty")
    columns, rows = table[0], []
    for lineno, cells in enumerate(table[1:], start=2):
        if len(cells) != len(columns):
            raise InvalidRequest("RESULTS", f"{path}:{lineno}: {len(cells)} cells for {len(columns)} columns")
        rows.append({column: _value(cell) for column, cell in zip(columns, cells)})
    return columns, rows

