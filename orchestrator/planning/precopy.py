"""The pre-copy live-migration model (after SimGrid's VmLiveMigration), as a pure function.

Two users need the same numbers: the simulated driver times its migrations with it, and the scheduler
predicts how long a migration will hold the network. A calibration command fits `bandwidth_mib_s`,
`overhead_s` and `dirty_factor` to measured migrations by least squares, so those stay plain arguments.

The model, as in SimGrid:

* stage 1 sends all of memory;
* stage 2 resends what the guest dirtied during the previous pass (dirty rate x pass time x dirty_factor,
  never more than the working set), pass after pass, until what is left could be sent within the
  maximum downtime;
* stage 3 pauses the guest and sends the rest; the downtime is that transfer plus a fixed switch-over
  cost (device state, the destination taking over), which QEMU's own convergence test does not count.

So that the whole pause stays within the maximum downtime, the migration job is given the maximum less
the switch-over cost as its limit (`downtime_limit_ms`); when the switch-over alone takes the maximum,
no pre-copy can keep it and the migration does not converge. The limit may rise in steps during the
migration (`drivers.downtime.DowntimeSchedule`, as Nova does), and the model checks each pass against
the step in force, as the libvirt driver sets them.

Between hosts that share no storage for the VM's disk, its overlay (`disk_mib`) is copied first, at the same
bandwidth, and the memory passes start once it is (libvirt mirrors the disks, then migrates memory): the
disk adds its transfer to the time before stage 1.

Deviations from SimGrid, on purpose: the bandwidth is a given effective rate (no network model), and
the timeout ends the pre-copy as libvirt's completion timeout does (abort, or pause and finish). A pass
that is cut by the timeout counts the pages dirtied until then; the remainder never exceeds memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal, NamedTuple

from drivers.downtime import DowntimeSchedule

Outcome = Literal["completed", "forced", "aborted"]

DEFAULT_WORKING_SET_FRACTION = 0.9   # SimGrid's assumption when a VM's working set is not known


class Round(NamedTuple):
    """One pass over (part of) guest memory."""

    seconds: float
    mib: float


@dataclass(frozen=True)
class PrecopyResult:
    """What one migration costs, per the model.

    `rounds` lists every pass in order: stage 1, each stage-2 pass, then the stop-and-copy pass (absent
    when aborted). `iterations` counts only the stage-2 passes, so an idle guest has 0.
    `remaining_mib` is what was left when the pre-copy ended: sent while paused unless aborted.
    `downtime_ms` is that last transfer plus the switch-over cost (the last round holds the transfer only).
    """

    total_seconds: float
    downtime_ms: float
    iterations: int
    transferred_mib: float
    converged: bool
    outcome: Outcome
    rounds: tuple[Round, ...]
    remaining_mib: float = 0.0
    disk_seconds: float = 0.0       # the overlay's copy before the memory passes (a block migration)

    @property
    def passes(self) -> int:
        """Passes over memory, the stop-and-copy included. (libvirt's memory_iteration counts QEMU's
        dirty-bitmap syncs, one more: the lab's migrations report this plus one.)"""
        return len(self.rounds)

    @property
    def duration(self) -> timedelta:
        return timedelta(seconds=self.total_seconds)

    @property
    def downtime(self) -> timedelta:
        return timedelta(milliseconds=self.downtime_ms)


def downtime_limit_ms(max_downtime_ms: float, switchover_ms: float) -> float | None:
    """The limit a migration job is given so that transfer plus switch-over stays within the maximum;
    None when the switch-over alone takes it all."""
    limit = max_downtime_ms - switchover_ms
    return limit if limit > 0 else None


def _check(name: str, value: float, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number (got {value!r})")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite (got {value})")
    if positive and value <= 0:
        raise ValueError(f"{name} must be greater than 0 (got {value})")
    if not positive and value < 0:
        raise ValueError(f"{name} must not be negative (got {value})")
    return float(value)


def predict_precopy(
    memory_mib: float,
    bandwidth_mib_s: float,
    dirty_rate_mib_s: float,
    max_downtime_ms: float,
    *,
    working_set_mib: float | None = None,
    timeout_s: float | None = None,
    on_timeout: Literal["abort", "force"] = "abort",
    overhead_s: float = 0.0,
    dirty_factor: float = 1.0,
    max_iterations: int = 1000,
    switchover_ms: float = 0.0,
    downtime_schedule: DowntimeSchedule | None = None,
    disk_mib: float = 0.0,
) -> PrecopyResult:
    """Simulate a pre-copy migration and return its cost; raises `ValueError` naming a bad parameter.

    `max_downtime_ms` is the limit the migration job is given (see `downtime_limit_ms`); the predicted
    downtime adds `switchover_ms` to the final transfer; `disk_mib` is a disk copied before memory. `timeout_s` counts from the start of the migration, setup overhead included. A migration still above
    the downtime threshold after `max_iterations` stage-2 passes is treated as one that will not
    converge: with a timeout it keeps sending (at the last remainder) until the timeout; without one it
    ends there, per `on_timeout`.
    """
    memory = _check("memory_mib", memory_mib, positive=True)
    bandwidth = _check("bandwidth_mib_s", bandwidth_mib_s, positive=True)
    dirty_rate = _check("dirty_rate_mib_s", dirty_rate_mib_s, positive=False)
    max_downtime = _check("max_downtime_ms", max_downtime_ms, positive=True)
    overhead = _check("overhead_s", overhead_s, positive=False)
    factor = _check("dirty_factor", dirty_factor, positive=False)
    switchover = _check("switchover_ms", switchover_ms, positive=False)
    disk_seconds = _check("disk_mib", disk_mib, positive=False) / bandwidth
    schedule = downtime_schedule if downtime_schedule is not None else DowntimeSchedule()
    if working_set_mib is None:
        working_set = memory * DEFAULT_WORKING_SET_FRACTION
    else:
        working_set = _check("working_set_mib", working_set_mib, positive=False)
        if working_set > memory:
            raise ValueError(f"working_set_mib must not exceed memory_mib ({working_set} > {memory})")
    timeout = None if timeout_s is None else _check("timeout_s", timeout_s, positive=True)
    if on_timeout not in ("abort", "force"):
        raise ValueError(f"on_timeout must be 'abort' or 'force' (got {on_timeout!r})")
    if isinstance(max_iterations, bool) or not isinstance(max_iterations, int) or max_iterations < 1:
        raise ValueError(f"max_iterations must be a positive integer (got {max_iterations!r})")

    effective_dirty = dirty_rate * factor

    def dirtied(seconds: float) -> float:
        return min(effective_dirty * seconds, working_set)

    memory_bytes = memory * 2**20

    def fits(remaining: float, elapsed: float) -> bool:
        # Compared as a downtime, so a converged result's transfer can never exceed the limit.
        return remaining * 1000.0 / bandwidth <= schedule.allowed_at(max_downtime, memory_bytes, elapsed)

    rounds: list[Round] = []
    elapsed = overhead + disk_seconds
    to_send = memory
    stage2_passes = 0
    timed_out = False
    converged = False
    while True:
        if timeout is not None and elapsed + to_send / bandwidth > timeout:
            budget = max(timeout - elapsed, 0.0)
            sent = bandwidth * budget
            if budget > 0:
                rounds.append(Round(budget, sent))
            # Unsent and newly dirtied pages overlap; in stage 2 both lie in the working set.
            ceiling = memory if stage2_passes == 0 else working_set
            remaining = min(to_send - sent + dirtied(budget), ceiling)
            timed_out = True
            break
        seconds = to_send / bandwidth
        rounds.append(Round(seconds, to_send))
        elapsed += seconds
        remaining = dirtied(seconds)
        if fits(remaining, elapsed):
            converged = True
            break
        if stage2_passes >= max_iterations:
            if timeout is not None and elapsed < timeout:
                # Never converges: it keeps sending until the completion timeout fires.
                rounds.append(Round(timeout - elapsed, bandwidth * (timeout - elapsed)))
                timed_out = True
            break
        stage2_passes += 1
        to_send = remaining

    iterations = max(len(rounds) - 1, 0)
    if converged or on_timeout == "force":
        transfer_s = remaining / bandwidth
        rounds.append(Round(transfer_s, remaining))
        end = max(elapsed, timeout) if timed_out and timeout is not None else elapsed
        downtime_s = transfer_s + switchover / 1000.0
        return PrecopyResult(
            total_seconds=end + downtime_s,
            downtime_ms=downtime_s * 1000.0,
            iterations=iterations,
            transferred_mib=math.fsum(r.mib for r in rounds),
            converged=converged,
            outcome="completed" if converged else "forced",
            rounds=tuple(rounds),
            remaining_mib=remaining,
            disk_seconds=disk_seconds,
        )
    return PrecopyResult(
        total_seconds=timeout if timed_out and timeout is not None else elapsed,
        downtime_ms=0.0,
        iterations=iterations,
        transferred_mib=math.fsum(r.mib for r in rounds),
        converged=False,
        outcome="aborted",
        rounds=tuple(rounds),
        remaining_mib=remaining,
        disk_seconds=disk_seconds,
    )
