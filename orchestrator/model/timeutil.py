"""Time helpers: every time inside leasewise is a timezone-aware UTC datetime, every duration a timedelta.

Times and durations people give are read here and nowhere else (`parse_time`, `parse_duration`,
`duration_from_seconds`), with ASCII digits only, and bounded: a time must lie in the years 1970 to 9998
(`EARLIEST` to `FOREVER`) and `end_of` refuses a time plus a duration past that, so no lease, drain or
extension can overflow a datetime later on.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone
from typing import overload

from orchestrator.model.errors import InvalidRequest, shown
from orchestrator.model.tolerance import EPSILON

UTC = timezone.utc
ZERO = timedelta(0)
SECOND = timedelta(seconds=1)
#: later than any plan, yet early enough that adding a lease's length to it cannot overflow a datetime
FOREVER = datetime(9999, 1, 1, tzinfo=UTC)
#: the earliest time leasewise takes from anyone (the Unix epoch)
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
#: no duration is longer than the whole range of times
MAX_DURATION = FOREVER - EARLIEST
#: the same in whole seconds, an int: an int of any size is compared with it as an int
_MAX_SECONDS = MAX_DURATION // SECOND
_RANGE = "years 1970 to 9998"
_DATE_ONLY = re.compile(r"[0-9]{4}-?[0-9]{2}-?[0-9]{2}")


def as_utc(value: datetime, field: str = "time") -> datetime:
    """Return `value` in UTC; a naive datetime is refused rather than guessed at."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidRequest(field, f"{value.isoformat()} has no timezone (give e.g. 2026-01-01T14:00:00Z)")
    try:
        return value.astimezone(UTC)
    except OverflowError:   # 0001-01-01T00:00+01:00 is before the first datetime in UTC
        raise InvalidRequest(field, f"{value.isoformat()} is out of range ({_RANGE})") from None


def in_range(value: datetime, field: str = "time") -> datetime:
    """`value` in UTC, refused unless it lies in the years 1970 to 9998."""
    value = as_utc(value, field)
    if not EARLIEST <= value < FOREVER:
        raise InvalidRequest(field, f"{iso(value)} is out of range ({_RANGE})")
    return value


def parse_time(text: str, field: str = "time") -> datetime:
    """Parse an ISO 8601 time in the years 1970 to 9998; `Z` and offsets are accepted, a missing offset is
    refused (`datetime.fromisoformat` reads ASCII digits only)."""
    raw = text.strip()
    if raw.endswith("Z") or raw.endswith("z"):
        raw = raw[:-1] + "+00:00"
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise InvalidRequest(field, f"{text!r} is not an ISO 8601 time") from None
    if _DATE_ONLY.fullmatch(raw):
        raise InvalidRequest(field, f"{raw} has no time of day (give e.g. {raw}T14:00:00Z)")
    return in_range(value, field)


def end_of(start: datetime, duration: timedelta, field: str) -> datetime:
    """`start + duration`, refused (naming `field`, the duration's) when it would be past the year 9998."""
    if duration >= FOREVER - start:
        raise InvalidRequest(field, f"is too long: from {iso(start)} it would end after the year 9998")
    return start + duration


@overload
def iso(value: datetime) -> str: ...
@overload
def iso(value: None) -> None: ...
@overload
def iso(value: datetime | None) -> str | None: ...
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


_DIGITS = re.compile(r"[0-9]+")
_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
#: `1h30m`, `90s`, `1.5h`, `90` (seconds): numbers each with a unit, the last one's optional
_UNITS_TEXT = re.compile(rf"(?:{_NUMBER}[dhms])*{_NUMBER}?")
_PART = re.compile(rf"({_NUMBER})([dhms]?)")
_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1, "": 1}
#: the parts of `DD:HH:MM:SS` after the first: their bounds and names
_CLOCK_LIMITS = ((24, "hours"), (60, "minutes"), (60, "seconds"))


def duration_from_seconds(seconds: int | float, field: str = "duration") -> timedelta:
    """A number of seconds (an int of any size, or a float) as a timedelta; NaN, or longer than
    `MAX_DURATION` (infinity too), is refused."""
    if seconds != seconds:
        raise InvalidRequest(field, f"must be a finite duration (got {seconds})")
    if isinstance(seconds, int):   # compared as an int, of any size (compiled, `int | float` reads as a float)
        too_long = abs(seconds) > _MAX_SECONDS
    else:
        too_long = abs(seconds) > MAX_DURATION.total_seconds()
    if too_long:
        raise InvalidRequest(field, f"is too long (more than {MAX_DURATION.days} days)")
    return timedelta(seconds=seconds)


def positive_duration(value: str | int | float, field: str) -> timedelta:
    """A duration greater than zero: text such as 30m (`parse_duration`), or seconds."""
    amount = parse_duration(value, field) if isinstance(value, str) else duration_from_seconds(value, field)
    if amount.total_seconds() <= 0:
        raise InvalidRequest(field, f"must be greater than zero (got {shown(value)})")
    return amount


def parse_duration(text: str | int | float, field: str = "duration") -> timedelta:
    """Parse `90`, `90s`, `15m`, `2h`, `1d`, `1h30m`, `MM:SS`, `HH:MM:SS` or `DD:HH:MM:SS` into a timedelta
    (ASCII digits only; each part after the first within its unit; a leading `-` makes it negative, for
    the caller to refuse)."""
    raw = str(text).strip().lower()
    if not raw:
        raise InvalidRequest(field, "is empty")
    negative = raw.startswith("-")
    body = raw.lstrip("-+")
    if ":" in body:
        parts = body.split(":")
        if not 2 <= len(parts) <= 4 or not all(_DIGITS.fullmatch(p) for p in parts):
            raise InvalidRequest(field, f"{text!r} is not a duration (use e.g. 01:30:00 or 90m)")
        nums = [int(p) for p in parts]
        # the first part is as large as it likes; each after it within its unit (99:99:99 is no duration)
        for number, (limit, unit) in zip(nums[1:], _CLOCK_LIMITS[-(len(nums) - 1):]):
            if number >= limit:
                raise InvalidRequest(field, f"{text!r} is not a duration ({unit} run from 0 to {limit - 1}; "
                                            "use e.g. 01:30:00 or 90m)")
        while len(nums) < 4:
            nums.insert(0, 0)
        days, hours, minutes, seconds = nums
        total: int | float = ((days * 24 + hours) * 60 + minutes) * 60 + seconds   # (an int of any size)
    else:
        if not body or not _UNITS_TEXT.fullmatch(body):
            raise InvalidRequest(field, f"{text!r} is not a duration (use e.g. 90s, 15m, 2h, 1h30m)")
        total = math.fsum(float(number) * _UNIT_SECONDS[unit] for number, unit in _PART.findall(body))
    value = duration_from_seconds(total, field)
    return -value if negative else value
