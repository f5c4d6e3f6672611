"""Time helpers: every time inside leasewise is a timezone-aware UTC datetime, every duration a timedelta."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

from orchestrator.model.errors import InvalidRequest
from orchestrator.model.tolerance import EPSILON

UTC = timezone.utc
ZERO = timedelta(0)
SECOND = timedelta(seconds=1)
#: later than any plan, yet early enough that adding a lease's length to it cannot overflow a datetime
FOREVER = datetime(9999, 1, 1, tzinfo=UTC)


def as_utc(value: datetime, field: str = "time") -> datetime:
    """Return `value` in UTC; a naive datetime is refused rather than guessed at."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidRequest(field, f"{value.isoformat()} has no timezone (give e.g. 2026-01-01T14:00:00Z)")
    return value.astimezone(UTC)


def parse_time(text: str, field: str = "time") -> datetime:
    """Parse an ISO 8601 time; `Z` and offsets are accepted, a missing offset is refused."""
    raw = text.strip()
    if raw.endswith("Z") or raw.endswith("z"):
        raw = raw[:-1] + "+00:00"
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise InvalidRequest(field, f"{text!r} is not an ISO 8601 time") from None
    return as_utc(value, field)


def iso(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with a trailing Z, as written in JSON output."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def ceil_time(t: datetime) -> datetime:
    """`t` rounded up to a whole second."""
    return t if t.microsecond == 0 else t.replace(microsecond=0) + timedelta(seconds=1)


def ceil_seconds(seconds: float) -> timedelta:
    """Round a duration up to whole seconds, as the planner works in whole seconds."""
    return timedelta(seconds=math.ceil(seconds - EPSILON))


def _number(digits: str, field: str, problem: str) -> float:
    try:
        return float(digits)   # digits and dots only: fails on "1.2.3" or "."
    except ValueError:
        raise InvalidRequest(field, problem) from None


def parse_duration(text: str, field: str = "duration") -> timedelta:
    """Parse `90`, `90s`, `15m`, `2h`, `1d`, `1h30m`, `HH:MM:SS` or `DD:HH:MM:SS` into a timedelta."""
    raw = str(text).strip().lower()
    if not raw:
        raise InvalidRequest(field, "is empty")
    negative = raw.startswith("-")
    if ":" in raw:
        parts = raw.lstrip("-+").split(":")
        if not 2 <= len(parts) <= 4 or not all(p.isdigit() for p in parts):
            raise InvalidRequest(field, f"{text!r} is not a duration (use e.g. 01:30:00 or 90m)")
        nums = [int(p) for p in parts]
        while len(nums) < 4:
            nums.insert(0, 0)
        days, hours, minutes, seconds = nums
        value = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    else:
        units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
        bad = f"{text!r} is not a duration (use e.g. 90s, 15m, 2h, 1h30m)"
        total = 0.0
        number = ""
        body = raw.lstrip("-+")
        for ch in body:
            if ch.isdigit() or ch == ".":
                number += ch
            elif ch in units and number:
                total += _number(number, field, bad) * units[ch]
                number = ""
            else:
                raise InvalidRequest(field, bad)
        if number:
            total += _number(number, field, bad)
        value = timedelta(seconds=total)
    if negative:
        value = -value
    return value
