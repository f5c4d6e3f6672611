"""A store busy with another writer: a command tries again on its own, for up to `--wait` seconds.

SQLite makes a writer wait for the store's write lock up to the store's busy timeout
(`orchestrator.state.store.BUSY_TIMEOUT_S`); past it the store raises `StoreBusy`. A command given the
shared options (`orchestrator.cli.common.store_options`) is then run again from its start, after random
pauses that grow (tenacity's exponential jitter, so several waiting processes do not retry in step), until
`--wait` seconds have passed since it first found the store busy; still busy, it says so in one line and
exits 75 (`EX_TEMPFAIL`, sysexits.h: try again later). Running a command again is safe: it writes nothing
until its one transaction commits, and a busy store refuses that transaction before it starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_random_exponential

from orchestrator.model.numbers import parse_decimal
from orchestrator.model.errors import StoreBusy

T = TypeVar("T")

#: how long a command retries by default, and at most
DEFAULT_WAIT_S = 30.0
MAX_WAIT_S = 24 * 3600.0


def parse_wait(text: str | float) -> float:
    """`--wait`: seconds, 0 (do not retry) up to a day."""
    return parse_decimal(text, "--wait", maximum=MAX_WAIT_S, unit="seconds")


class _Waited:
    """Tenacity's stop condition: `seconds` have passed since the first attempt failed (an attempt may
    itself have waited the store's busy timeout, or, for the daemon, have run for hours)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.first_failure: float | None = None

    def __call__(self, state: RetryCallState) -> bool:
        now = state.outcome_timestamp if state.outcome_timestamp is not None else state.start_time
        if self.first_failure is None:
            self.first_failure = now
        return now - self.first_failure >= self.seconds


def call_waiting(call: Callable[[], T], wait_s: float) -> T:
    """`call()`, called again while it raises `StoreBusy`, for up to `wait_s` seconds after the first time;
    then that `StoreBusy` is raised. `wait_s` 0: called once."""
    if wait_s <= 0:
        return call()
    retrying = Retrying(retry=retry_if_exception_type(StoreBusy), stop=_Waited(wait_s),
                        wait=wait_random_exponential(multiplier=0.2, max=2.0), reraise=True)
    return retrying(call)
