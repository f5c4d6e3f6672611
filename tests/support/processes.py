"""The processes of a session (as `setsid` makes one: a child started with `start_new_session=True` and
everything it starts), read from /proc, so a test can tell what a command left running."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def session_processes(sid: int) -> dict[int, str]:
    """pid -> command name of every live process (not a zombie) in session `sid`."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        state, session = fields[0], int(fields[3])
        if session == sid and state != "Z":
            found[int(entry.name)] = name
    return found


def wait_until_gone(sid: int, timeout: float) -> dict[int, str]:
    """What is still running in session `sid` after waiting up to `timeout` seconds for it to end."""
    deadline = time.monotonic() + timeout
    while True:
        left = session_processes(sid)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def end_session(sid: int) -> None:
    """SIGKILL every process of session `sid` (one the test started), by pid."""
    for pid in session_processes(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
