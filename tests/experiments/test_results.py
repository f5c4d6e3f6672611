"""A sweep's results folder (`experiments/results.py`) after a driver was killed between two writes."""

from __future__ import annotations

import json

from orchestrator.experiments.results import ResultsDir


def test_a_finished_run_whose_done_line_was_never_written_is_logged_once_when_found(tmp_path):
    results = ResultsDir(tmp_path / "out")
    results.prepare()
    for run_id, session in (("a1", "s1"), ("b2", "s1")):
        record = {"run": run_id, "row": {}, "metrics": {}, "session": session, "finished": "x", "seconds": 1.5}
        (results.runs / f"{run_id}.json").write_text(json.dumps(record))
    results._log({"event": "start", "run": "a1", "session": "s1"})
    results._log({"event": "done", "run": "a1", "session": "s1", "seconds": 1.5})
    results._log({"event": "start", "run": "b2", "session": "s1"})   # (killed after b2's file, before its line)

    results.log_unlogged(results.finished())
    results.log_unlogged(results.finished())   # (a second resume adds nothing)

    done = [e for e in results.events() if e["event"] == "done"]
    assert [(e["run"], e["session"], e.get("found")) for e in done] == [("a1", "s1", None), ("b2", "s1", True)]
