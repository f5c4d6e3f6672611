"""What one request, and one user, may ask of `leasewise serve`: a request's body is capped in size and in
time before the API sees it, and each user's lease submissions are rate-limited.

The body is read here, whole, before the app is called (every route takes JSON, read whole anyway): a
`Content-Length` over the cap is answered 413 at once, a body sent without one is counted as it comes and
answered 413 as soon as it passes the cap, and one that has not arrived within the body timeout is
answered 408; each closes the connection. Before a 413 closes it, what the client is still sending is read
and dropped for a moment (a lingering close, as nginx and Apache make): a TCP connection closed with data
unread is reset, and the reset can destroy the answer before the client has read it. The answers are the
API's errors (`{"error": {"code", "message"}}`), one line each.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from orchestrator.model.errors import LeasewiseError

#: exit codes the CLI gives these answers (orchestrator.service.api has the whole table)
EXIT_BAD_INPUT, EXIT_BUSY = 2, 75
#: how long, and how much, of a refused body is read and dropped after the 413 before the connection closes
LINGER_S, LINGER_BYTES = 2.0, 64 << 20


class RequestBodyLimit:
    """ASGI middleware: the request's body in full, at most `max_bytes` within `timeout_s`, or an error."""

    def __init__(self, app: Any, max_bytes: int, timeout_s: float):
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._too_large(receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.timeout_s):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return   # (the client went away: no one to answer)
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.max_bytes:
                        await self._too_large(receive if message.get("more_body", False) else None, send)
                        return
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            await _answer(send, 408, EXIT_BUSY, f"request body: not received within {self.timeout_s:g} s "
                                                "(the server's [serve] body_timeout); nothing was done, try again")
            return
        await self.app(scope, _replay(b"".join(chunks), receive), send)

    async def _too_large(self, receive: Callable | None, send: Callable) -> None:
        """413; then, when more of the body is coming (`receive`), a lingering close."""
        await _answer(send, 413, EXIT_BAD_INPUT, f"request body: larger than the {_size(self.max_bytes)} the server "
                                                 "takes ([serve] max_request_body); nothing was done",
                      linger=None if receive is None else partial(_drop_body, receive, min(LINGER_S, self.timeout_s)))


async def _drop_body(receive: Callable, seconds: float) -> None:
    """Read what remains of the request's body and drop it, for at most `seconds` and `LINGER_BYTES`."""
    left = LINGER_BYTES
    try:
        async with asyncio.timeout(seconds):
            while left > 0:
                message = await receive()
                if message["type"] == "http.disconnect" or not message.get("more_body", False):
                    return
                left -= len(message.get("body", b""))
    except TimeoutError:
        return


def _content_length(scope: dict[str, Any]) -> int | None:
    """The declared length, None when there is none (h11 has refused a malformed one already)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _replay(body: bytes, receive: Callable) -> Callable:
    """A `receive` that gives the body read already, then waits as the server's own does (for the
    client's disconnect)."""
    given = False

    async def replayed() -> dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _answer(send: Callable, status: int, code: int, message: str,
                  headers: tuple[tuple[bytes, bytes], ...] = (),
                  linger: Callable[[], Awaitable[None]] | None = None) -> None:
    """An API error, closing the connection; `linger` is awaited once the whole answer is sent and before
    the connection closes (what the client still sends is otherwise not read)."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close"), *headers]})
    await send({"type": "http.response.body", "body": body, "more_body": linger is not None})
    if linger is not None:
        await linger()
        await send({"type": "http.response.body", "body": b""})


def _size(count: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= factor and count % factor == 0:
            return f"{count // factor} {unit}"
    return f"{count} bytes"


# -- submissions --------------------------------------------------------------------------------------------
class RateLimited(LeasewiseError):
    """A user submitted faster than the server takes: exit 75 (try again), HTTP 429 with Retry-After."""

    exit_code = EXIT_BUSY

    def __init__(self, message: str, retry_after_s: int):
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def __reduce__(self):
        return RateLimited, (str(self), self.retry_after_s)


class SubmissionRate:
    """Each user's lease submissions: a bucket of `burst` that refills at `per_minute` (Slurm's per-user
    RPC rate limit, rl_bucket_size and rl_refill_rate, for submissions); `per_minute` 0 is no limit.

    Every attempt takes from the bucket, a refused one too: it is the work of planning a submission that
    the limit keeps one user from taking from the others."""

    def __init__(self, burst: int, per_minute: int, clock: Callable[[], float] = time.monotonic):
        self.burst = burst
        self.per_minute = per_minute
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}   # user -> (tokens, when counted)
        self._lock = threading.Lock()   # (the API's routes run on a thread pool)

    def take(self, user: str) -> None:
        """One submission by `user`, or `RateLimited` saying when the next one will be taken."""
        if self.per_minute <= 0:
            return
        rate_s = self.per_minute / 60.0
        with self._lock:
            now = self.clock()
            tokens, then = self._buckets.get(user, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - then) * rate_s)
            if tokens < 1.0:
                self._buckets[user] = (tokens, now)
                wait = max(1, math.ceil((1.0 - tokens) / rate_s))
                raise RateLimited(f"{user}: too many lease submissions (the server takes {self.burst} at once, "
                                  f"then {self.per_minute} a minute); nothing was done, try again in {wait} s", wait)
            self._buckets[user] = (tokens - 1.0, now)
            if len(self._buckets) > 4096:
                self._forget_full(now, rate_s)

    def _forget_full(self, now: float, rate_s: float) -> None:
        """Drop the users whose bucket has refilled (they are as if new)."""
        for user, (tokens, then) in list(self._buckets.items()):
            if tokens + (now - then) * rate_s >= self.burst:
                del self._buckets[user]
