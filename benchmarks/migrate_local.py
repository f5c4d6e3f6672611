"""Hosts without shared storage, on the lab (`deploy/lab/lab up --storage local`): the time to give the Debian
image to 3 hosts, and a live migration that copies the VM's disk with its memory (a block migration),
predicted against measured.

Run (as root, on a machine where `bash deploy/install.sh` ran): `python benchmarks/migrate_local.py
[--keep-lab] [--bandwidth MIB_S] [--disk-mib N] [--memory MIB]`. It holds the lab's lock throughout, builds
the Debian image if needed (cached), brings the lab up with local storage (replacing any lab up), and:
  * times `leasewise image add` (the image's disk, kernel and initrd uploaded to every host, checksummed there);
  * boots a 1-VM lease, fills most of the guest's memory (tmpfs) and writes `--disk-mib` MiB to its disk, so
    that what moves is what the model counts; waits until the daemon has measured the overlay's allocation;
  * drains the VM's host: the daemon live-migrates it with its overlay, planned with that allocation at
    `--bandwidth` (also libvirt's limit for the job), and `report` gives the predicted and measured times.
Target: the migration's prediction error <= 15%.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "deploy" / "lab"))

from lab_leases import cancel_and_wait_released  # noqa: E402
from lablib.common import LOCK_HELD_ENV, acquire_lab_lock  # noqa: E402

LAB = ROOT / "deploy" / "lab" / "lab"
INVENTORY = ROOT / "deploy" / "lab" / "run" / "inventory.toml"
IMAGE_TOML = Path("/var/lib/libvirt/images/leasewise-images/debian12/image.toml")
CLI = [sys.executable, "-c", "from orchestrator.cli import main; main()"]
BOOT_TIMEOUT_S = 600
#: what the guest keeps free of the memory it fills (its kernel and sshd must go on running)
KEEP_FREE_MIB = 64


def cli(*args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if check and done.returncode != 0:
        sys.exit(f"leasewise {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done


def measured_disk_mib(state: Path) -> float | None:
    with sqlite3.connect(f"file:{state}?mode=ro", uri=True) as db:
        row = db.execute("SELECT mib FROM disk_allocations WHERE lease_id = 1 AND vnode = 0").fetchone()
    return row[0] if row else None


def run(args: argparse.Namespace, image: dict, work: Path) -> dict[str, float]:
    state, config = work / "state.sqlite", work / "leasewise.toml"
    config.write_text(f'[daemon]\ndriver = "libvirt"\npoll_interval = "1s"\ngraceful_timeout = "3s"\n'
                      f'dirty_rate_interval = "15s"\n\n[scheduling]\nlive_migration_bandwidth = {args.bandwidth}\n'
                      f'max_downtime_ms = 1000\n')
    common = ["--state", str(state), "--config", str(config)]
    key = work / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    cli("host", "import", str(INVENTORY), "--cpus", "1", "--memory", "2048", *common)
    files = [image["disk"], image["kernel"], image["initrd"]]
    t0 = time.monotonic()
    cli("image", "add", "debian12", image["disk"], "--login-user", image["login_user"], "--kernel", image["kernel"],
        "--initrd", image["initrd"], "--cmdline", Path(image["cmdline"]).read_text().strip(), *common, timeout=1800)
    figures = {"image_s": time.monotonic() - t0, "image_mib": sum(Path(f).stat().st_size for f in files) / 2**20}
    cli("lease", "submit", "--nodes", "1", "--cpus", "1", "--memory", str(args.memory), "--duration", "1h",
        "--image", "debian12", "--ssh-key", f"{key}.pub", "--start", "now", *common)
    daemon = subprocess.Popen([*CLI, "run", *common], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def ssh(command: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return cli("lease", "ssh", "1/0", "-i", str(key), "-o", "ConnectTimeout=5", "-o", "BatchMode=yes", *common,
                   "--", command, timeout=timeout, check=False)

    try:
        t0 = time.monotonic()
        while ssh("true", 40).returncode != 0:
            if time.monotonic() - t0 > BOOT_TIMEOUT_S:
                sys.exit("the VM did not answer ssh in time")
            time.sleep(3)
        fill = ("sudo sh -c 'mount -o remount,size=95% /dev/shm && "
                "free=$(awk \"/MemAvailable/ {print int(\\$2 / 1024)}\" /proc/meminfo) && "
                f"head -c $(( (free - {KEEP_FREE_MIB}) * 1048576 )) /dev/urandom > /dev/shm/fill' && "
                f"head -c {args.disk_mib}M /dev/urandom > ~/blob && sync")
        done = ssh(fill, 900)
        if done.returncode != 0:
            sys.exit(f"filling the guest failed:\n{done.stdout}{done.stderr}")
        written = time.monotonic()
        while (measured_disk_mib(state) or 0.0) < args.disk_mib:   # (the daemon reads it every 15 s)
            if time.monotonic() - written > 120:
                sys.exit(f"the daemon did not measure the overlay's allocation ({measured_disk_mib(state)} MiB)")
            time.sleep(2)
        figures["allocation_mib"] = measured_disk_mib(state) or 0.0
        source = json.loads(cli("lease", "show", "1", "--json", *common).stdout)["vms"][0]["host"]
        cli("host", "drain", source, "--by", "+300s", *common)
        deadline = time.monotonic() + 600
        while True:
            vm = json.loads(cli("lease", "show", "1", "--json", *common).stdout)["vms"][0]
            if vm["host"] != source and vm["state"] == "running":
                break
            if time.monotonic() > deadline:
                sys.exit(f"the VM never left {source}: {vm}")
            time.sleep(2)
        cli("report", "--lease", "1", "--json", str(work / "report.json"), *common)
        rows = [r for r in json.loads((work / "report.json").read_text())["rows"] if r["kind"] == "live-migrate"]
        if not rows or rows[0].get("measured_seconds") is None:
            sys.exit(f"no measured live migration in the report: {rows}")
        row = rows[0]
        figures.update(predicted_s=row["predicted_seconds"], measured_s=row["measured_seconds"],
                       disk_mib=row["disk_mib"] or 0.0)
        figures["source"], figures["destination"] = source, vm["host"]   # type: ignore[assignment]
        cancel_and_wait_released(lambda *args: cli(*args).stdout, "1", common)
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--keep-lab", action="store_true", help="leave the lab up afterwards (with local storage)")
    parser.add_argument("--bandwidth", type=float, default=40.0, metavar="MIB_S",
                        help="live_migration_bandwidth, MiB/s (default 40: under the lab's 1 Gbit/s links)")
    parser.add_argument("--disk-mib", type=int, default=200, metavar="N", help="MiB the guest writes to its disk")
    parser.add_argument("--memory", type=int, default=512, metavar="MIB", help="the VM's memory (default 512)")
    args = parser.parse_args()
    lock = acquire_lab_lock("benchmarks/migrate_local.py")   # noqa: F841  (held until this process exits)
    env = {**os.environ, LOCK_HELD_ENV: "1"}
    subprocess.run([str(ROOT / "deploy" / "images" / "build"), "debian12", "--quiet"], check=True)
    with open(IMAGE_TOML, "rb") as handle:
        image = tomllib.load(handle)
    subprocess.run([str(LAB), "up", "--storage", "local"], check=True, capture_output=True, env=env)
    try:
        with tempfile.TemporaryDirectory(prefix="leasewise-migrate-local-") as tmp:
            f = run(args, image, Path(tmp))
    finally:
        if not args.keep_lab:
            subprocess.run([str(LAB), "down"], capture_output=True, env=env)
    error = abs(f["predicted_s"] - f["measured_s"]) / f["measured_s"]
    print(f"Debian 12 image ({f['image_mib']:.0f} MiB: disk, kernel, initrd) given to 3 lab hosts' own storage: "
          f"{f['image_s']:.1f} s ({3 * f['image_mib'] / f['image_s']:.0f} MiB/s in all)")
    print(f"live migration {f['source']} -> {f['destination']} of a {args.memory} MiB VM with its overlay "
          f"(allocation measured {f['allocation_mib']:.0f} MiB, {f['disk_mib']:.0f} MiB copied) at "
          f"{args.bandwidth:g} MiB/s:")
    print(f"  predicted {f['predicted_s']:.1f} s, measured {f['measured_s']:.1f} s: error {100 * error:.1f}% "
          f"(target <= 15%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
