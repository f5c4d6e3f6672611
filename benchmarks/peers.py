"""leasewise next to a peer simulator on the same trace: AccaSim's EASY backfilling on KTH-SP2.

Run: `python benchmarks/peers.py [--leases N]`. Installs nothing: when AccaSim (`pip install accasim`)
is not importable it says so and exits 0. Each run is a process of its own, as its user runs it, writing
its record of every job and nothing to the console: leasewise as `leasewise simulate KTH --json OUT
--quiet` (start-up and the --json file included), AccaSim's simulator in a forked child with its defaults
(it writes its dispatching plan, one line per job, and its statistics file), the console output off. The
ratio to that run is the one the target is stated against (<= 0.25x). AccaSim with both files off is
printed too: the simulation alone, for comparison. AccaSim is an HPC simulator (no VMs, no suspension or
migration overheads), so its schedule differs from leasewise's: the figures compare speed only.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KTH = ROOT / "benchmarks" / "data" / "KTH-SP2-1996-2.1-cln.swf.gz"
KTH_NODES = 100   # the trace's MaxProcs: 100 one-processor nodes, as leasewise's site from the header


def _leasewise(n: int | None, tmp: str) -> tuple[float, float, int]:
    """`leasewise simulate KTH --json OUT --quiet`, a process of its own: (wall s, CPU s, leases done)."""
    config = Path(tmp) / "leasewise.toml"
    config.write_text('[scheduling]\nbackfilling = "aggressive"\n' + (f"[workload.swf]\nfirst = {n}\n" if n else ""))
    out = Path(tmp) / "leasewise.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    wall = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", "from orchestrator.cli import main; main()", "simulate", str(KTH),
                              "--config", str(config), "--json", str(out), "--quiet"], env=env,
                             stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - wall
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit("leasewise simulate failed")
    return wall, usage.ru_utime + usage.ru_stime, json.loads(out.read_text())["metrics"]["leases_done"]


def _accasim(n: int | None, tmp: str, files: bool, out: mp.Queue) -> None:
    """AccaSim's EASY backfilling on KTH-SP2, writing its dispatching plan and statistics files (its
    defaults) when `files`, else neither: (wall s, CPU s, jobs dispatched) put on `out`."""
    import collections
    import collections.abc
    import logging

    # AccaSim 1.1.3 (its last release) imports Mapping from `collections`, gone since Python 3.10: the
    # name is put back in this child process only
    for name in ("Mapping", "MutableMapping", "Sequence", "Iterable"):
        if not hasattr(collections, name):
            setattr(collections, name, getattr(collections.abc, name))

    from accasim.base.allocator_class import FirstFit
    from accasim.base.scheduler_class import EASYBackfilling
    from accasim.base.simulator_class import Simulator

    logging.disable(logging.WARNING)
    lines = gzip.decompress(KTH.read_bytes()).decode().splitlines(keepends=True)
    if n:
        jobs = [line for line in lines if line.strip() and not line.startswith(";")][:n]
        lines = [line for line in lines if line.startswith(";")] + jobs
    workload = Path(tmp) / "KTH-SP2.swf"
    workload.write_text("".join(lines))
    system = Path(tmp) / "system.json"
    system.write_text(json.dumps({"groups": {"g0": {"core": 1}},
                                  "resources": {"g0": KTH_NODES}}))
    wall, cpu = time.perf_counter(), time.process_time()
    simulator = Simulator(str(workload), str(system), EASYBackfilling(FirstFit()),
                          RESULTS_FOLDER_PATH=str(Path(tmp) / "results"), scheduling_output=files,
                          statistics_output=files, show_statistics=False)
    simulator.start_simulation(system_status=False)
    out.put((time.perf_counter() - wall, time.process_time() - cpu, simulator.dispatched_jobs))


def _in_child(target, *args):
    ctx = mp.get_context("fork")
    queue: mp.Queue = ctx.Queue()
    child = ctx.Process(target=target, args=(*args, queue))
    child.start()
    child.join()
    if child.exitcode != 0:
        raise SystemExit(f"{target.__name__.strip('_')} failed (exit code {child.exitcode})")
    return queue.get()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leases", type=int, help="first N jobs of the trace only")
    args = parser.parse_args()
    if args.leases is not None and args.leases < 1:
        parser.error("--leases: must be at least 1")
    if importlib.util.find_spec("accasim") is None:
        print("AccaSim is not installed (pip install accasim): nothing to compare against; leasewise alone is "
              "benchmarks/simulate.py")
        return
    with tempfile.TemporaryDirectory() as tmp:
        lw_wall, lw_cpu, lw_done = _leasewise(args.leases, tmp)
        acc_wall, acc_cpu, acc_done = _in_child(_accasim, args.leases, tmp, True)
        bare_wall, bare_cpu, bare_done = _in_child(_accasim, args.leases, tmp, False)
    print(f"{'KTH-SP2' + (f' (first {args.leases:,} jobs)' if args.leases else ''):52} {'wall s':>8} {'CPU s':>8} {'jobs done':>10}")
    print(f"{'leasewise simulate --json (aggressive, VMs)':52} {lw_wall:8.2f} {lw_cpu:8.2f} {lw_done:10d}")
    print(f"{'AccaSim 1.x (EASY backfilling, FirstFit; its files)':52} {acc_wall:8.2f} {acc_cpu:8.2f} {acc_done:10d}")
    print(f"{'AccaSim 1.x, neither file written':52} {bare_wall:8.2f} {bare_cpu:8.2f} {bare_done:10d}")
    ratio = lw_wall / acc_wall
    print(f"leasewise / AccaSim: wall {ratio:.2f}x, CPU {lw_cpu / acc_cpu:.2f}x (target <= 0.25x: "
          f"{'met' if ratio <= 0.25 else 'NOT met'}); to AccaSim writing neither file: wall "
          f"{lw_wall / bare_wall:.2f}x")


if __name__ == "__main__":
    main()
