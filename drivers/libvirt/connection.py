"""Connections to the hosts' libvirt daemons, and the one way every libvirt call is made (`Connections.call`).

* One cached connection per host, opened on first use, with keepalive and a close callback that marks it
  dropped so the next call re-opens it: a libvirtd restart or a network blip must not need a daemon
  restart. Caching also matters for `test:///` URIs, whose state lives and dies with the connection.
* A connection is opened outside the lock, in a thread of its own, and waited for `connect_timeout_s` at
  most: libvirt has no connect timeout, and a host that drops every packet (cut off, or powered off behind a
  router) holds a connect for minutes (the kernel's SYN retries, then tenacity's). A caller that gives up
  fails with `HostUnreachable`; the connect goes on, and a connection it makes is kept for the next call.
  While it goes on, calls to that host fail at once instead of starting another one; `close` never waits.
* A question (`call(..., question=True)`: a lookup, a listing, a statistic; never an operation) is waited
  for `connect_timeout_s` at most as well, on a worker thread (`drivers.deadline.Workers`): on a link that
  went silent, libvirt's keepalive wakes one of the calls waiting on the connection and may leave the
  others waiting until the kernel gives the link up (many minutes). One question a host may be left
  unanswered; while it is, the next questions to that host fail at once, until it is answered or its
  connection is dropped. Questions to many hosts (`ask_each`: the daemon's look at every host) are asked
  at once and share one deadline, so hosts that never answer hold up the others by that deadline, once.
* An operation (a start, a stop, a save, a restore, a copy, a migration's own call: `operation()`) makes its
  calls to a remote host over a connection no other call uses while it runs. On a link that went silent the
  keepalive wakes one call waiting on a connection (libvirt 9.0's client), so each operation must be the
  only one waiting on its connection, or it may wait until the kernel gives the link up (about 15 min).
  Such a connection is kept for the next operation when it is done (a connect over ssh costs a handshake);
  a new one is opened after the shared connection, so a host that does not answer fails an operation
  within `connect_timeout_s` and shares one connect with every caller. Local hosts (`test:///`, whose state
  lives and dies with its connection, and `qemu:///system`) keep the shared one.
* Hosts are added and removed while calls run on other threads: the map of hosts is replaced whole, never
  changed in place, so a thread going through it sees it as it was before or after, never half-changed.
* Transient errors (connection reset, RPC failure, timeout, no connection) are retried with tenacity,
  bounded and logged, on a re-opened connection; every other error becomes one of `drivers.errors`,
  never a raw `libvirtError`. A host whose retries all failed is tried once per call until it answers
  again: a host that is down costs each caller one attempt, not the whole backoff, so the calls around
  it (a cleanup that visits every host) are not held up.

libvirt-python is imported when a driver is built, so the rest of leasewise works without it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import Any, TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from drivers.clock import Clock
from drivers.deadline import Answer, Workers
from drivers.errors import (
    DriverError,
    DriverUnavailable,
    HostUnreachable,
    OperationFailed,
    UnknownHost,
    VMAlreadyExists,
    VMNotFound,
)
from drivers.inventory import HostConfig

from .transport import link_uri

log = logging.getLogger(__name__)

T = TypeVar("T")

INSTALL_HINT = (
    "the libvirt driver needs libvirt-python: apt-get install libvirt-dev pkg-config "
    "&& pip install 'leasewise[libvirt]'"
)
EVENT_LOOP_THREAD = "leasewise-libvirt-events"
#: connections kept for later operations, per host (about as many as operations run on a host at once)
_SPARES_PER_HOST = 4
#: words of a system or internal error that mean the link, not the request, failed
_CONNECTION_WORDS = (
    "connection reset", "broken pipe", "end of file", "cannot recv data", "cannot write data",
    "connection refused", "unable to connect", "no route to host", "timed out", "network is unreachable",
    "client socket is closed", "connection closed",
)


def import_libvirt() -> Any:
    """The libvirt module, or `DriverUnavailable` saying what to install."""
    try:
        import libvirt
    except ImportError:
        raise DriverUnavailable(INSTALL_HINT) from None
    return libvirt


def ensure_event_loop(libvirt: Any) -> None:
    """Run libvirt's default event loop in a daemon thread, which keepalive and close callbacks need.

    libvirt's event loop is per process by libvirt's own design; the thread's name is how a second driver
    finds it already running (a duplicate registration would be harmless with libvirt's GLib loop).
    """
    if any(thread.name == EVENT_LOOP_THREAD for thread in threading.enumerate()):
        return
    libvirt.virEventRegisterDefaultImpl()

    def run() -> None:
        while True:
            if libvirt.virEventRunDefaultImpl() < 0:
                log.warning("libvirt event loop iteration failed")
                time.sleep(1.0)

    threading.Thread(target=run, name=EVENT_LOOP_THREAD, daemon=True).start()


def error_text(exc: BaseException) -> str:
    """libvirt's own message of a `libvirtError` (without its prefix), else the exception's text."""
    getter = getattr(exc, "get_error_message", None)
    return (getter() if callable(getter) else None) or str(exc)


@dataclass(frozen=True)
class RetryPolicy:
    """How a transient failure is retried: at most `attempts` tries, waiting exponentially longer (capped)."""

    attempts: int = 4
    wait_s: float = 0.5
    wait_max_s: float = 8.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"retry_attempts must be at least 1 (got {self.attempts})")

    def retrying(self, retry_on: Callable[[BaseException], bool], clock: Clock,
                 before_sleep: Callable[[RetryCallState], None]) -> Retrying:
        """A tenacity `Retrying` that waits on `clock` and re-raises the last error when it gives up."""
        return Retrying(
            stop=stop_after_attempt(self.attempts),
            wait=wait_exponential(multiplier=self.wait_s, max=self.wait_max_s),
            retry=retry_if_exception(retry_on),
            before_sleep=before_sleep,
            sleep=lambda seconds: clock.sleep(timedelta(seconds=seconds)),
            reraise=True,
        )


@dataclass
class _Connection:
    host: str
    conn: Any
    dropped: bool = False


@dataclass
class _Opening:
    """A connect under way in its own thread: what it came to, once `done` is set."""

    started: float                         # time.monotonic() when it began
    generation: int                        # `Connections.close` calls before it began
    done: threading.Event = field(default_factory=threading.Event)
    conn: Any = None
    error: BaseException | None = None


class _Operation:
    """The connections one thread's operation holds, by host (`Connections.operation`)."""

    def __init__(self, generation: int) -> None:
        self.generation = generation   # `Connections.close` calls before it began
        self.conns: dict[str, tuple[Any, HostConfig]] = {}   # host -> its connection, the config it was opened for


class _ConnectTimedOut(Exception):
    """A connect did not answer within the connect timeout (`call` says which call it held up)."""


class Connections:
    """The hosts of an inventory and one libvirt connection to each (see the module docstring)."""

    def __init__(self, libvirt: Any, hosts: Sequence[HostConfig], *, clock: Clock, retry: RetryPolicy,
                 keepalive_interval_s: int = 5, keepalive_count: int = 3, connect_timeout_s: float = 10.0):
        if not hosts:
            raise ValueError("hosts must name at least one host")
        if not connect_timeout_s > 0:
            raise ValueError(f"connect_timeout_s must be more than 0 (got {connect_timeout_s})")
        self._configs: dict[str, HostConfig] = {}
        for host in hosts:
            if host.name in self._configs:
                raise ValueError(f"duplicate host name {host.name!r}")
            self._configs[host.name] = host
        self.libvirt = libvirt
        self.clock = clock
        self.retry = retry
        self._keepalive = (keepalive_interval_s, keepalive_count)
        self.connect_timeout_s = connect_timeout_s
        self._lock = threading.Lock()
        self._open: dict[str, _Connection] = {}
        self._opening: dict[str, _Opening] = {}   # host -> its connect under way
        # host -> (the question, since when) that waits past its timeout
        self._unanswered: dict[str, tuple[object, float]] = {}
        self._generation = 0                       # `close` calls so far
        self._askers = Workers("leasewise-ask")
        self._local = threading.local()   # .operation: this thread's `_Operation` under way, if any
        # host -> connections operations left, none in use, each with the config it was opened for
        self._spares: dict[str, list[tuple[Any, HostConfig]]] = {}
        self._silent: set[str] = set()   # hosts whose last call ran out of retries on a transient error
        # libvirt prints every error to stderr by default; we report them ourselves.
        libvirt.registerErrorHandler(_log_libvirt_error, None)

    def hosts(self) -> list[str]:
        return list(self._configs)

    def add(self, host: HostConfig) -> None:
        """Reach one more host (its connection is opened on first use)."""
        with self._lock:
            if host.name in self._configs:
                raise ValueError(f"duplicate host name {host.name!r}")
            self._configs = {**self._configs, host.name: host}

    def remove(self, host: str) -> None:
        """Reach `host` no more: its connection is closed (a call under way on it fails)."""
        self.host_config(host)
        with self._lock:
            self._configs = {name: cfg for name, cfg in self._configs.items() if name != host}
            entry = self._open.pop(host, None)
            self._silent.discard(host)
            spares = self._spares.pop(host, [])
        if entry is not None:
            _close_quietly(entry.conn)
        for conn, _cfg in spares:
            _close_quietly(conn)

    def host_config(self, host: str) -> HostConfig:
        try:
            return self._configs[host]
        except KeyError:
            raise UnknownHost(f"unknown host {host!r} (known: {', '.join(self._configs)})") from None

    # -- opening and dropping --------------------------------------------------------------------

    def connection(self, host: str) -> Any:
        """The cached connection to `host`, re-opened when it was dropped."""
        cfg = self.host_config(host)
        with self._lock:
            entry = self._open.get(host)
            if entry is not None and not entry.dropped:
                if self._alive(entry.conn):
                    return entry.conn
                entry.dropped = True
            if entry is not None:
                del self._open[host]
        if entry is not None:
            log.info("re-opening the libvirt connection to %s (%s)", host, cfg.uri)
            _close_quietly(entry.conn)
        return self._opened(cfg)

    def _opened(self, cfg: HostConfig) -> Any:
        """A new connection to the host, from the connect under way or a new one, waited for until
        `connect_timeout_s` after that connect began (`_ConnectTimedOut` then)."""
        with self._lock:
            opening = self._opening.get(cfg.name)
            if opening is None:
                opening = self._opening[cfg.name] = _Opening(time.monotonic(), self._generation)
                threading.Thread(target=self._open_in_background, args=(cfg, opening), daemon=True,
                                 name=f"leasewise-connect-{cfg.name}").start()
        waited = time.monotonic() - opening.started
        if not opening.done.wait(max(0.0, self.connect_timeout_s - waited)):
            raise _ConnectTimedOut(f"no answer from {cfg.uri} (connecting for {waited:.0f} s)"
                                   if waited >= self.connect_timeout_s else
                                   f"no answer from {cfg.uri} within {self.connect_timeout_s:g} s")
        if opening.error is not None:
            raise opening.error
        return opening.conn

    def _open_in_background(self, cfg: HostConfig, opening: _Opening) -> None:
        """Open, cache and hand over a connection, however long the connect takes; its waiters may have
        given up."""
        try:
            entry = self._open_new(cfg)
            with self._lock:
                closed = opening.generation != self._generation
            if closed:
                _close_quietly(entry.conn)
                raise HostUnreachable(f"the connections were closed while connecting to {cfg.name}")
            opening.conn = self._install(cfg, entry)
        except BaseException as exc:   # (handed to whoever waits: a libvirt error, UnknownHost)
            opening.error = exc
        finally:
            with self._lock:
                if self._opening.get(cfg.name) is opening:
                    del self._opening[cfg.name]
            opening.done.set()

    def _open_new(self, cfg: HostConfig, watched: bool = True) -> _Connection:
        """A new connection with keepalive; `watched`: one to cache, marked dropped when libvirt closes it."""
        lv = self.libvirt
        if cfg.is_remote:
            ensure_event_loop(lv)
        conn = lv.open(link_uri(cfg))
        try:
            conn.setKeepAlive(*self._keepalive)
        except lv.libvirtError as exc:
            log.debug("no keepalive on %s: %s", cfg.uri, exc.get_error_message())
        entry = _Connection(cfg.name, conn)
        if not watched:
            return entry
        try:
            # The entry itself is the opaque: a late callback from a replaced connection marks only that one.
            conn.registerCloseCallback(self._on_close, entry)
        except lv.libvirtError as exc:
            log.debug("no close callback on %s: %s", cfg.uri, exc.get_error_message())
        return entry

    def _install(self, cfg: HostConfig, entry: _Connection) -> Any:
        """Cache a freshly opened connection, unless another thread cached a live one meanwhile, or the
        host was removed meanwhile (`UnknownHost`: nothing is kept of it)."""
        host = cfg.name
        with self._lock:
            managed = self._configs.get(host) is cfg
            current = self._open.get(host)
            if managed and (current is None or current.dropped):
                self._open[host] = entry
                return entry.conn
        _close_quietly(entry.conn)
        if not managed or current is None:
            raise UnknownHost(f"host {host!r} was removed while connecting to it")
        return current.conn

    def _on_close(self, conn: Any, reason: int, entry: _Connection) -> None:
        log.warning("libvirt connection to %s closed (reason %s); it will be re-opened", entry.host, reason)
        with self._lock:
            entry.dropped = True
            if self._open.get(entry.host) is entry:   # (a question left on it waits on a dead link: ask again)
                self._unanswered.pop(entry.host, None)

    def mark_dropped(self, host: str) -> None:
        """Force a re-open on next use (after a transient error, or when told the link dropped)."""
        with self._lock:
            entry = self._open.get(host)
            if entry is not None:
                entry.dropped = True
                self._unanswered.pop(host, None)

    def close(self) -> None:
        with self._lock:
            self._generation += 1   # (a connect still under way closes what it makes)
            self._opening.clear()
            entries = list(self._open.values())
            self._open.clear()
            spares = [conn for conns in self._spares.values() for conn, _cfg in conns]
            self._spares.clear()
        for entry in entries:
            _close_quietly(entry.conn)
        for conn in spares:
            _close_quietly(conn)

    # -- operations on connections of their own ------------------------------------------------------

    @contextmanager
    def operation(self) -> Iterator[None]:
        """Until the block ends, this thread's calls (not its questions) to a remote host run on a connection
        that no other call uses meanwhile, one per host (see the module docstring). A block inside another
        is part of it. At the end each connection that is still alive is kept for a later operation
        (`_SPARES_PER_HOST` at most): opening one costs a connect, over ssh a handshake too."""
        if getattr(self._local, "operation", None) is not None:
            yield
            return
        operation = self._local.operation = _Operation(self._generation)
        try:
            yield
        finally:
            self._local.operation = None
            for host, (conn, cfg) in operation.conns.items():
                self._spare_or_close(host, conn, cfg, operation.generation)

    def _operation_connection(self, host: str) -> Any:
        """The connection this thread's operation has to `host`: its own, a spare one, or a new one
        (opened within `connect_timeout_s`) when it has none, its link dropped, or the host was removed
        and added again since it was opened (its URI may have changed)."""
        operation: _Operation = self._local.operation
        cfg = self.host_config(host)
        held = operation.conns.pop(host, None)
        while held is None or held[1] is not cfg or not self._alive(held[0]):
            if held is not None:
                _close_quietly(held[0])
            with self._lock:
                spares = self._spares.get(host)
                held = spares.pop() if spares else None
            if held is None:
                held = self._open_for_operation(cfg), cfg
        operation.conns[host] = held
        return held[0]

    def _open_for_operation(self, cfg: HostConfig) -> Any:
        host = cfg.name
        self.connection(host)   # (the shared one first: a host that does not answer fails here, one connect for all)

        def late(_host: str, answer: Answer[_Connection]) -> None:
            if answer.value is not None:   # (given up on: nobody will use it)
                _close_quietly(answer.value.conn)

        answer = self._askers.run_all({host: partial(self._open_new, cfg, False)}, self.connect_timeout_s,
                                      on_late=late)[host]
        if answer.timed_out:
            raise _ConnectTimedOut(f"no answer from {cfg.uri} within {self.connect_timeout_s:g} s")
        if answer.error is not None:
            raise answer.error
        assert answer.value is not None
        return answer.value.conn

    def _alive(self, conn: Any) -> bool:
        """Whether libvirt still counts the connection open (a local check: no call to the host)."""
        try:
            return bool(conn.isAlive())
        except self.libvirt.libvirtError:
            return False

    def _spare_or_close(self, host: str, conn: Any, cfg: HostConfig, generation: int) -> None:
        """Keep an operation's connection for the next one, unless it is dead, there are spares enough,
        the host was removed (and perhaps added again) since it was opened, or the connections were closed
        since the operation began."""
        if self._alive(conn):
            with self._lock:
                kept = generation == self._generation and self._configs.get(host) is cfg \
                    and len(self._spares.get(host, ())) < _SPARES_PER_HOST
                if kept:
                    self._spares.setdefault(host, []).append((conn, cfg))
                    return
        _close_quietly(conn)

    def _drop_operation_connection(self, host: str) -> None:
        operation: _Operation | None = getattr(self._local, "operation", None)
        held = None if operation is None else operation.conns.pop(host, None)
        if held is not None:
            _close_quietly(held[0])

    # -- calls, retries, errors ------------------------------------------------------------------

    def call(self, host: str, what: str, step: Callable[[Any], T], vm: str | None = None,
             question: bool = False) -> T:
        """Run `step(connection)` with bounded retries on transient errors; map libvirt errors.

        `what` names the step in logs and errors ("save vm1 to /x"); `vm` lets a missing domain be
        reported by its name; `question`: the step only reads, and is waited for `connect_timeout_s` at
        most (see the module docstring, and `ask_each`).
        """
        if not question:
            return self._call(host, what, step, vm)
        answer = self.ask_each(what, {host: step}, vm)[host]
        if isinstance(answer, DriverError):
            raise answer
        return answer

    def ask_each(self, what: str, steps: Mapping[str, Callable[[Any], T]],
                 vm: str | None = None) -> dict[str, T | DriverError]:
        """Questions to several hosts at once (host -> the step to run on its connection), all waited for
        `connect_timeout_s` at most: each host's answer, or the `DriverError` it came to, in the order of
        `steps` (`HostUnreachable` for a host that did not answer in time, or has not answered its earlier
        question yet). An error that is no host's (a fault of the step's) is raised."""
        began = time.monotonic()
        answers: dict[str, T | DriverError] = {}
        asked: dict[str, Callable[[], T]] = {}
        tokens: dict[str, object] = {}
        with self._lock:
            for host, step in steps.items():
                unanswered = self._unanswered.get(host)
                if unanswered is not None:
                    answers[host] = HostUnreachable(f"{what} on {host}: an earlier question has had no answer "
                                                    f"for {began - unanswered[1]:.0f} s")
                else:
                    asked[host] = partial(self._call, host, what, step, vm)
                    tokens[host] = object()
        answered_late: set[str] = set()

        def late(host: str, _answer: Answer[T]) -> None:
            with self._lock:
                answered_late.add(host)
                if self._unanswered.get(host, (None,))[0] is tokens[host]:
                    del self._unanswered[host]

        fault: Exception | None = None
        for host, answer in self._askers.run_all(asked, self.connect_timeout_s, on_late=late).items():
            if answer.timed_out:
                with self._lock:
                    if host not in answered_late:
                        self._unanswered[host] = (tokens[host], time.monotonic())
                answers[host] = HostUnreachable(f"{what} on {host}: no answer within {self.connect_timeout_s:g} s")
            elif isinstance(answer.error, DriverError):
                answers[host] = answer.error
            elif answer.error is not None:
                fault = fault or answer.error   # (raised once every host's question is accounted for)
            else:
                answers[host] = answer.value   # type: ignore[assignment]
        if fault is not None:
            raise fault
        return {host: answers[host] for host in steps}

    def _call(self, host: str, what: str, step: Callable[[Any], T], vm: str | None) -> T:

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            log.warning(
                "%s on %s failed (%s); attempt %d of %d, retrying in %.1f s",
                what, host, exc, state.attempt_number, self.retry.attempts,
                state.next_action.sleep if state.next_action else 0.0,
            )
            self.mark_dropped(host)
            if own:
                self._drop_operation_connection(host)

        with self._lock:
            silent = host in self._silent
        policy = RetryPolicy(attempts=1) if silent else self.retry
        retrying = policy.retrying(self.is_transient, self.clock, before_sleep)
        own = getattr(self._local, "operation", None) is not None and self.host_config(host).is_remote
        connection = self._operation_connection if own else self.connection
        try:
            result = retrying(lambda: step(connection(host)))
        except self.libvirt.libvirtError as exc:
            if self.is_transient(exc):
                with self._lock:
                    self._silent.add(host)
            raise self._map_error(exc, host, what, vm) from exc
        except _ConnectTimedOut as exc:   # (not tried again: the connect itself goes on)
            with self._lock:
                self._silent.add(host)
            raise HostUnreachable(f"{what} on {host}: {exc}") from None
        if silent:
            with self._lock:
                self._silent.discard(host)
        return result

    def is_transient(self, exc: BaseException) -> bool:
        """Whether retrying (on a re-opened connection) may help."""
        lv = self.libvirt
        if not isinstance(exc, lv.libvirtError):
            return False
        code = exc.get_error_code()
        message = (exc.get_error_message() or str(exc)).lower()
        if code in (lv.VIR_ERR_RPC, lv.VIR_ERR_OPERATION_TIMEOUT, lv.VIR_ERR_NO_CONNECT, lv.VIR_ERR_INVALID_CONN):
            return True
        if code in (lv.VIR_ERR_SYSTEM_ERROR, lv.VIR_ERR_INTERNAL_ERROR):
            return any(word in message for word in _CONNECTION_WORDS)
        return False

    def domain_or_none(self, conn: Any, vm: str) -> Any | None:
        """The domain `vm` on `conn`, or None when that host has none of that name."""
        try:
            return conn.lookupByName(vm)
        except self.libvirt.libvirtError as exc:
            if self.is_no_domain(exc):
                return None
            raise

    def is_no_domain(self, exc: BaseException) -> bool:
        """Whether `exc` is libvirt saying the domain does not exist (on that host)."""
        lv = self.libvirt
        return isinstance(exc, lv.libvirtError) and exc.get_error_code() == lv.VIR_ERR_NO_DOMAIN

    def _map_error(self, exc: Any, host: str, what: str, vm: str | None) -> DriverError:
        lv = self.libvirt
        code = exc.get_error_code()
        message = exc.get_error_message() or str(exc)
        text = f"{what} on {host}: {message}"
        lowered = message.lower()
        if code == lv.VIR_ERR_NO_DOMAIN:
            return VMNotFound(f"VM {vm!r} not found on {host}" if vm else text)
        if code == lv.VIR_ERR_DOM_EXIST or (
            code in (lv.VIR_ERR_OPERATION_FAILED, lv.VIR_ERR_OPERATION_INVALID, lv.VIR_ERR_INTERNAL_ERROR)
            and ("already exists" in lowered or "already running" in lowered or "already active" in lowered)
        ):
            return VMAlreadyExists(text)
        if self.is_transient(exc):
            return HostUnreachable(text)
        if code == lv.VIR_ERR_NO_SUPPORT:
            return OperationFailed(f"{text} (not supported by this hypervisor driver)")
        return OperationFailed(text)


def _close_quietly(conn: Any) -> None:
    try:
        conn.unregisterCloseCallback()
    except Exception:  # the callback may never have been registered
        pass
    try:
        conn.close()
    except Exception as exc:  # a dead connection cannot be closed cleanly: nothing to do
        log.debug("closing a libvirt connection: %s", exc)


def _log_libvirt_error(_ctx: object, error: tuple) -> None:
    log.debug("libvirt: %s", error[2] if len(error) > 2 else error)
