"""The daemon's look at libvirt hosts: what asking every host for its VMs costs, the hosts asked at once
(`list_every_host`, as the daemon does) and one after another (`list_vms`), each a question waited for no
longer than its deadline.

Run: `python benchmarks/host_look.py [--hosts 300] [--rounds 10]`. The hosts are libvirt's `test:///default`
(in this process, no network: what is measured is leasewise's own cost around each call, which a real link
adds its round trips to); needs libvirt-python. Prints wall and CPU milliseconds per look and per host.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from drivers.inventory import HostConfig  # noqa: E402
from drivers.libvirt import LibvirtDriver  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    if args.hosts < 1 or args.rounds < 1:
        parser.error("--hosts and --rounds: must be at least 1")
    driver = LibvirtDriver([HostConfig(f"h{i}", "test:///default") for i in range(args.hosts)])
    hosts = driver.hosts()
    looks = {"at once (the daemon's look)": driver.list_every_host,
             "one host after another": lambda: [driver.list_vms(h) for h in hosts]}
    try:
        for look in looks.values():   # (connections opened, workers made)
            look()
        print(f"{args.hosts} hosts, {args.rounds} looks each, interleaved twice")
        for _ in range(2):
            for name, look in looks.items():
                wall, cpu = time.perf_counter(), time.process_time()
                for _ in range(args.rounds):
                    look()
                wall = (time.perf_counter() - wall) / args.rounds * 1000
                cpu = (time.process_time() - cpu) / args.rounds * 1000
                print(f"  {name:28} {wall:7.1f} ms wall {cpu:7.1f} ms CPU a look; "
                      f"{cpu / args.hosts:.3f} ms CPU a host")
    finally:
        driver.close()


if __name__ == "__main__":
    main()
