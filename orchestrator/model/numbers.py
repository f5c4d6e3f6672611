"""Numbers people type: the one reader of whole numbers and decimals for every option, lease file and workload.

Only ASCII digits count. Python's `int()` and `float()` also read other scripts' digits ('١٢' is 12) and
`str.isdigit()` says yes to '²', which `int()` then refuses: one typo became a different number, the other a
traceback. Every value is bounded too, so an absurd one (2**31 VMs, a dirty rate of 1e308 MiB/s) is refused
by name here instead of exhausting memory or overflowing later.
"""

from __future__ import annotations

import math
import re

from orchestrator.model.errors import InvalidRequest, shown

#: the largest whole number any option or key takes (a C int: what SQLite, libvirt and the tables hold)
MAX_WHOLE = 2**31 - 1
_HUGE = 2.0**1000   # what a number too large for a float counts as: above every maximum
_WHOLE = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def ascii_whole(text: str) -> int | None:
    """`text` as an int when it is ASCII digits with an optional sign (spaces around allowed), else None."""
    value = text.strip()
    return int(value) if _WHOLE.fullmatch(value) else None


def ascii_decimal(text: str) -> float | None:
    """`text` as a float when it is an ASCII decimal (`12`, `1.5`, `.5`, `2e3`), else None; never nan/inf."""
    value = text.strip()
    if not _DECIMAL.fullmatch(value):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def plain(number: float) -> str:
    """A bound as people write it: 1048576, not 1.04858e+06."""
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


def parse_whole(value: object, field: str, *, minimum: int = 1, maximum: int = MAX_WHOLE) -> int:
    """A whole number from text or a parsed number (YAML, TOML): refused, naming `field`, unless it is a
    whole number within [minimum, maximum]."""
    number: int | None = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        number = ascii_whole(value)
    if number is None:
        raise InvalidRequest(field, f"must be a whole number (got {shown(value)})")
    if number < minimum:
        bound = "greater than zero" if minimum == 1 else f"at least {minimum}"
        raise InvalidRequest(field, f"must be {bound} (got {shown(number)})")
    if number > maximum:
        raise InvalidRequest(field, f"is too large (got {shown(number)}; at most {maximum})")
    return number


def parse_decimal(value: object, field: str, *, maximum: float, positive: bool = False, unit: str = "") -> float:
    """A finite number from text or a parsed number: refused, naming `field`, when it is not a number,
    negative (or zero, with `positive`), or above `maximum` (absurd values: no hardware comes near)."""
    number: float | None = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):   # (YAML and TOML read integers of any size: clamped, never overflowed)
        number = float(max(min(value, _HUGE), -_HUGE))
    elif isinstance(value, float):
        number = value if math.isfinite(value) else None
    elif isinstance(value, str):
        number = ascii_decimal(value)
        if number is None and _DECIMAL.fullmatch(value.strip()):   # more digits than a float holds
            number = -_HUGE if value.strip().startswith("-") else _HUGE
    if number is None:
        raise InvalidRequest(field, f"must be a number{f' of {unit}' if unit else ''} (got {shown(value)})")
    got = shown(value) if abs(number) == _HUGE else f"{number:g}"
    if number < 0:
        raise InvalidRequest(field, f"must not be negative (got {got})")
    if positive and number == 0:
        raise InvalidRequest(field, "must be greater than zero (got 0)")
    if number > maximum:
        raise InvalidRequest(field, f"is too large (got {got}; at most {plain(maximum)}{f' {unit}' if unit else ''})")
    return number
