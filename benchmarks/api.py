"""The API under load (issue 14): 50 clients submitting, listing and cancelling for 30 s against a
`leasewise serve` enacting on 20 simulated hosts whose shutdowns and suspensions take real seconds.

Run: `python benchmarks/api.py [--clients 50] [--seconds 30] [--hosts 20] [--processes 1] [--burst 50]`.
Prints the requests made, p50 / p90 / p99 / max latency per kind, the errors by exit code (busy is 75:
there must be none), and whether the plan ever holds more on a host than it has. Target: p99 submit <=
200 ms. Each client pauses 0.3-1.2 s between requests (a script, not a flood): without pauses 50 clients
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
    args = parser.parse_args()
    burst = args.clients if args.burst is None else args.burst
    with tempfile.TemporaryDirectory(prefix="leasewise-api-bench-") as workdir:
        result = run_load(Path(workdir), clients=args.clients, seconds=args.seconds, hosts=args.hosts,
                          think=tuple(args.think), processes=args.processes, burst=burst)
    print(f"api load: {args.clients} clients in {args.processes} process(es), {args.seconds:g} s, {args.hosts} "
          f"simulated hosts, {args.think[0]:g}-{args.think[1]:g} s between a client's requests; then a burst of {burst} "
          f"submissions at one instant")
    print(summary(result))
    p99 = result.percentile("submit", 99)
    print(f"p99 submit {1000 * p99:.1f} ms (target <= 200 ms): {'met' if p99 is not None and p99 <= 0.2 else 'NOT met'}")
    return 0 if not result.overbooked and 75 not in result.errors else 1


if __name__ == "__main__":
    sys.exit(main())
