"""The readers every configuration table shares: each checks one value and names its dotted key when it is
wrong (`scheduling.suspend_rate: must be greater than zero (got 0)`).

Durations accept a number of seconds, a string such as "30s", "5m", "1h30m", "01:00:00", or a TOML local
time (`shutdown_time = 00:00:30`).
"""

from __future__ import annotations

import difflib
import math
from datetime import date, datetime, time, timedelta

from orchestrator.model.errors import ConfigError, InvalidRequest
from orchestrator.model.numbers import plain
from orchestrator.model.timeutil import ZERO, duration_from_seconds, parse_duration

#: the range of a rate (MB/s or MiB/s: suspend, resume, migration): from a 100 kB/s link to 1 TiB/s, so an
#: overhead (memory / rate) always fits a duration
RATES = (0.1, 1024.0 * 1024.0)


def value_kind(value: object) -> str:
    """How a wrong value is described in an error: its TOML type, and the value itself when short."""
    if isinstance(value, str):
        return f"the string {value!r}" if len(value) <= 40 else "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, datetime):
        return "a date-time"
    if isinstance(value, date):
        return "a date"
    if isinstance(value, time):
        return "a time"
    return type(value).__name__


def read_choice(key: str, value: object, allowed: tuple[str, ...]) -> str:
    listed = ", ".join(f'"{a}"' for a in allowed)
    if not isinstance(value, str):
        raise ConfigError(key, f"must be one of {listed} (got {value_kind(value)})")
    if value not in allowed:
        hint = difflib.get_close_matches(value, allowed, n=1)
        extra = f"; did you mean {hint[0]!r}?" if hint else ""
        raise ConfigError(key, f"must be one of {listed} (got {value!r}{extra})")
    return value


def read_number(key: str, value: object, *, positive: bool = False, minimum: float = 0.0,
                maximum: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(key, f"must be a number {'greater than zero' if positive else '>= 0'} (got {value_kind(value)})")
    number = float(value)
    if math.isnan(number) or math.isinf(number):
        raise ConfigError(key, f"must be a finite number (got {value})")
    if positive and number <= 0:
        raise ConfigError(key, f"must be greater than zero (got {value})")
    if not positive and number < 0:
        raise ConfigError(key, f"must not be negative (got {value})")
    if number < minimum:
        raise ConfigError(key, f"is too small (got {value}; at least {plain(minimum)})")
    if number > maximum:
        raise ConfigError(key, f"is too large (got {value}; at most {plain(maximum)})")
    return number


def read_rate(key: str, value: object) -> float:
    return read_number(key, value, positive=True, minimum=RATES[0], maximum=RATES[1])


def read_integer(key: str, value: object, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ConfigError(key, f"must be an integer >= {minimum} (got {value_kind(value)} {value!r})")
    if value < minimum:
        raise ConfigError(key, f"must be an integer >= {minimum} (got {value})")
    return value


def read_duration(key: str, value: object) -> timedelta:
    """Seconds, a duration string, a TOML local time or a timedelta; never negative."""
    if isinstance(value, timedelta):
        result = value
    elif isinstance(value, bool):
        raise ConfigError(key, "must be a duration such as 30, \"30s\", \"5m\" or \"01:00:00\" (got a boolean)")
    elif isinstance(value, (int, float)):
        try:
            result = duration_from_seconds(value, key)
        except InvalidRequest as exc:
            raise ConfigError(key, exc.problem) from None
    elif isinstance(value, time) and not isinstance(value, datetime):
        if value.tzinfo is not None:
            raise ConfigError(key, "a duration cannot have a time zone")
        result = timedelta(hours=value.hour, minutes=value.minute, seconds=value.second,
                           microseconds=value.microsecond)
    elif isinstance(value, str):
        try:
            result = parse_duration(value, key)
        except InvalidRequest as exc:
            raise ConfigError(key, exc.problem) from None
    else:
        raise ConfigError(key, f"must be a duration such as 30, \"30s\", \"5m\" or \"01:00:00\" (got {value_kind(value)})")
    if result < ZERO:
        raise ConfigError(key, f"must not be negative (got {value!r})")
    return result


def read_timeout(key: str, value: object) -> timedelta:
    """A duration more than 0 s and at most 10 minutes (how long something may take before it is given up)."""
    result = read_duration(key, value)
    if not timedelta(0) < result <= timedelta(minutes=10):
        raise ConfigError(key, f"must be more than 0 s and at most 10 minutes (got {value!r})")
    return result


def read_optional_duration(key: str, value: object) -> timedelta | None:
    return None if value is None else read_duration(key, value)


def read_name(key: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(key, f"must be a non-empty string (got {value_kind(value)})")
    return value.strip()


def read_bool(key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(key, f"must be true or false (got {value_kind(value)})")
    return value


def set_field(obj: object, name: str, value: object) -> None:
    """Set a field of a frozen dataclass to its checked value (in its `__post_init__`)."""
    object.__setattr__(obj, name, value)


def read_optional_path(key: str, value: object) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not value.startswith("/"):
        raise ConfigError(key, f"must be an absolute file path (got {value_kind(value)})")
    return value


def read_path(key: str, value: object) -> str:
    if not isinstance(value, str) or not value.startswith("/"):
        raise ConfigError(key, f"must be an absolute path (got {value_kind(value)})")
    return value
