"""The libvirt driver's operations on the lab: what a start, a save, a restore on the other host and a stop of
the lab's tiny guest take, through the driver as the daemon calls it (each operation over a connection no other
call uses while it runs).

Run (as root, on a machine where `bash deploy/install.sh` ran): `python benchmarks/lab_operations.py
[--rounds 5]`. It brings the lab up unless it is up (`deploy/lab/lab up -n 2`, the transport the lab tests use,
`ssh`) and builds the tiny guest if needed; each round starts a VM on the first host, saves it to shared
storage, restores it on the second and stops it there. Prints each operation's median and slowest wall
milliseconds. The guest's own work (QEMU under TCG, a save of its memory) is most of each figure: compare
versions interleaved, on the same lab.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from drivers.inventory import load_inventory  # noqa: E402
from drivers.libvirt import LibvirtDriver  # noqa: E402
from tests.lab.labkit import GUEST_DIR, guest_spec  # noqa: E402

LAB = ROOT / "deploy" / "lab" / "lab"
INVENTORY = ROOT / "deploy" / "lab" / "run" / "inventory.toml"
GUEST_BUILD = ROOT / "deploy" / "guest" / "build"
SHARED = "/var/lib/libvirt/images"   # (the lab's shared storage: both hosts see it)


def _lab_up() -> None:
    if not (GUEST_DIR / "vmlinuz").is_file():
        subprocess.run([str(GUEST_BUILD)], check=True)
    if subprocess.run([str(LAB), "status"], capture_output=True).returncode != 0 or not INVENTORY.is_file():
        subprocess.run([str(LAB), "up", "-n", "2", "--transport", os.environ.get("LEASEWISE_LAB_TRANSPORT", "ssh")],
                       check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds: must be at least 1")
    _lab_up()
    hosts = load_inventory(INVENTORY)
    driver = LibvirtDriver(hosts)
    first, second = hosts[0].name, hosts[1].name
    took: dict[str, list[float]] = {"start": [], "save": [], "restore elsewhere": [], "stop": []}

    def timed(name: str, operation, *args, **kwargs) -> None:
        began = time.perf_counter()
        operation(*args, **kwargs)
        took[name].append((time.perf_counter() - began) * 1000)

    try:
        driver.list_every_host()   # (the shared connections opened)
        for i in range(args.rounds):
            vm = f"lwbench-{os.getpid()}-{i}"
            state = f"{SHARED}/{vm}.save"
            timed("start", driver.start, guest_spec(vm, mib=8), first)
            time.sleep(2)   # (the guest boots a little: a save of a VM that has only begun is not typical)
            timed("save", driver.suspend, vm, state)
            timed("restore elsewhere", driver.resume, vm, state, second)
            driver.remove_state(state, second)
            timed("stop", driver.stop, vm, graceful_timeout=0, host=second)
    finally:
        driver.close()
    print(f"{args.rounds} rounds on {first} and {second} ({hosts[0].uri.split(':')[0]})")
    for name, values in took.items():
        print(f"  {name:18} median {statistics.median(values):7.0f} ms   slowest {max(values):7.0f} ms")


if __name__ == "__main__":
    main()
