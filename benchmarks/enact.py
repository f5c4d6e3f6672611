"""Enactment on the lab: a 4-VM Debian lease on 2 hosts, from its planned start to VMs running and answering
ssh, and what leasewise adds on top of the raw libvirt calls.

Run (as root, on a machine where `bash deploy/install.sh` ran): `python benchmarks/enact.py [--keep-lab]`.
It builds the Debian image if needed (cached), brings the lab up unless it is up, runs `leasewise run` on a
store with two lab hosts, and prints:
  * planned start -> all 4 VMs defined and running (from the daemon's enacted events);
  * planned start -> all 4 answering ssh;
  * the same four VMs started by bare libvirt calls (overlay volume, seed upload, define, start), and
    leasewise's own time on top of them, as a share of the whole (target: under 5%).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import tomllib
import uuid
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from drivers.base import DiskSpec, VMSpec  # noqa: E402
from lab_leases import cancel_and_wait_released  # noqa: E402
from drivers.cloudinit import SeedSpec, build_seed_iso  # noqa: E402
from drivers.domain_xml import render_domain_xml  # noqa: E402
from drivers.inventory import load_inventory  # noqa: E402
from drivers.libvirt.storage import VM_POOL, pool_xml, overlay_xml, seed_xml  # noqa: E402
from drivers.libvirt.transport import link_uri  # noqa: E402

LAB = ROOT / "deploy" / "lab" / "lab"
INVENTORY = ROOT / "deploy" / "lab" / "run" / "inventory.toml"
IMAGE_TOML = Path("/var/lib/libvirt/images/leasewise-images/debian12/image.toml")
CLI = [sys.executable, "-c", "from orchestrator.cli import main; main()"]
NODES, MEMORY_MIB = 4, 768
SSH_TIMEOUT_S = 900


def cli(*args: str, timeout: float = 300) -> str:
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if done.returncode != 0:
        sys.exit(f"leasewise {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def ssh_ok(key: Path, address: str, user: str) -> bool:
    return subprocess.run(["ssh", "-i", str(key), "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o",
                           "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
                           f"{user}@{address}", "true"], capture_output=True, timeout=30).returncode == 0


def leasewise_run(image: dict, key: Path, work: Path) -> dict[str, float]:
    state, config = work / "state.sqlite", work / "leasewise.toml"
    config.write_text('[daemon]\ndriver = "libvirt"\npoll_interval = "1s"\ngraceful_timeout = "3s"\n')
    common = ["--state", str(state), "--config", str(config)]
    cli("host", "import", str(INVENTORY), "--cpus", "2", "--memory", "4096", *common)
    cli("host", "remove", "lab3", *common)
    cli("image", "add", "debian12", image["disk"], "--login-user", image["login_user"], "--kernel", image["kernel"],
        "--initrd", image["initrd"], "--cmdline", Path(image["cmdline"]).read_text().strip(), *common)
    cli("lease", "submit", "--nodes", str(NODES), "--cpus", "1", "--memory", str(MEMORY_MIB), "--duration", "1h",
        "--image", "debian12", "--ssh-key", f"{key}.pub", "--start", "now", *common)
    daemon = subprocess.Popen([*CLI, "run", *common], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        t0 = time.monotonic()
        answered: dict[str, float] = {}
        while len(answered) < NODES:
            if time.monotonic() - t0 > SSH_TIMEOUT_S:
                sys.exit("the VMs did not all answer ssh in time")
            shown = json.loads(cli("lease", "show", "1", "--json", *common))
            for vm in shown["vms"]:
                if vm["vm"] not in answered and vm["addresses"] and ssh_ok(key, vm["addresses"][0]["address"],
                                                                            image["login_user"]):
                    answered[vm["vm"]] = datetime.now().astimezone().timestamp()
            time.sleep(2)
        shown = json.loads(cli("lease", "show", "1", "--json", *common))
        starts = [e["detail"] for e in shown["events"] if e["kind"] == "enacted" and e["detail"].get("operation") == "start"]
        planned = datetime.fromisoformat(starts[0]["planned_start"].replace("Z", "+00:00")).timestamp()
        running = max(datetime.fromisoformat(d["enacted_end"].replace("Z", "+00:00")).timestamp() for d in starts)
        cancel_and_wait_released(cli, "1", common)
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
    return {"to_running_s": running - planned, "to_ssh_s": max(answered.values()) - planned,
            "start_calls_s": sum(d["wall_seconds"] for d in starts)}


def raw_libvirt(image: dict, key: Path) -> float:
    """The same four VMs by bare libvirt calls: overlay volume, seed upload, define, start; then removed."""
    import libvirt

    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)   # (a pool not found yet is expected)
    hosts = {h.name: h for h in load_inventory(INVENTORY) if h.name in ("lab1", "lab2")}
    conns = {name: libvirt.open(link_uri(h)) for name, h in hosts.items()}
    seeds = {n: build_seed_iso(SeedSpec(instance_id=f"raw-{n}", hostname=f"raw-{n}",
                                        ssh_keys=(Path(f"{key}.pub").read_text().strip(),))) for n in range(NODES)}
    for name, conn in conns.items():   # (set-up, not timed: the pool leasewise's first start defines)
        try:
            conn.storagePoolLookupByName(VM_POOL)
        except libvirt.libvirtError:
            pool = conn.storagePoolDefineXML(pool_xml(VM_POOL, hosts[name].vm_disk_dir), 0)
            pool.build(0)
            pool.create(0)
    made = []
    began = time.perf_counter()
    for n in range(NODES):
        host = ("lab1", "lab2")[n % 2]
        conn = conns[host]
        pool = conn.storagePoolLookupByName(VM_POOL)
        pool.refresh(0)
        disk = DiskSpec(base=image["disk"])
        overlay = pool.createXML(overlay_xml(f"raw-{n}", disk, int(image["virtual_size"])), 0)
        seed = pool.createXML(seed_xml(f"raw-{n}", len(seeds[n])), 0)
        stream = conn.newStream(0)
        seed.upload(stream, 0, len(seeds[n]), 0)
        stream.send(seeds[n])
        stream.finish()
        spec = VMSpec(f"raw-{n}", 1, MEMORY_MIB, disk_image=overlay.path(), seed_image=seed.path(),
                      kernel=image["kernel"], initrd=image["initrd"], disk=disk,
                      cmdline=Path(image["cmdline"]).read_text().strip(), network="br0",
                      mac=f"52:54:00:fe:00:{n:02x}")
        dom = conn.defineXML(render_domain_xml(spec, hosts[host].domain_type, uuid=str(uuid.uuid4())))
        dom.create()
        made.append((dom, overlay, seed))
    took = time.perf_counter() - began
    for dom, overlay, seed in made:
        dom.destroy()
        dom.undefine()
        overlay.delete(0)
        seed.delete(0)
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep-lab", action="store_true", help="leave the lab up afterwards")
    args = parser.parse_args()
    subprocess.run([str(ROOT / "deploy" / "images" / "build"), "debian12", "--quiet"], check=True)
    with open(IMAGE_TOML, "rb") as handle:
        image = tomllib.load(handle)
    brought_up = not INVENTORY.is_file()
    if brought_up:
        subprocess.run([str(LAB), "up"], check=True, capture_output=True)
    try:
        with tempfile.TemporaryDirectory(prefix="leasewise-enact-") as tmp:
            work = Path(tmp)
            key = work / "id_ed25519"
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
            raw = raw_libvirt(image, key)
            lw = leasewise_run(image, key, work)
    finally:
        if brought_up and not args.keep_lab:
            subprocess.run([str(LAB), "down"], capture_output=True)
    # everything from the planned start to all VMs running that the bare calls do not account for: the
    # daemon noticing the start is due, planning bookkeeping, the seed's making, the store's writes
    added = max(lw["to_running_s"] - raw, 0.0)
    print(f"{NODES} VMs ({MEMORY_MIB} MiB, Debian 12, TCG) on 2 lab hosts:")
    print(f"  planned start -> all defined and running: {lw['to_running_s']:7.2f} s "
          f"(the start calls themselves: {lw['start_calls_s']:.2f} s)")
    print(f"  planned start -> all answering ssh:       {lw['to_ssh_s']:7.2f} s")
    print(f"  bare libvirt (overlay, seed, define, start) for the same 4 VMs: {raw:.2f} s")
    print(f"  leasewise on top of them: {added:.2f} s = {100 * added / lw['to_ssh_s']:.2f}% of the whole "
          f"(target < 5%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
