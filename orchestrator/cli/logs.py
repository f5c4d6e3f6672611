"""Structured logging for long-running commands (`run`, `serve`): one logfmt line per record, to stderr.

    2026-12-02T05:00:00Z level=warning logger=orchestrator.runtime.notices msg="notice ended of lease 7 ..." lease=7

stderr, because under systemd journald keeps it with the unit's name and its own timestamp; logfmt,
because `journalctl -u leasewise | grep lease=7` and log shippers read it without a parser of ours.
Fields a caller passes with `extra={"lease": 7}` follow the message. A traceback goes into one `exc=`
field (newlines escaped), so one record stays one line.

Each line carries the time of the clock the command runs on (`configure_logging(..., now=...)`): under
`run --fast` the simulated time, the same as the events printed beside them, not the wall clock's.

This sets up the process's root logger: it is called by the command's entry, and nowhere else.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from datetime import datetime

from orchestrator.model.errors import InvalidRequest
from orchestrator.model.text import printable
from orchestrator.model.timeutil import UTC

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
#: libraries that narrate every connection at info; shown from warning on unless --log-level debug
_CHATTY = ("paramiko", "asyncio", "urllib3")
#: the attributes every LogRecord has: anything else on a record came from `extra=`
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


def parse_level(text: str) -> int:
    """A `--log-level` value as a logging level; anything else is one error naming the option."""
    level = LEVELS.get(str(text).strip().lower())
    if level is None:
        raise InvalidRequest("--log-level", f"must be one of {', '.join(LEVELS)} (got {text!r})")
    return level


def quote(value: object, always: bool = False) -> str:
    """A logfmt value: bare when it is one plain word (and not `always`), else in double quotes with \\, "
    and control characters escaped."""
    text = "null" if value is None else str(value)
    if not always and text and all(c.isprintable() and c not in ' "=\\' for c in text):
        return text
    escaped = (text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
               .replace("\t", "\\t"))
    return '"' + printable(escaped) + '"'


class LogfmtFormatter(logging.Formatter):
    def __init__(self, now: Callable[[], datetime] | None = None):
        """`now`: the time a record is stamped with when it is written (None: when it was made, by the wall clock)."""
        super().__init__()
        self._now = now

    def format(self, record: logging.LogRecord) -> str:
        when = self._now() if self._now is not None else datetime.fromtimestamp(record.created, UTC)
        stamp = when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        level = {"WARN": "warning", "CRITICAL": "error", "FATAL": "error"}.get(record.levelname,
                                                                            record.levelname.lower())
        parts = [stamp, f"level={level}", f"logger={quote(record.name)}", f"msg={quote(record.getMessage(), True)}"]
        parts += [f"{key}={quote(value)}" for key, value in vars(record).items()
                  if key not in _STANDARD and not key.startswith("_")]
        if record.exc_info:
            parts.append(f"exc={quote(self.formatException(record.exc_info))}")
        return " ".join(parts)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is when a record comes (a test runner swaps it per command)."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self):   # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def configure_logging(level: str, now: Callable[[], datetime] | None = None) -> Callable[[], None]:
    """Send every record at `level` or above to stderr as logfmt lines (replacing the handler an earlier
    call installed, so calling it again changes the level rather than doubling every line), stamped with
    `now()` (default: the wall clock).

    Returns what puts the loggers back as they were: a command run inside another program (a test
    runner, a server calling it) calls it when done; a process that logs until it exits need not."""
    number = parse_level(level)
    root = logging.getLogger()
    saved = (root.level, list(root.handlers), {name: logging.getLogger(name).level for name in _CHATTY})

    def restore() -> None:
        root.handlers[:] = saved[1]
        root.setLevel(saved[0])
        for name, chatty_level in saved[2].items():
            logging.getLogger(name).setLevel(chatty_level)

    for handler in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(handler)
    handler = _StderrHandler()
    handler.setFormatter(LogfmtFormatter(now))
    root.addHandler(handler)
    root.setLevel(number)
    for name in _CHATTY:
        logging.getLogger(name).setLevel(number if number <= logging.DEBUG else max(number, logging.WARNING))
    return restore
