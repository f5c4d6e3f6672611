"""Simulator throughput: the full KTH-SP2 trace and a synthetic 100k-lease trace on 1,000 hosts.

Run: `python benchmarks/simulate.py [--only kth|synthetic] [--leases N] [--profile]`.
Prints wall seconds, leases per second and peak RSS per run (each run in a fresh child process, so the
peak RSS is that run's own). Targets on a 2-core machine: KTH-SP2 <= 10 s, 100k leases / 1,000 hosts
<= 120 s, peak RSS <= 1 GiB.
"""

from __future__ import annotations

import argparse
import cProfile
import multiprocessing as mp
import pstats
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.model.config import config_from_dict  # noqa: E402
from orchestrator.model.resources import Resources  # noqa: E402
from orchestrator.runtime.simulator import Simulator  # noqa: E402
from orchestrator.workloads import load_workload  # noqa: E402
from orchestrator.workloads.synthetic import synthetic_workload  # noqa: E402

KTH = ROOT / "benchmarks" / "data" / "KTH-SP2-1996-2.1-cln.swf.gz"


def _kth(n: int | None):
    settings = {"scheduling": {"backfilling": "aggressive"}}
    if n:
        settings["workload"] = {"swf": {"first": n}}
    config = config_from_dict(settings)
    return f"KTH-SP2 ({KTH.name})", load_workload(KTH, config), config


def _synthetic(n: int | None):
    n = n or 100_000
    config = config_from_dict({"scheduling": {"backfilling": "aggressive"}})
    workload = synthetic_workload(n, 1000, Resources.of(16, 65536), seed=7)
    return f"synthetic {n:,} leases / 1,000 hosts", workload, config


def _run(kind: str, n: int | None, profile: bool, out: mp.Queue) -> None:
    name, workload, config = (_kth if kind == "kth" else _synthetic)(n)
    sim = Simulator(workload, config)
    profiler = cProfile.Profile() if profile else None
    start = time.perf_counter()
    if profiler:
        profiler.enable()
    result = sim.run()
    if profiler:
        profiler.disable()
    wall = time.perf_counter() - start
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    m = result.metrics
    out.put((name, len(workload.requests), len(result.hosts), wall, rss_mib, m))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["kth", "synthetic"])
    parser.add_argument("--leases", type=int, help="first N leases only (both runs)")
    parser.add_argument("--profile", action="store_true", help="print a cProfile summary per run")
    args = parser.parse_args()
    kinds = [args.only] if args.only else ["kth", "synthetic"]
    ctx = mp.get_context("fork")
    rows = []
    for kind in kinds:
        queue: mp.Queue = ctx.Queue()
        child = ctx.Process(target=_run, args=(kind, args.leases, args.profile, queue))
        child.start()
        rows.append(queue.get())
        child.join()
    print(f"{'run':44} {'leases':>8} {'hosts':>6} {'wall s':>8} {'leases/s':>9} {'peak RSS MiB':>13} "
          f"{'done':>7} {'util':>6} {'BE wait s':>10}")
    for name, n, hosts, wall, rss, m in rows:
        print(f"{name:44} {n:8d} {hosts:6d} {wall:8.2f} {n / wall:9.0f} {rss:13.0f} "
              f"{m['leases_done']:7d} {m['utilization']:6.1%} {m['be_wait_mean_seconds']:10.0f}")


if __name__ == "__main__":
    main()
