"""A driver with no hosts behind it: VMs, save images and migrations live in memory, on a simulated clock.

It lets the scheduler and the daemon run end to end in tests and in `leasewise simulate`: every
operation advances the `SimulatedClock` by what it would cost (never sleeps): by default the rates and
fixed costs of `SimulatedDriverConfig`, or, given `times` (an `OperationTimes`) and a migration model,
exactly what the planner reserved for it, so a dry run tells the truth about the plan. Failures are injected
from configuration, drawn from a `random.Random(seed)` this instance owns so a run can be replayed.
It follows the libvirt driver call for call (the contract tests hold both to it), including libvirt's
quirks that matter to callers: a saved VM stays defined ("saved") on its host until it is resumed or
stopped, and a save image is only visible on the host that wrote it unless it is on shared storage.

With a `state_file` the simulated hosts outlive the process: every VM (with its state) and every save
image is read from that JSON file when the driver is built and written back, atomically (a temporary
file, then `os.replace`), after each operation that changes them, so a daemon restarted after a crash
sees the same "hosts". Only one driver process may write a given file at a time. The clock is never
stored: it stays the caller's. The hosts themselves (their capacities) are the caller's too, given when the
driver is built (the store's) and as they are added and removed while it runs; a removed host takes its
VMs and save images with it, so the file never names a host the driver was not given.

The package's parts: `config` (capacities, `SimulatedDriverConfig`, operation times), `state_file` (what the
hosts hold and its JSON file), `migration` (a live migration timed by the pre-copy model), `lock` (one
operation at a time), `images` (reading a disk image's header) and `driver` (`SimulatedDriver`).
"""

from __future__ import annotations

from .config import OPERATIONS, HostCapacity, OperationTimes, RatedTimes, SimulatedDriverConfig
from .driver import SIMULATED_DISK_DIR, SimulatedDriver
from drivers.image_file import probe_image

__all__ = ["OPERATIONS", "SIMULATED_DISK_DIR", "HostCapacity", "OperationTimes", "RatedTimes", "SimulatedDriver",
           "SimulatedDriverConfig", "probe_image"]
