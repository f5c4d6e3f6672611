"""Reading a guest's serial console through libvirt (a stream over the host's connection): for guests that
say on their console when they are ready, or that they are still alive after a migration.

The stream is blocking, so a reader thread receives while the caller watches the clock; the stream is
aborted when the caller has its line or gives up, which also ends the thread.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from .connection import Connections


def wait_for_console_line(connections: Connections, host: str, vm: str, pattern: str, timeout_s: float,
                          poll_s: float = 0.1) -> str | None:
    """The first line the guest prints on its console, from now on, that matches `pattern`; None when
    none did within `timeout_s` (or the console closed)."""
    lv = connections.libvirt
    wanted = re.compile(pattern)

    def open_stream(conn: Any) -> Any:
        stream = conn.newStream(0)
        conn.lookupByName(vm).openConsole(None, stream, lv.VIR_DOMAIN_CONSOLE_FORCE)
        return stream

    stream = connections.call(host, f"console of {vm}", open_stream, vm)
    chunks: list[str] = []
    lock = threading.Lock()
    ended = threading.Event()

    def read() -> None:
        try:
            while True:
                data = stream.recv(4096)
                if not isinstance(data, bytes) or not data:
                    return
                with lock:
                    chunks.append(data.decode(errors="replace"))
        except lv.libvirtError:
            return
        finally:
            ended.set()

    reader = threading.Thread(target=read, name=f"leasewise-console-{vm}", daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            with lock:
                text = "".join(chunks)
            for line in text.split("\n")[:-1]:   # whole lines only: the last one may still grow
                if wanted.search(line):
                    return line.strip()
            if ended.is_set() or time.monotonic() >= deadline:
                return None
            time.sleep(poll_s)
    finally:
        try:
            stream.abort()
        except lv.libvirtError:
            pass   # already closed by the other end
        reader.join(2.0)
