"""How long a VM is unreachable on the network while it is live-migrated, as its users see it.

libvirt's downtime is the guest's pause; what a person with an open connection notices also includes the
switch learning the VM's new port (the guest's announce) and the tap coming up on the destination. So the
daemon pings the VM every 10 ms from where it runs for the whole migration and keeps the longest silence
between two replies. It uses the system's `ping` (iputils, `-D` timestamps each reply): ICMP needs
privileges a daemon's Python has no business asking for, and `ping` already holds them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field

#: one echo request every this many seconds (iputils allows below 0.2 s to root only; others get 0.2 s)
INTERVAL_S = 0.01
#: before the migration starts, this long without a reply means the address does not answer at all
WARMUP_S = 0.5
_REPLY = re.compile(r"^\[(\d+\.\d+)\] \d+ bytes from .*icmp_seq=(\d+)")


def longest_gap_ms(stamps: list[float], since: float, until: float) -> float | None:
    """The longest time, ms, between two consecutive replies in [since, until] (the edges count as replies
    when the address answered before and after: a silence across an edge is part of the outage)."""
    inside = [t for t in stamps if since <= t <= until]
    before = [t for t in stamps if t < since]
    after = [t for t in stamps if t > until]
    points = ([before[-1]] if before else []) + inside + ([after[0]] if after else [])
    if len(points) < 2:
        return None
    return max(b - a for a, b in zip(points, points[1:])) * 1000.0


@dataclass
class PingProbe:
    """Pings one address in the background; `outage_ms()` once stopped."""

    address: str
    interval_s: float = INTERVAL_S
    stamps: list[float] = field(default_factory=list)
    _proc: subprocess.Popen | None = None
    _reader: threading.Thread | None = None
    started: float = 0.0
    stopped: float = 0.0

    def start(self) -> bool:
        """Start pinging; False when `ping` is missing or the address gave no reply within `WARMUP_S`."""
        ping = shutil.which("ping")
        if ping is None:
            return False
        interval = self.interval_s if _privileged() else max(self.interval_s, 0.2)
        self._proc = subprocess.Popen([ping, "-n", "-D", "-i", f"{interval:g}", "-W", "1", self.address],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                      stdin=subprocess.DEVNULL)
        self._reader = threading.Thread(target=self._read, name=f"ping {self.address}", daemon=True)
        self._reader.start()
        deadline = time.time() + WARMUP_S
        while time.time() < deadline and not self.stamps:
            time.sleep(0.02)
        if not self.stamps:
            self.stop()
            return False
        self.started = time.time()
        return True

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            match = _REPLY.match(line)
            if match:
                self.stamps.append(float(match.group(1)))

    def stop(self, linger_s: float = 0.0) -> None:
        """Stop pinging, after `linger_s` more seconds (so a silence that lasts past the migration's end
        is seen whole)."""
        self.stopped = self.stopped or time.time()
        if linger_s > 0:
            time.sleep(linger_s)
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        if self._reader is not None:
            self._reader.join(timeout=2)

    def outage_ms(self) -> float | None:
        """The longest silence during the migration (from `start` to the first `stop`), ms."""
        return longest_gap_ms(self.stamps, self.started, self.stopped)

    def answered_after(self) -> bool:
        """Whether the address answered again after the migration: the connection survived."""
        return any(t > self.stopped for t in self.stamps)


def _privileged() -> bool:
    return os.geteuid() == 0
