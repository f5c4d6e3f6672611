"""The downtime a pre-copy migration is allowed as it goes on: the libvirt driver sets it on the job, and
the planner's pre-copy model checks convergence against the same values, so the two cannot drift apart.

Nova raises the allowed downtime in steps (live_migration_downtime_steps, live_migration_downtime_delay):
it starts at limit/steps, so a guest that can converge with a tiny pause gets one, and reaches the full
limit after `steps` delays, each longer for a bigger guest. With one step the full limit holds from the
start, which keeps a planned migration as short as the model says.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30


@dataclass(frozen=True)
class DowntimeSchedule:
    """How the allowed downtime is raised during one migration."""

    steps: int = 1
    delay_s_per_gib: float = 75.0

    def __post_init__(self) -> None:
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1:
            raise ValueError(f"downtime steps must be an integer of at least 1 (got {self.steps!r})")
        if not self.delay_s_per_gib >= 0:
            raise ValueError(f"downtime step delay must not be negative (got {self.delay_s_per_gib!r})")

    def points(self, limit_ms: float, memory_bytes: float) -> list[tuple[float, float]]:
        """(seconds into the migration, allowed downtime ms) pairs, the first at 0 s, the last the limit."""
        delay = self.delay_s_per_gib * memory_bytes / GIB
        base = limit_ms / self.steps
        offset = (limit_ms - base) / self.steps
        return [(delay * i, base + offset * i) for i in range(self.steps + 1)]

    def allowed_at(self, limit_ms: float, memory_bytes: float, elapsed_s: float) -> float:
        """The allowed downtime in force `elapsed_s` seconds into the migration."""
        if self.steps == 1:
            return limit_ms
        return allowed_at(self.points(limit_ms, memory_bytes), elapsed_s)


def allowed_at(points: list[tuple[float, float]], elapsed_s: float) -> float:
    """The value of the step in force `elapsed_s` seconds into the migration."""
    value = None
    for at, downtime in points:
        if elapsed_s >= at:
            value = downtime
    if value is None:
        raise ValueError("downtime steps must start at 0 s")
    return value
