"""Long loops that no request waits for let the request threads in as they go.

A request thread lets go of the GIL at each of its many waits (the socket, every SQLite statement) and must
take it back after each; while another thread runs Python without a pause, every such take waits up to the
interpreter's switch interval (5 ms). A look at every host of a big lab (a driver's `list_every_host`), or
the daemon's pass over all its leases, is tens of milliseconds of such running, and a submission arriving
meanwhile waits for it many times over. Letting go of the GIL every stretch of a fraction of a millisecond
(a zero sleep, a few microseconds) lets those threads take it back at once; the loop, which no request
waits for, takes a little longer.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def sharing_the_gil(items: Iterable[T], every: int) -> Iterator[T]:
    """`items`, the GIL let go before every `every`-th one: `every` items should take a tenth of a
    millisecond or so. Only for loops outside any lock a request waits for: a pause under it makes its waiters wait."""
    for index, item in enumerate(items):
        if index % every == 0:
            time.sleep(0)
        yield item
