"""The calibration guests' disks, for measuring block migrations (`calibrate migration --disk-mib`): each
guest gets a qcow2 overlay holding N MiB of written data on a small base image, on the hosts' own storage,
so that its live migration copies the overlay with the memory, through the same driver call and flags as a
lease's VM (libvirt's non-shared incremental block migration, `drivers.libvirt.block_migration`).

The lab guest has no virtio-blk driver and never writes its disk; it needs none: QEMU's block migration
copies the overlay's allocated clusters whether or not the guest uses the device. So the overlay is filled
before the guest starts: made on this machine with qemu-img, written with qemu-io (a pattern, so that no
cluster reads as zeros), its backing path set to where the base lies on the hosts, and uploaded through
libvirt's volume upload (`Driver.upload_image`, as `image add` copies images, its checksum checked on the
host) into the source host's VM pool under the name the driver gives a VM's overlay. The driver's `stop`
then deletes it wherever the guest ended, and `remove_vm_storage` any copy left on either host. The base
goes to both hosts first (an incremental block migration moves only the overlay), named as the overlay of
a VM that never runs, so that the same call removes it.

Hosts whose VM disks are on storage both share are refused: a block migration there would copy the overlay
onto itself, and Nova refuses it likewise (InvalidSharedStorage: block migration cannot be used with shared
storage); there a disk costs a migration nothing, which the calibration without disks measures already.

On the simulated driver nothing is made: the guest's spec says how much its disk holds
(`VMSpec.disk_written_mib`), and the driver times the copy by the same model.
"""

from __future__ import annotations

import dataclasses
import posixpath
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from drivers.base import VMSpec
from drivers.cloudinit import overlay_volume_name
from drivers.errors import DriverError, OperationFailed
from orchestrator.model.errors import InvalidRequest, LeasewiseError
from orchestrator.runtime.calibration.testbed import Setup

OPTION = "--disk-mib"
#: the base image's virtual size, MiB: small, since the destination holds it already and it never moves
BASE_MIB = 4
#: qemu-io writes the overlay in pieces of this many MiB (its buffer is one piece)
WRITE_CHUNK_MIB = 64
#: the byte the overlay's data repeats (not zero: a cluster of zeros could be skipped)
PATTERN = "0xa5"
#: the tools this machine needs to make the overlays (Debian: qemu-utils)
TOOLS = ("qemu-img", "qemu-io")
#: how long one qemu-img or qemu-io run may take
TOOL_TIMEOUT_S = 600.0


def check_block_migration(setup: Setup, source: str, destination: str) -> None:
    """Refuse (InvalidRequest naming `--disk-mib`) a pair whose VM disks no block migration would copy, or
    whose disks the driver could not find at the same path on both, or a machine that cannot make them."""
    if setup.driver.shares_vm_storage(source, destination):
        raise InvalidRequest(OPTION, f"a block migration needs hosts that share no storage for VM disks, and "
                                     f"{source} and {destination} share theirs (the overlay would be copied "
                                     "onto itself); calibrate without --disk-mib there")
    if setup.kind == "simulated":
        return
    dirs = {host: setup.host_configs[host].vm_disk_dir for host in (source, destination)}
    if dirs[source] != dirs[destination]:
        raise InvalidRequest(OPTION, f"{source} keeps VM disks in {dirs[source]}, {destination} in "
                                     f"{dirs[destination]}: a block migration puts the overlay at the same path")
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise InvalidRequest(OPTION, f"needs {' and '.join(missing)} on this machine to make the guests' disks "
                                     "(Debian: apt-get install qemu-utils)")


class ProbeDisks:
    """The disks of one campaign's guests: `attach` gives a guest its overlay on its host; `remove` deletes
    every overlay and the base on both hosts."""

    def __init__(self, setup: Setup, hosts: tuple[str, str], prefix: str, workdir: Path):
        self._setup = setup
        self._hosts = hosts
        self._workdir = workdir
        self._base_vm = f"{prefix}base"       # (the base is a volume of the VM pool, as a VM's overlay is)
        self._made: dict[int, Path] = {}      # disk MiB -> the overlay made here
        self._placed: list[str] = []          # the VMs (the base's name first) given a volume on a host
        self._real = setup.kind != "simulated"
        self._dir = setup.host_configs[hosts[0]].vm_disk_dir if self._real else ""

    @property
    def base_path(self) -> str:
        """Where the base lies on both hosts."""
        return posixpath.join(self._dir, overlay_volume_name(self._base_vm))

    def _place_base(self) -> None:
        """The base image, made here and copied to both hosts (once: before the first overlay)."""
        if self._base_vm in self._placed:
            return
        base = self._workdir / "base.qcow2"
        _run(["qemu-img", "create", "-q", "-f", "qcow2", str(base), f"{BASE_MIB}M"])
        self._placed.append(self._base_vm)
        for host in self._hosts:
            self._setup.driver.upload_image(host, self.base_path, str(base))

    def attach(self, spec: VMSpec, disk_mib: int, host: str) -> VMSpec:
        """`spec` with a disk holding `disk_mib` MiB of data, its overlay made on `host` (0: none)."""
        if disk_mib == 0:
            return spec
        path = posixpath.join(self._dir or "/", overlay_volume_name(spec.name))
        if self._real:
            self._place_base()
            self._placed.append(spec.name)
            self._setup.driver.upload_image(host, path, str(self._overlay(disk_mib)))
        return dataclasses.replace(spec, disk_image=path, disk_written_mib=float(disk_mib))

    def _overlay(self, disk_mib: int) -> Path:
        """An overlay of the base holding `disk_mib` MiB written, backed by the base where the hosts have it."""
        if disk_mib not in self._made:
            overlay = self._workdir / f"overlay-{disk_mib}.qcow2"
            # (backed by the base next to it while it is written, then by the hosts' copy: header only)
            _run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", "base.qcow2", "-F", "qcow2", str(overlay),
                  f"{max(disk_mib, BASE_MIB)}M"])
            writes = []
            for offset in range(0, disk_mib, WRITE_CHUNK_MIB):
                writes += ["-c", f"write -q -P {PATTERN} {offset}M {min(WRITE_CHUNK_MIB, disk_mib - offset)}M"]
            _run(["qemu-io", "-f", "qcow2", *writes, str(overlay)])
            _run(["qemu-img", "rebase", "-q", "-u", "-f", "qcow2", "-b", self.base_path, "-F", "qcow2",
                  str(overlay)])
            self._made[disk_mib] = overlay
        return self._made[disk_mib]

    def remove(self, warn: Callable[[str], None]) -> None:
        """Delete every overlay and the base on both hosts (the guests are gone by then); `warn` is told of
        any that stays."""
        for host in self._hosts:
            for vm in reversed(self._placed):
                try:
                    self._setup.driver.remove_vm_storage(vm, host)
                except (DriverError, LeasewiseError) as exc:
                    warn(f"could not remove the disk of {vm} on {host}: {exc}")


@contextmanager
def probe_disks(setup: Setup, hosts: tuple[str, str], prefix: str, warn: Callable[[str], None]
                ) -> Iterator[ProbeDisks]:
    """The campaign's disks: inside, guests are given theirs (the base goes to both hosts with the first);
    whatever ends the block (an error, a stop, Ctrl-C or the caller's SIGTERM handler), every one is deleted
    on both hosts, as is what was made on this machine. A campaign without disks makes nothing."""
    with tempfile.TemporaryDirectory(prefix="leasewise-calibrate-") as workdir:
        disks = ProbeDisks(setup, hosts, prefix, Path(workdir))
        try:
            yield disks
        finally:
            disks.remove(warn)


def _run(command: list[str]) -> None:
    """Run a qemu tool here; `OperationFailed` with its own words when it fails."""
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OperationFailed(f"making a calibration disk: {command[0]}: {exc}") from None
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise OperationFailed(f"making a calibration disk: {command[0]} exited {proc.returncode}"
                              + (f" ({detail[-1]})" if detail else ""))
