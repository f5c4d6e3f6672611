"""The simulated hosts' cost per operation at the size of a big lab: what `leasewise serve` with the simulated
driver (and every `--dry-run`) spends on the hosts themselves, in the server's process.

Run: `python benchmarks/simulated_hosts.py [--hosts 1000] [--vms 5000] [--ops 300]`. Starts `--vms` VMs spread
over `--hosts` hosts of a driver that keeps a state file (as `leasewise serve` does), then times `--ops` start
and stop pairs, suspend and resume pairs, and looks at every host (`list_vms` of each, as the daemon does once
per poll interval). Prints wall and CPU milliseconds per operation (CPU: this thread's own, the file's flush to
disk being wall only). Nothing here sleeps: the driver's clock is simulated (an operation's time passes at once).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from drivers.base import VMSpec  # noqa: E402
from drivers.clock import SimulatedClock  # noqa: E402
from drivers.simulated import SimulatedDriver, SimulatedDriverConfig  # noqa: E402
from orchestrator.model.timeutil import UTC  # noqa: E402
from orchestrator.planning.precopy import predict_precopy  # noqa: E402

def _timed(label: str, count: int, run) -> None:
    wall, cpu = time.perf_counter(), time.thread_time()
    run()
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    print(f"{label:38} {1000 * wall / count:9.3f} {1000 * cpu / count:9.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--vms", type=int, default=5000, help="VMs running before the timed operations")
    parser.add_argument("--ops", type=int, default=300, help="pairs of operations timed per kind")
    args = parser.parse_args()
    for name in ("hosts", "vms", "ops"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}: must be at least 1")
    hosts = {f"h{i}": (64, 262144) for i in range(args.hosts)}
    with tempfile.TemporaryDirectory(prefix="leasewise-simulated-hosts-") as tmp:
        driver = SimulatedDriver(hosts, SimulatedClock(datetime(2026, 1, 5, tzinfo=UTC)),
                                 SimulatedDriverConfig(),
                                 state_file=Path(tmp) / "hosts.json", migration_model=predict_precopy)
        for i in range(args.vms):
            driver.start(VMSpec(name=f"vm{i}", vcpus=1, memory_mib=256), f"h{i % args.hosts}")
        print(f"simulated hosts: {args.vms:,} VMs on {args.hosts:,} hosts, a state file; per operation")
        print(f"{'operation':38} {'wall ms':>9} {'CPU ms':>9}")
        names = [f"x{i}" for i in range(args.ops)]

        def starts_and_stops() -> None:
            for i, name in enumerate(names):
                driver.start(VMSpec(name=name, vcpus=1, memory_mib=256), f"h{i % args.hosts}")
                driver.stop(name)

        def suspends_and_resumes() -> None:
            for i in range(args.ops):
                vm, host = f"vm{i % args.vms}", f"h{i % args.vms % args.hosts}"
                driver.suspend(vm, f"/var/lib/leasewise/{vm}.save")
                driver.resume(vm, f"/var/lib/leasewise/{vm}.save", host)

        def looks() -> None:
            for host in driver.hosts():
                driver.list_vms(host)

        _timed("start + stop", args.ops, starts_and_stops)
        _timed("suspend + resume", args.ops, suspends_and_resumes)
        _timed(f"a look at every host ({args.hosts:,} lists)", 1, looks)


if __name__ == "__main__":
    main()
