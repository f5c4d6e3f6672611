"""The calibration guest: the lab guest (deploy/guest/build), its console, and the cleanup that leaves none
behind.

A guest boots `guest_dir`'s vmlinuz and initrd.img directly; its `dirtier` touches a working set of half
the guest's memory (at most all but `GUEST_SYSTEM_MIB`, the guest kernel's share; guests have
`MIN_GUEST_MIB` or more) and dirties a given number of 4 KiB pages/s in it (256 pages/s = 1 MiB/s). A guest
is measured once its console says the working set is touched (then `settle` more seconds), and after each
migration its console must go on printing: under TCG, QEMU 7.2 loses pages dirtied from the fourth
pre-copy pass on and the guest dies on the destination. Every guest is named `VM_PREFIX...`.
"""

from __future__ import annotations

import posixpath
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from drivers.base import VMSpec
from drivers.errors import DriverError
from orchestrator.model.errors import LeasewiseError
from orchestrator.runtime.calibration.samples import pages_to_mib_s
from orchestrator.runtime.calibration.testbed import Setup

DEFAULT_GUEST_DIR = "/var/lib/libvirt/images/leasewise-guest"
VM_PREFIX = "lwcal-"
#: seconds a guest gets, once its console says its working set is touched, before it is measured
DEFAULT_SETTLE_S = 2.0
#: the lab guest's dirtier: "ready" once its working set is touched, then a status line every second
READY_LINE = r"dirtier: (ready|t=)"
ALIVE_LINE = r"dirtier: t="
#: the guest kernel's word that its OOM killer ended the dirtier: the guest is too small for its working set
DIRTIER_KILLED_LINE = r"Killed process [0-9]+ \(dirtier\)"
#: what the lab guest's own kernel and init keep out of its memory (Debian 12's cloud kernel leaves about
#: 66 MiB of a 128 MiB guest free): the dirtier's working set stays clear of it
GUEST_SYSTEM_MIB = 80
#: the smallest guest measured: the working set then still has 48 MiB
MIN_GUEST_MIB = 128
#: how long a guest may take to boot and touch its working set (TCG on a loaded host), and to show that it
#: still runs after a migration
READY_TIMEOUT_S = 300.0
ALIVE_TIMEOUT_S = 10.0


def guest_spec(name: str, memory_mib: int, pages_per_second: int, guest_dir: str) -> VMSpec:
    """The lab guest: 1 vCPU, `memory_mib`, a dirtier working set of half of it (less in a small guest, so
    that the guest's kernel keeps `GUEST_SYSTEM_MIB`), dirtied at the given rate."""
    working_set = max(1, min(memory_mib // 2, memory_mib - GUEST_SYSTEM_MIB))
    return VMSpec(
        name=name,
        vcpus=1,
        memory_mib=memory_mib,
        kernel=posixpath.join(guest_dir, "vmlinuz"),
        initrd=posixpath.join(guest_dir, "initrd.img"),
        cmdline=f"console=ttyS0 quiet dirtier.mib={working_set} dirtier.pps={pages_per_second} dirtier.report=1",
        dirty_rate_mib_s=pages_to_mib_s(pages_per_second),
        working_set_mib=float(working_set),
    )


def guest_prefix() -> str:
    """The start of the names of one campaign's guests: `VM_PREFIX` and a short random part."""
    return f"{VM_PREFIX}{uuid.uuid4().hex[:6]}-"


def wait_ready(setup: Setup, name: str, settle: float) -> None:
    """Until the guest's console says its working set is touched (real drivers), then `settle` seconds."""
    if setup.kind == "libvirt":
        line = setup.driver.wait_for_console(name, f"{READY_LINE}|{DIRTIER_KILLED_LINE}", READY_TIMEOUT_S)
        if line is None:
            raise DriverError(f"guest {name} did not say its working set was touched within "
                              f"{READY_TIMEOUT_S:g} s (no '{READY_LINE}' on its console)")
        if re.search(DIRTIER_KILLED_LINE, line):
            raise DriverError(f"guest {name} ran out of memory: its kernel killed the dirtier ({line})")
    setup.sleep(settle)


def still_alive(setup: Setup, name: str) -> bool | None:
    """Whether the guest still prints its status lines after a migration (None: a simulated guest)."""
    if setup.kind != "libvirt":
        return None
    return setup.driver.wait_for_console(name, ALIVE_LINE, ALIVE_TIMEOUT_S) is not None


@contextmanager
def guests(setup: Setup, warn: Callable[[str], None]) -> Iterator[list[str]]:
    """The names of the guests started inside; every one still there afterwards is destroyed, whatever
    ended the block (an error, a stop, Ctrl-C or the caller's SIGTERM handler); `warn` is told of any
    that could not be."""
    started: list[str] = []
    try:
        yield started
    finally:
        for name in list(started):
            try:
                if setup.driver.locate(name) is not None:
                    setup.driver.stop(name, graceful_timeout=0)
                started.remove(name)
            except (DriverError, LeasewiseError) as exc:
                warn(f"could not remove guest {name}: {exc}")


def remove_image(setup: Setup, host: str, path: str, warn: Callable[[str], None]) -> None:
    """Delete a calibration save image (best effort: `warn` is told of any that stays)."""
    try:
        setup.driver.remove_state(path, host)
    except DriverError as exc:
        warn(str(exc))
