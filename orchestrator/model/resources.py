"""A fixed resource vector: the unit the slot table adds, subtracts and compares millions of times.

It is a NamedTuple (not a dataclass) because tuple indexing and construction are the cheapest objects
CPython has, and every arithmetic helper below is unrolled over the five fields for the same reason.

Units: `cpu` in percent of one core (100 = one vCPU, as in Haizea's LWF), `memory` and `disk` in MiB,
`net_in` / `net_out` in MB/s (bandwidth held by memory-image transfers and live migrations).
"""

from __future__ import annotations

from typing import NamedTuple

from orchestrator.model.errors import InvalidRequest
from orchestrator.model.numbers import MAX_WHOLE, ascii_decimal
from orchestrator.model.tolerance import EPSILON


#: the largest amount of any resource (2**31 - 1: 2 PiB of memory, 21 million vCPUs); more is a typo whose
#: overheads (memory / rate) would overflow a duration
MAX_AMOUNT = float(MAX_WHOLE)

#: an amount as given: an int stays an int (typed `float`, compiled code would make every amount a float,
#: and `2` would be written back as `2.0`)
Amount = int | float


class Resources(NamedTuple):
    cpu: Amount = 0
    memory: Amount = 0
    disk: Amount = 0
    net_in: Amount = 0
    net_out: Amount = 0

    @classmethod
    def of(cls, vcpus: Amount = 0, memory: Amount = 0, disk: Amount = 0, net_in: Amount = 0,
           net_out: Amount = 0) -> "Resources":
        """Build from whole vCPUs (the way people talk) rather than percent."""
        return cls(vcpus * 100, memory, disk, net_in, net_out)

    @property
    def vcpus(self) -> float:
        return self.cpu / 100

    def validate(self, what: str = "resources", allow_zero_cpu: bool = False) -> "Resources":
        """Refuse negative amounts and a VM without CPU or memory; names the offending field."""
        for name, value in zip(self._fields, self):
            if value != value:  # NaN compares false with everything and would slip through
                raise InvalidRequest(f"{what}.{name}", "is not a number (got nan)")
            if value < 0:
                raise InvalidRequest(f"{what}.{name}", f"must not be negative (got {value})")
            if value > MAX_AMOUNT:
                raise InvalidRequest(f"{what}.{name}", f"is too large (got {value:g}; at most {MAX_WHOLE})")
        if not allow_zero_cpu and self.cpu <= 0:
            raise InvalidRequest(f"{what}.cpu", "must be greater than zero")
        if self.memory <= 0 and not allow_zero_cpu:
            raise InvalidRequest(f"{what}.memory", "must be greater than zero")
        return self

    def describe(self) -> str:
        parts = [f"{self.vcpus:g} vCPU", f"{self.memory:g} MiB"]
        if self.disk:
            parts.append(f"disk {self.disk:g} MiB")
        if self.net_in or self.net_out:
            parts.append(f"net {self.net_in:g}/{self.net_out:g} MB/s")
        return ", ".join(parts)


NOTHING = Resources()


def add(a: Resources, b: Resources) -> Resources:
    return Resources(a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3], a[4] + b[4])


def sub(a: Resources, b: Resources) -> Resources:
    return Resources(a[0] - b[0], a[1] - b[1], a[2] - b[2], a[3] - b[3], a[4] - b[4])


def scale(a: Resources, k: Amount) -> Resources:
    return Resources(a[0] * k, a[1] * k, a[2] * k, a[3] * k, a[4] * k)


def fits(used: Resources, extra: Resources, capacity: Resources) -> bool:
    """True when `used + extra` stays within `capacity` on every resource (with float tolerance)."""
    return (
        used[0] + extra[0] <= capacity[0] + EPSILON
        and used[1] + extra[1] <= capacity[1] + EPSILON
        and used[2] + extra[2] <= capacity[2] + EPSILON
        and used[3] + extra[3] <= capacity[3] + EPSILON
        and used[4] + extra[4] <= capacity[4] + EPSILON
    )


def within(amount: Resources, capacity: Resources) -> bool:
    return fits(NOTHING, amount, capacity)


def metered(amount: Resources, capacity: Resources) -> Resources:
    """`amount` without what a host of this capacity does not meter (declared 0), e.g. disk or network
    on a site described only by CPU and memory."""
    return Resources(*(a if c > 0 else 0 for a, c in zip(amount, capacity)))


def parse_capacity(text: str, field: str = "capacity") -> Resources:
    """Parse Haizea's site notation `CPU:100,Memory:1024[,Disk:..,Net-in:..,Net-out:..]`."""
    names = {"cpu": "cpu", "memory": "memory", "mem": "memory", "disk": "disk",
             "net-in": "net_in", "net_in": "net_in", "netin": "net_in",
             "net-out": "net_out", "net_out": "net_out", "netout": "net_out"}
    values: dict[str, float] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, amount = item.partition(":")
        key = key.strip().lower()
        if not sep or key not in names:
            raise InvalidRequest(field, f"{item!r} is not RESOURCE:AMOUNT with RESOURCE one of CPU, Memory, Disk, Net-in, Net-out")
        number = ascii_decimal(amount)
        if number is None:
            raise InvalidRequest(f"{field}.{key}", f"{amount.strip()!r} is not a number")
        if number < 0:
            raise InvalidRequest(f"{field}.{key}", f"must not be negative (got {amount.strip()})")
        values[names[key]] = number
    if "cpu" not in values or "memory" not in values:
        raise InvalidRequest(field, f"{text!r} must give at least CPU and Memory")
    return Resources(**values)
