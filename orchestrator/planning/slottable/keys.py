"""The integers the slot table stores instead of datetimes and usage vectors, and the sentinels around them.

Times become integer *keys* at the table's boundary: the compiled core (`core.pyx`) compares and bisects
machine integers. Usage vectors become integer *codes* (`SharedUsage`), stored beside the keys.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from orchestrator.model.timeutil import UTC

#: a key counts units of KEY_UNIT since KEY_ORIGIN
KEY_ORIGIN = datetime(1970, 1, 1, tzinfo=UTC)
KEY_UNIT = timedelta(microseconds=1)

#: keys below and above every time a datetime can express: the open edges of a host's first and last
#: segment (and, as lo = AFTER_ALL, hi = BEFORE_ALL, a window that holds at no time)
BEFORE_ALL = -(1 << 63)
AFTER_ALL = (1 << 63) - 1

#: the code of NOTHING, the first usage vector; the codes of the others count up from it (above every key:
#: the key of the latest datetime is below 2**58, so a code is never taken for a key)
NOTHING_CODE = 1 << 62

#: a host timeline's `scan` answers this when the request does not fit even at the interval's start
AT_START = object()


def time_key(t: datetime) -> int:
    """The key of an aware datetime: whole microseconds since the Unix epoch (exact for every datetime).
    The definition: the table uses the compiled core's `time_key`, which reads a UTC datetime's fields
    and must give the same (tests/planning/test_time_keys.py)."""
    d = t - KEY_ORIGIN
    return (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds
