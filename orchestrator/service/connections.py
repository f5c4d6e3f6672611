"""The life of a connection to `leasewise serve`: accepted under a cap per listener, closed when too slow.

asyncio's `create_server` (uvicorn's way of listening) accepts every connection it can, and uvicorn never
closes one that sends nothing or half a request: a client holding a thousand idle connections to the HTTPS
port used every file the process may open, the Unix socket's users were turned away with the rest, and
each failed accept logged a traceback. Here each listener accepts at most its cap of connections at once
(more wait in the kernel's backlog, costing the process nothing), so the socket keeps its room whatever
happens on TCP, and one peer (a Unix user on the socket, an address on TCP) at most its share of them, so
no one fills a listener for the others; a TLS handshake and a request's headers have a deadline, and so
does an answer the client stops reading; running out of files is one line per interval, never a
traceback per attempt.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import resource
import socket
import ssl
import time
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

#: how often one kind of line a client can cause (a full listener, no file left, a malformed request) is
#: logged at most; the lines left out meanwhile are counted in the next one
LOG_INTERVAL_S = 60.0
#: how long a listener that found no file left waits before accepting again
ACCEPT_RETRY_S = 0.5
#: the files the server needs besides its connections: the store, libvirt and ssh to the hosts, notices
FILES_BESIDES_CONNECTIONS = 256
#: accept() errors that mean the process or the machine ran out of something, not that a client erred
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class ThrottledLog:
    """Lines a client can cause as often as it likes, each kind at most once per `interval_s`.

    A kind is the line's format string; a line logged keeps its traceback, if it has one, and says how
    many of its kind were left out since the last one."""

    def __init__(self, logger: logging.Logger, interval_s: float = LOG_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic):
        self.logger = logger
        self.interval_s = interval_s
        self.clock = clock
        self._last: dict[str, tuple[float, int]] = {}   # kind -> (when last logged, how many left out since)

    @property
    def level(self) -> int:   # (uvicorn looks at its logger's level before tracing)
        return self.logger.level

    def log(self, level: int, msg: str, *args: Any, exc_info: Any = None, **kwargs: Any) -> None:
        if not self.logger.isEnabledFor(level):
            return
        left_out = self._due(msg)
        if left_out is not None:
            self.logger.log(level, msg + _left_out(left_out), *args, exc_info=exc_info, **kwargs)

    def debug(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self.log(logging.DEBUG, msg, *args, **kwargs)

    def info(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self.log(logging.INFO, msg, *args, **kwargs)

    def warning(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self.log(logging.WARNING, msg, *args, **kwargs)

    def error(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self.log(logging.ERROR, msg, *args, **kwargs)

    def exception(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self.log(logging.ERROR, msg, *args, exc_info=True, **kwargs)

    def loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """An event loop's exception handler: asyncio's own report, at most once per interval a kind."""
        message = str(context.get("message") or "unhandled exception in the event loop")
        left_out = self._due(message)
        if left_out is not None:
            loop.default_exception_handler({**context, "message": message + _left_out(left_out)})

    def _due(self, kind: str) -> int | None:
        """None when a line of this kind was logged less than an interval ago (this one is counted), else
        how many were left out since that one."""
        now = self.clock()
        last, left_out = self._last.get(kind, (None, 0))
        if last is not None and now - last < self.interval_s:
            self._last[kind] = (last, left_out + 1)
            return None
        self._last[kind] = (now, 0)
        return left_out


def _left_out(count: int) -> str:
    return f" ({count} more like this since the last one)" if count else ""


@dataclass(frozen=True)
class Deadlines:
    """How long a client may take: to finish a TLS handshake and a request's headers (`header_s`), to send
    a request's body or read on through an answer (`body_s`), to begin its next request (`keepalive_s`)."""

    header_s: float
    body_s: float
    keepalive_s: float


def open_files_for(needed: int) -> int:
    """Raise this process's soft limit on open files to `needed` where the hard limit allows (systemd's
    default soft limit is 1,024 whatever the hard one); the soft limit after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return needed if soft == resource.RLIM_INFINITY else soft
    target = needed if hard == resource.RLIM_INFINITY else min(hard, needed)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


class GuardedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with the deadlines it lacks.

    uvicorn closes a connection idle between requests (its keep-alive timeout), but its timer stops at
    the first byte of the next request, so a client that sends half its headers, or nothing at all after
    connecting, keeps the connection forever. Here a request's headers must be complete within
    `header_s` of the connection (or of the next request's first byte); an answer the client stops
    reading is dropped after `body_s`. `release` is called once the connection is gone (its listener's
    count)."""

    def __init__(self, config: Any, server_state: Any, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None, *, deadlines: Deadlines,
                 release: Callable[[], None], quiet: ThrottledLog):
        super().__init__(config, server_state, app_state, _loop)
        # (a malformed request is a warning; a client may send thousands: the lines uvicorn's protocol logs
        # go through a ThrottledLog, which takes the calls it makes of its logger)
        self.logger = quiet   # type: ignore[assignment]
        self.deadlines = deadlines
        self._release = release
        self._headers_timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._headers_timer = self.loop.call_later(self.deadlines.header_s, self._too_slow)

    def data_received(self, data: bytes) -> None:
        if self._headers_timer is None and self.conn.their_state is h11.IDLE:
            # a request has begun (uvicorn's keep-alive timer stops here): its headers have header_s
            self._headers_timer = self.loop.call_later(self.deadlines.header_s, self._too_slow)
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._stop(self._headers_timer)
            self._headers_timer = None

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.deadlines.body_s, self._too_slow)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._stop(self._write_timer)
        self._write_timer = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop(self._headers_timer)
        self._stop(self._write_timer)
        self._headers_timer = self._write_timer = None
        try:
            super().connection_lost(exc)
        finally:
            self._release()

    def _too_slow(self) -> None:
        # (abort, not close: a TLS close would wait for the client's own close_notify)
        self._headers_timer = self._write_timer = None
        if not self.transport.is_closing():
            self.transport.abort()

    @staticmethod
    def _stop(timer: asyncio.TimerHandle | None) -> None:
        if timer is not None:
            timer.cancel()


#: makes a connection's protocol, given what to call when the connection is gone
ProtocolFactory = Callable[[Callable[[], None]], asyncio.Protocol]
#: who is at the other end of an accepted connection (its share of the listener is counted by this)
PeerOf = Callable[[socket.socket, Any], Hashable]


def address_of(conn: socket.socket, address: Any) -> Hashable:
    """A TCP peer: its IP address, IPv6 by its /64 (what one machine is given), every loopback address as
    one (the head node's own users, who may pick any of 127/8)."""
    ip = ipaddress.ip_address(address[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return "loopback"
    if isinstance(ip, ipaddress.IPv6Address):
        return ipaddress.ip_network(f"{ip}/64", strict=False)
    return ip


class CappedListener:
    """Accepts connections on one listening socket, at most `limit` open at once and `per_peer` from one
    peer (`peer_of`: past its share, a peer's next connections are closed as soon as they are accepted),
    each handed to a protocol from `make_protocol` (after its TLS handshake, when `tls` is set).

    Stands in for the `asyncio.Server` uvicorn would make (`close`, `wait_closed`)."""

    def __init__(self, sock: socket.socket, make_protocol: ProtocolFactory, *, limit: int, per_peer: int,
                 peer_of: PeerOf, name: str, tls: ssl.SSLContext | None = None, handshake_s: float = 10.0,
                 tls_shutdown_s: float = 5.0):
        self.sock = sock
        self.make_protocol = make_protocol
        self.limit = limit
        self.per_peer = per_peer
        self.peer_of = peer_of
        self.name = name
        self.quiet = ThrottledLog(log)
        self.tls = tls
        self.handshake_s = handshake_s
        self.tls_shutdown_s = tls_shutdown_s
        self.open = 0
        self._by_peer: Counter[Hashable] = Counter()
        self._room = asyncio.Event()
        self._accepting: asyncio.Task[None] | None = None
        self._starting: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._accepting = asyncio.get_running_loop().create_task(self._accept_forever(), name=f"accept {self.name}")

    def close(self) -> None:
        """Accept no more; connections still in their TLS handshake are dropped."""
        for task in (self._accepting, *self._starting):
            if task is not None:
                task.cancel()

    async def wait_closed(self) -> None:
        tasks = [t for t in (self._accepting, *self._starting) if t is not None]
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _accept_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if self.open >= self.limit:
                self.quiet.warning("%s: %d connections open, as many as it takes: the next ones wait",
                                   self.name, self.open)
                self._room.clear()
                await self._room.wait()
                continue
            try:
                conn, address = await loop.sock_accept(self.sock)
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    self.quiet.warning("%s: out of file descriptors (%s) with %d connections open here: "
                                       "accepting again in %g s", self.name, exc.strerror or exc, self.open,
                                       ACCEPT_RETRY_S)
                    await asyncio.sleep(ACCEPT_RETRY_S)
                else:   # (a client that reset before its accept, and the like)
                    self.quiet.debug("%s: accept failed: %s", self.name, exc)
                continue
            try:
                peer = self.peer_of(conn, address)
            except OSError as exc:   # (gone already)
                self.quiet.debug("%s: a connection ended before it was counted: %s", self.name, exc)
                conn.close()
                continue
            if self._by_peer[peer] >= self.per_peer:
                self.quiet.warning("%s: %s has %d connections open, as many as one peer may: its next ones "
                                   "are closed", self.name, peer, self._by_peer[peer])
                conn.close()
                continue
            self.open += 1
            self._by_peer[peer] += 1
            task = loop.create_task(self._start(conn, self._slot(peer)))
            self._starting.add(task)
            task.add_done_callback(self._starting.discard)

    def _slot(self, peer: Hashable) -> Callable[[], None]:
        """What frees one connection's place, once however often it is called."""
        freed = False

        def free() -> None:
            nonlocal freed
            if not freed:
                freed = True
                self.open -= 1
                self._by_peer[peer] -= 1
                if self._by_peer[peer] <= 0:
                    del self._by_peer[peer]
                self._room.set()

        return free

    async def _start(self, conn: socket.socket, free: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        tls_options = {"ssl_handshake_timeout": self.handshake_s, "ssl_shutdown_timeout": self.tls_shutdown_s}
        try:
            await loop.connect_accepted_socket(lambda: self.make_protocol(free), conn, ssl=self.tls,
                                               **(tls_options if self.tls is not None else {}))
        except asyncio.CancelledError:
            conn.close()
            free()
            raise
        except OSError as exc:   # (a handshake that failed or took too long: ssl.SSLError is an OSError)
            self.quiet.debug("%s: a connection ended before its first request: %s", self.name, exc)
            conn.close()
            free()
        except Exception:
            self.quiet.exception("%s: a connection could not be set up", self.name)
            conn.close()
            free()
