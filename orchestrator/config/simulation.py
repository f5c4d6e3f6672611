"""[simulation] and [workload.swf]: where a simulation starts, the simulated site, and how an SWF trace
becomes leases."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from orchestrator.config.values import read_bool, read_duration, read_integer, set_field, value_kind
from orchestrator.model.errors import ConfigError, InvalidRequest
from orchestrator.model.resources import Resources, parse_capacity
from orchestrator.model.timeutil import UTC, in_range, parse_time

DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)
#: the most hosts a simulated site may have, so the most VMs one lease of a workload may ask for (the
#: benchmarks use 1,000): more is a typo, and making the list would exhaust memory
MAX_SITE_HOSTS = 100_000


# -- [simulation] -----------------------------------------------------------------------------------------
_SITE = re.compile(r"^\s*([0-9]+)\s+(\S.*)$")


def parse_site(text: str, field: str = "simulation.site") -> list[tuple[str, Resources]]:
    """Parse Haizea's resources string `N CPU:100,Memory:1024` (commas or spaces between the pairs)."""
    if not isinstance(text, str):
        raise ConfigError(field, f'must be a string such as "4 CPU:100,Memory:1024" (got {value_kind(text)})')
    match = _SITE.match(text)
    if not match:
        raise ConfigError(field, f'{text!r} is not "NUMHOSTS CPU:amount,Memory:amount[,...]" (e.g. "4 CPU:100,Memory:1024")')
    count = int(match.group(1))
    if count < 1:
        raise ConfigError(field, f"needs at least one host (got {count})")
    if count > MAX_SITE_HOSTS:
        raise ConfigError(field, f"has too many hosts (got {count}; at most {MAX_SITE_HOSTS})")
    spec = ",".join(match.group(2).split())
    try:
        capacity = parse_capacity(spec, field)
        capacity.validate(field)
    except InvalidRequest as exc:
        raise ConfigError(exc.field, exc.problem) from None
    return [(f"host{i}", capacity) for i in range(1, count + 1)]


@dataclass(frozen=True)
class SimulationConfig:
    """Where a simulation starts and, optionally, the simulated site."""

    start: datetime = DEFAULT_START
    site: str | None = None
    _hosts: tuple[tuple[str, Resources], ...] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        start = self.start
        if isinstance(start, str):
            try:
                start = parse_time(start, "simulation.start")
            except InvalidRequest as exc:
                raise ConfigError("simulation.start", exc.problem) from None
        elif isinstance(start, datetime):
            if start.tzinfo is None or start.utcoffset() is None:
                raise ConfigError("simulation.start",
                                  f"{start.isoformat()} has no time zone (write e.g. 2026-01-01T00:00:00Z)")
            try:
                start = in_range(start, "simulation.start")
            except InvalidRequest as exc:
                raise ConfigError("simulation.start", exc.problem) from None
        else:
            raise ConfigError("simulation.start",
                              f"must be a date-time with a time zone such as 2026-01-01T00:00:00Z (got {value_kind(start)})")
        set_field(self, "start", start)
        if self.site is not None:
            set_field(self, "_hosts", tuple(parse_site(self.site)))

    @property
    def hosts(self) -> list[tuple[str, Resources]] | None:
        """The site as `[("host1", capacity), ...]`, or None when the configuration names no site."""
        return None if self._hosts is None else list(self._hosts)


# -- [workload.swf] ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SWFConfig:
    """How an SWF trace (Parallel Workloads Archive) becomes leases."""

    processors_per_node: int = 1
    memory_per_vm: int = 1024
    first: int | None = None
    window_start: float | None = None
    window_end: float | None = None
    preemptible: bool = True

    def __post_init__(self) -> None:
        p = "workload.swf."
        set_field(self, "processors_per_node",
                  read_integer(p + "processors_per_node", self.processors_per_node, minimum=1))
        set_field(self, "memory_per_vm", read_integer(p + "memory_per_vm", self.memory_per_vm, minimum=1))
        if self.first is not None:
            set_field(self, "first", read_integer(p + "first", self.first, minimum=1))
        for name in ("window_start", "window_end"):
            value = getattr(self, name)
            if value is not None:
                set_field(self, name, read_duration(p + name, value).total_seconds())
        if self.window_start is not None and self.window_end is not None and self.window_end <= self.window_start:
            raise ConfigError(p + "window_end",
                              f"must be after window_start ({self.window_end:g} s <= {self.window_start:g} s)")
        set_field(self, "preemptible", read_bool(p + "preemptible", self.preemptible))
