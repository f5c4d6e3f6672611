"""What the lab benchmarks share: a lease cancelled and the daemon waited for until it has cleaned up after it
(its VMs stopped and their volumes removed on every host), so the next run starts on empty hosts."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable


def cancel_and_wait_released(cli: Callable[..., str], lease: str, common: list[str], timeout_s: float = 120) -> None:
    """`leasewise lease cancel LEASE`, then until its `released` event; `cli(*args)` runs leasewise and
    answers its standard output."""
    cli("lease", "cancel", lease, *common)
    deadline = time.monotonic() + timeout_s
    while not any(e["kind"] == "released"
                  for e in json.loads(cli("lease", "show", lease, "--json", *common))["events"]):
        if time.monotonic() > deadline:
            sys.exit(f"the daemon did not clean up after lease {lease} in {timeout_s:g} s")
        time.sleep(1)
