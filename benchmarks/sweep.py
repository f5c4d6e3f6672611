"""Sweep throughput on Ray's local mode: the small example sweep at 1, 2 and all local workers, and with
`--reference` the reference's 144-run experiment (examples/sweeps/blue-30days.toml) at all workers.

Run: `python benchmarks/sweep.py [--reference] [--only-reference] [--repeat N] [--out DIR]`.
Prints, per sweep and worker count: the wall time of the whole sweep (Ray's start and stop included), the
time from Ray ready to the last run finished, the speed-up of each over one worker, and how many runs were
under way at once on average (the runs' own times added up, over the second figure): near the worker count
when Ray keeps them all busy, so a speed-up short of it comes from the machine or the longest run. Every
sweep writes into a fresh temporary folder, so nothing is resumed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.experiments.engine import RayEngine  # noqa: E402
from orchestrator.experiments.results import ResultsDir  # noqa: E402
from orchestrator.experiments.spec import load_sweep  # noqa: E402
from orchestrator.experiments.sweep import run_sweep  # noqa: E402

SWEEPS = ROOT / "examples" / "sweeps"


def timed_sweep(path: Path, workers: int, keep: Path | None = None) -> tuple[float, float, int, float]:
    """(wall seconds, seconds from Ray ready to the last run, runs, runs at once on average) of one sweep
    from scratch; its results go to `keep` (which must not hold results yet) or to a temporary folder."""
    sweep = load_sweep(path)
    ready: list[float] = []
    with tempfile.TemporaryDirectory(prefix="leasewise-bench-") as folder:
        results = ResultsDir(keep if keep is not None else Path(folder) / "out")
        results.check(resume=False)
        start = time.perf_counter()
        outcome = run_sweep(sweep, results, lambda: RayEngine(workers=workers),
                            on_start=lambda engine: ready.append(time.perf_counter()))
        last = time.perf_counter()
        busy = sum(event["seconds"] for event in results.events() if event["event"] == "done")
    wall = last - start
    if outcome.failed:
        raise SystemExit(f"{len(outcome.failed)} runs failed: {outcome.failed[0][1]}")
    return wall, last - ready[0], outcome.ran, busy / (last - ready[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", action="store_true", help="also run the 144-run reference experiment")
    parser.add_argument("--only-reference", action="store_true", help="only the reference experiment")
    parser.add_argument("--repeat", type=int, default=1, help="run the small sweep's series this many times")
    parser.add_argument("--out", type=Path, help="keep the reference experiment's results in this (new) folder")
    args = parser.parse_args()
    cpus = os.cpu_count() or 1
    print(f"{'sweep':18} {'workers':>7} {'runs':>5} {'wall s':>8} {'runs s':>8} {'speed-up wall':>14} {'speed-up runs':>14} "
          f"{'at once':>8}", flush=True)
    if not args.only_reference:
        for _ in range(args.repeat):
            one = None
            for workers in sorted({1, 2, cpus}):
                wall, running, runs, at_once = timed_sweep(SWEEPS / "small.toml", workers)
                one = one or (wall, running)
                label = f"{workers}" + (" (all)" if workers == cpus else "")
                print(f"{'small.toml':18} {label:>7} {runs:>5} {wall:8.1f} {running:8.1f} {one[0] / wall:13.2f}x "
                      f"{one[1] / running:13.2f}x {at_once:8.2f}", flush=True)
    if args.reference or args.only_reference:
        wall, running, runs, at_once = timed_sweep(SWEEPS / "blue-30days.toml", cpus, keep=args.out)
        print(f"{'blue-30days.toml':18} {cpus:>7} {runs:>5} {wall:8.1f} {running:8.1f} {'':>14} {'':>14} {at_once:8.2f}",
              flush=True)
    print(f"(machine: {cpus} CPUs; Python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()
