"""The API under load: 50 clients submitting, listing and cancelling for 30 s against a `leasewise serve`
enacting on simulated hosts whose shutdowns and suspensions take real seconds.

Run: `python benchmarks/api.py [--clients 50] [--seconds 30] [--hosts 20] [--processes 1] [--burst 50]
[--leases N] [--all]`. `--leases N` plans N advance reservations over the coming week before the server
starts (it loads them and re-plans them as it starts: the restart time is printed); a list asks for a page
of the caller's leases, or with `--all` pages through everyone's. Prints the requests made, p50 / p90 / p99
/ max latency per kind, the errors by exit code (busy is 75: there must be none), the server's peak RSS and
start time, and whether the plan ever holds more on a host than it has. Targets (issue 35: `--hosts 1000
--leases 10000`, 50 clients, a burst of 50): p99 submit <= 50 ms, p99 list <= 100 ms, the server <= 1 GiB,
its restart <= 5 s. Each client pauses 0.3-1.2 s between requests (a script, not a flood): without pauses 50 clients
saturate any server and the latency measures the queue, not the server. The clients start one by one
over their first pause (a ramp-up); after the steady load, `--burst N` clients submit at one instant, and
that burst's latencies are printed as a kind of their own. `--processes N` spreads the clients over N
processes (users' CLIs are processes of their own: in one process, decoding the lease lists costs the
clients more CPU than the server spends on them, and the clients' own GIL adds to every latency; on a
2-core machine more processes take CPU from the server instead).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.load import run_load, summary  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--think", type=float, nargs=2, default=(0.3, 1.2), metavar=("MIN", "MAX"),
                        help="each client's pause between requests, seconds (uniform)")
    parser.add_argument("--processes", type=int, default=1,
                        help="client processes the clients are spread over (1: all in this one)")
    parser.add_argument("--burst", type=int, default=None,
                        help="clients that submit at one instant after the steady load (default: --clients; 0: none)")
    parser.add_argument("--leases", type=int, default=0, help="leases planned before the server starts")
    parser.add_argument("--all", dest="list_all", action="store_true",
                        help="a list pages through everyone's leases (default: one page of the caller's)")
    args = parser.parse_args()
    burst = args.clients if args.burst is None else args.burst
    with tempfile.TemporaryDirectory(prefix="leasewise-api-bench-") as workdir:
        result = run_load(Path(workdir), clients=args.clients, seconds=args.seconds, hosts=args.hosts,
                          think=tuple(args.think), processes=args.processes, burst=burst, leases=args.leases,
                          list_all=args.list_all)
    print(f"api load: {args.clients} clients in {args.processes} process(es), {args.seconds:g} s, {args.hosts} "
          f"simulated hosts, {args.leases} leases planned first, {args.think[0]:g}-{args.think[1]:g} s between a "
          f"client's requests, lists {'of every page of everyone' if args.list_all else 'of a page of the caller'}'s "
          f"leases; then a burst of {burst} submissions at one instant")
    print(summary(result))
    for kind, target in (("submit", 0.05), ("list", 0.1)):
        p99 = result.percentile(kind, 99)
        print(f"p99 {kind} {'-' if p99 is None else f'{1000 * p99:.1f} ms'} (target <= {1000 * target:g} ms): "
              f"{'met' if p99 is not None and p99 <= target else 'NOT met'}")
    peak = "-" if result.server_peak_mib is None else f"{result.server_peak_mib:.0f} MiB"
    print(f"server peak RSS {peak} (target <= 1024 MiB), start {result.startup_s:.2f} s (target <= 5 s)")
    return 0 if not result.overbooked and 75 not in result.errors else 1


if __name__ == "__main__":
    sys.exit(main())
