"""Simulator throughput: KTH-SP2 in-process and through the whole CLI, a synthetic 100k-lease trace on
1,000 hosts, and an HPC-class trace (122,055 jobs of 32-1,024 one-CPU VMs on 1,024 nodes) through the CLI.

Run: `python benchmarks/simulate.py [--only kth|kth-cli|synthetic|hpc-cli] [--leases N] [--profile]`
(the compiled core must be built: `python3 setup.py build_ext --inplace` in a checkout).
Prints wall and CPU seconds, leases per second and peak RSS per run. Each run is a process of its own
(in-process runs in a forked child, CLI runs as `leasewise simulate ... --json OUT --quiet`), so the peak
RSS is that run's own; a CLI run's figures cover the whole process (start-up, parsing, writing --json),
which is what a user waits for. The HPC-class trace is generated here (an SWF file in a temporary
directory): the job sizes follow a trace kept outside the project (51% of 32 VMs, 20% of 64, 16% of 128,
7% of 256, 6% of 512; 58% of the jobs end before their requested time).
"""

from __future__ import annotations

import argparse
import cProfile
import gzip
import math
import multiprocessing as mp
import os
import pstats
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from queue import Empty

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.config import config_from_dict  # noqa: E402
from orchestrator.model.resources import Resources  # noqa: E402
from orchestrator.runtime.simulator import Simulator  # noqa: E402
from orchestrator.workloads import load_workload  # noqa: E402
from orchestrator.workloads.synthetic import synthetic_workload  # noqa: E402

KTH = ROOT / "benchmarks" / "data" / "KTH-SP2-1996-2.1-cln.swf.gz"
AGGRESSIVE = '[scheduling]\nbackfilling = "aggressive"\n'

#: the HPC-class trace: VMs per job and the share of jobs of that size
HPC_SIZES = ((32, 0.51), (64, 0.20), (128, 0.16), (256, 0.07), (512, 0.06))
HPC_JOBS, HPC_NODES = 122_055, 1024


def hpc_swf(n_jobs: int, n_nodes: int = HPC_NODES, seed: int = 18, load: float = 0.8) -> str:
    """An SWF trace of the HPC class: requested times log-uniform from 10 min to 12 h, 58% of the jobs
    ending after 5-100% of theirs, Poisson arrivals offering `load` of the nodes."""
    rng = random.Random(seed)
    sizes, weights = zip(*HPC_SIZES)
    jobs = []
    work = 0.0
    lo, hi = math.log(600), math.log(12 * 3600)
    for _ in range(n_jobs):
        procs = rng.choices(sizes, weights)[0]
        requested = int(math.exp(lo + rng.random() * (hi - lo)))
        run = max(1, int(requested * (0.05 + 0.95 * rng.random()))) if rng.random() < 0.58 else requested
        jobs.append((procs, requested, run))
        work += procs * run
    rate = n_jobs / (work / (n_nodes * load))   # arrivals per second
    t = 0.0
    lines = [f"; MaxNodes: {n_nodes}", f"; MaxProcs: {n_nodes}"]
    for number, (procs, requested, run) in enumerate(jobs, start=1):
        t += rng.expovariate(rate)
        lines.append(f"{number} {int(t)} 0 {run} {procs} -1 -1 {procs} {requested} -1 1 1 1 1 1 1 -1 -1")
    return "\n".join(lines) + "\n"


# -- in-process runs ----------------------------------------------------------------------------------------
def _kth(n: int | None):
    settings = {"scheduling": {"backfilling": "aggressive"}}
    if n:
        settings["workload"] = {"swf": {"first": n}}
    config = config_from_dict(settings)
    return "KTH-SP2, in-process", load_workload(KTH, config), config


def _synthetic(n: int | None):
    n = n or 100_000
    config = config_from_dict({"scheduling": {"backfilling": "aggressive"}})
    workload = synthetic_workload(n, 1000, Resources.of(16, 65536), seed=7)
    return f"synthetic {n:,} / 1,000 hosts, in-process", workload, config


def _run(kind: str, n: int | None, profile: bool, out: mp.Queue) -> None:
    name, workload, config = (_kth if kind == "kth" else _synthetic)(n)
    # (finished leases dropped as they finish, as `leasewise simulate` does; their records go nowhere)
    sim = Simulator(workload, config, retire=lambda lease, workload_id: None)
    profiler = cProfile.Profile() if profile else None
    start, cpu = time.perf_counter(), time.process_time()
    if profiler:
        profiler.enable()
    result = sim.run()
    if profiler:
        profiler.disable()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
    m = result.metrics
    out.put((name, len(workload.requests), len(result.hosts), wall, cpu, rss_mib, m))


def _in_process(kind: str, n: int | None, profile: bool):
    ctx = mp.get_context("fork")
    queue: mp.Queue = ctx.Queue()
    child = ctx.Process(target=_run, args=(kind, n, profile, queue))
    child.start()
    while True:   # (a run that fails ends its process without a row: say so instead of waiting for ever)
        try:
            row = queue.get(timeout=1)
            break
        except Empty:
            if not child.is_alive():
                raise SystemExit(f"{kind}: the run failed (exit code {child.exitcode})") from None
    child.join()
    return row


# -- whole-process CLI runs ----------------------------------------------------------------------------------
def _cli(name: str, workload: Path, config_text: str, tmp: Path, profile: bool):
    """`leasewise simulate WORKLOAD --json OUT --quiet` as a process of its own: wall, CPU and peak RSS of
    that process (os.wait4 gives the child's own rusage)."""
    import json

    config = tmp / "config.toml"
    config.write_text(config_text)
    out = tmp / "out.json"
    script = tmp / "leasewise_cli.py"
    script.write_text("from orchestrator.cli import main\nmain()\n")
    profiler = ["-m", "cProfile", "-s", "tottime"] if profile else []
    command = [sys.executable, *profiler, str(script), "simulate", str(workload), "--config", str(config),
               "--json", str(out), "--quiet"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    start = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=None if profile else subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    child.returncode = code
    if code != 0:
        raise SystemExit(f"{name}: leasewise simulate exited {code}")
    m = json.loads(out.read_text())["metrics"]
    return name, m["leases_total"], None, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, m


def _kth_cli(n: int | None, profile: bool):
    with tempfile.TemporaryDirectory() as tmp:
        config = AGGRESSIVE + (f"[workload.swf]\nfirst = {n}\n" if n else "")
        row = _cli("KTH-SP2, CLI --json (whole process)", KTH, config, Path(tmp), profile)
        return row[:2] + (100,) + row[3:]


def _hpc_cli(n: int | None, profile: bool):
    n = n or HPC_JOBS
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "hpc.swf.gz"
        trace.write_bytes(gzip.compress(hpc_swf(n).encode(), compresslevel=1))
        row = _cli(f"HPC-class {n:,} / {HPC_NODES:,} nodes, CLI --json", trace, AGGRESSIVE, Path(tmp), profile)
        return row[:2] + (HPC_NODES,) + row[3:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["kth", "kth-cli", "synthetic", "hpc-cli"])
    parser.add_argument("--leases", type=int, help="first N leases only (every run)")
    parser.add_argument("--profile", action="store_true", help="print a cProfile summary per run")
    args = parser.parse_args()
    kinds = [args.only] if args.only else ["kth", "kth-cli", "synthetic", "hpc-cli"]
    from orchestrator import compiled
    print(f"leasewise: {compiled.describe()}")
    rows = []
    for kind in kinds:
        if kind in ("kth", "synthetic"):
            rows.append(_in_process(kind, args.leases, args.profile))
        elif kind == "kth-cli":
            rows.append(_kth_cli(args.leases, args.profile))
        else:
            rows.append(_hpc_cli(args.leases, args.profile))
    print(f"{'run':44} {'leases':>8} {'hosts':>6} {'wall s':>8} {'CPU s':>8} {'leases/s':>9} {'peak RSS MiB':>13} "
          f"{'done':>7} {'util':>6} {'BE wait s':>10}")
    for name, n, hosts, wall, cpu, rss, m in rows:
        print(f"{name:44} {n:8d} {hosts:6d} {wall:8.2f} {cpu:8.2f} {n / wall:9.0f} {rss:13.0f} "
              f"{m['leases_done']:7d} {m['utilization']:6.1%} {m['be_wait_mean_seconds']:10.0f}")


if __name__ == "__main__":
    main()
