"""`leasewise serve`: one process that is the store's only writer, enacts the plan, and answers the API.

The daemon's event loop runs on a thread of its own, over the scheduler kept in memory (`SharedCluster`);
the API (uvicorn) runs on the main thread's asyncio loop, on a Unix socket made here (so its group and
mode are set before anyone can connect) and, when configured, on HTTPS. A Unix-socket connection's peer
credentials are read once when it is accepted and put on every request's ASGI scope. Each listener takes
at most its cap of connections, each slow client has a deadline (`connections`), and a request's body is
capped before the API reads it (`limits`): no client on TCP can keep the socket's users out. SIGTERM or
SIGINT stops the API, then the daemon after its step and the operations under way.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import grp
import logging
import os
import signal
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread
import uvicorn

from drivers.base import Driver
from drivers.clock import Clock, RealClock
from orchestrator.config import Config, ServeConfig
from orchestrator.model.errors import ConfigError
from orchestrator.runtime.daemon import Daemon, simulated_driver_for
from orchestrator.runtime.eventloop import EventLoop
from orchestrator.runtime.intents import IntentCollector
from orchestrator.service.api import PEER_KEY, TokenCheck, make_app
from orchestrator.service.connections import (
    FILES_BESIDES_CONNECTIONS,
    CappedListener,
    Deadlines,
    GuardedH11Protocol,
    PeerOf,
    ThrottledLog,
    address_of,
    open_files_for,
)
from orchestrator.service.identity import peer_credentials
from orchestrator.service.limits import RequestBodyLimit, SubmissionRate
from orchestrator.service.operations import LeaseService
from orchestrator.service.web import mount_web
from orchestrator.state.session import SharedCluster
from orchestrator.state.store import Store
from orchestrator.state.store.checkpoints import BackgroundCheckpoints

log = logging.getLogger(__name__)

#: the store's note that a server enacts its plan (pid, host, socket)
SERVING_KEY = "serving"

#: how long the daemon lets wake-ups gather before its step (submissions, cancellations, ended operations)
WAKE_COALESCE_S = 0.25


class _WithPeer:
    """The app, with a Unix-socket connection's (pid, uid, gid) on each request's scope."""

    def __init__(self, app: Any, peer: tuple[int, int, int]):
        self.app = app
        self.peer = peer

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket"):
            scope = {**scope, PEER_KEY: self.peer}
        return await self.app(scope, receive, send)


class _PeerCredentialsProtocol(GuardedH11Protocol):
    """The HTTP/1.1 protocol, reading SO_PEERCRED when a Unix-socket connection is made."""

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family == socket.AF_UNIX:
            try:
                self.app = _WithPeer(self.app, peer_credentials(sock))
            except OSError as exc:
                log.warning("cannot read the peer credentials of a connection: %s", exc)


class _QuietServer(uvicorn.Server):
    """A uvicorn server that leaves the process's signals to `Server` (two of them share one loop), and
    accepts through a `CappedListener` rather than asyncio's `create_server`."""

    def __init__(self, config: uvicorn.Config, *, listen: Callable[..., CappedListener], deadlines: Deadlines):
        """`listen(sock, make_protocol, tls=...)`: the listener on a socket, its caps set."""
        super().__init__(config)
        self.listen = listen
        self.deadlines = deadlines
        self.quiet = ThrottledLog(logging.getLogger("uvicorn.error"))

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        config = self.config

        # (`http` is GuardedH11Protocol or its subclass: uvicorn's own type for it is any asyncio protocol)
        protocol: type[GuardedH11Protocol] = config.http_protocol_class   # type: ignore[assignment]

        def make_protocol(release: Callable[[], None]) -> GuardedH11Protocol:
            return protocol(config=config, server_state=self.server_state, app_state=self.lifespan.state,
                            deadlines=self.deadlines, release=release, quiet=self.quiet)

        listeners = [self.listen(sock, make_protocol, tls=config.ssl) for sock in sockets or ()]
        # (uvicorn closes and waits for each of `servers` at shutdown, as a CappedListener lets it)
        self.servers = listeners   # type: ignore[assignment]
        for listener in listeners:
            listener.start()
        self.started = True


def _unix_user(conn: socket.socket, address: object) -> str:
    """A Unix-socket peer: its user."""
    return f"uid {peer_credentials(conn)[1]}"


def unix_listener(path: str, group: str, mode: int) -> socket.socket:
    """A listening Unix socket at `path` (a stale one replaced), with its group and mode set before
    listen(), so no one outside the group can connect even for a moment."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_socket():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(target))
        except OSError:
            target.unlink()   # stale: nothing listens there
        else:
            raise ConfigError("serve.socket", f"{path}: another server is listening there")
        finally:
            probe.close()
    elif target.exists():
        raise ConfigError("serve.socket", f"{path} exists and is not a socket")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(target))
    finally:
        os.umask(old)
    try:
        if group:
            try:
                gid = grp.getgrnam(group).gr_gid
            except KeyError:
                raise ConfigError("serve.socket_group", f"no group named {group!r} on this machine") from None
            os.chown(target, -1, gid)
        os.chmod(target, mode)
        sock.listen(128)
    except BaseException:
        sock.close()
        target.unlink(missing_ok=True)
        raise
    sock.setblocking(False)
    return sock


def tcp_listener(listen: str) -> socket.socket:
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, int(port)))
    sock.listen(128)
    sock.setblocking(False)
    return sock


@dataclass
class Listening:
    """Where a started server answers (the TCP port is the real one when 0 was asked for)."""

    socket: str
    tcp: tuple[str, int] | None


class Server:
    def __init__(self, config: Config, store_path: Path, *, driver: Driver | None = None,
                 clock: Clock | None = None, say: Callable[[str], None] | None = None,
                 token_check: Callable[[Store], TokenCheck] | None = None, freeze_gc: bool = False):
        """`driver`/`clock`: the hosts and time (default: `[daemon] driver` and the wall clock);
        `token_check`: makes the token authenticator from the store (None: TCP callers cannot log in);
        `freeze_gc`: the process is this server's alone (`leasewise serve`): see `_freeze_startup_objects`."""
        self.config = config
        self.freeze_gc = freeze_gc
        if freeze_gc:   # (until the server is up: what it loads lives on, so a pass over it frees nothing)
            gc.disable()
        self.say = say or (lambda line: log.info("%s", line))
        self.store = Store.open(store_path, any_thread=True)
        self.checkpoints = BackgroundCheckpoints(self.store)   # (not inside a request's commit)
        self.clock = clock or RealClock()
        if driver is None:
            driver = _driver_for(self.store, config)
        self.driver = driver
        collector = IntentCollector()
        self.session = SharedCluster(self.store, config, collector)
        self.daemon = Daemon(self.store, config, driver, self.clock, say=self.say, session=self.session,
                             collector=collector)
        # (the rate of submissions is the use case's: it holds for the API and the web form alike)
        self.service = LeaseService(self.store, config, self.session, self.clock, driver, wake=self.daemon.wakeup.set,
                                    submissions=SubmissionRate(config.serve.submit_burst, config.serve.submits_per_minute))
        checker = token_check(self.store) if token_check is not None else None
        locked = _locked(checker, self.session) if checker else None
        self.app = make_app(self.service, config.auth.admin_group, locked)
        mount_web(self.app, self.service, config.auth.admin_group, locked)   # the pages, beside the API
        # (a burst of submissions makes one step: an immediate lease starts within WAKE_COALESCE_S)
        self.loop = EventLoop(self.clock, self.daemon, poll=config.daemon.poll_interval, wakeup=self.daemon.wakeup,
                              coalesce_s=WAKE_COALESCE_S)
        self._servers: list[uvicorn.Server] = []
        self._daemon_error: BaseException | None = None
        self.listening: Listening | None = None
        self.started = threading.Event()

    # -- the daemon's thread -----------------------------------------------------------------------------------
    def _run_daemon(self, stop_api: Callable[[], None]) -> None:
        try:
            self.daemon.run(loop=self.loop)
        except BaseException as exc:   # the server cannot go on without its daemon: it stops, non-zero
            log.exception("the daemon stopped: %s", exc)
            self._daemon_error = exc
        finally:
            stop_api()

    # -- serving ----------------------------------------------------------------------------------------------
    def serve(self) -> int:
        """Serve until SIGTERM/SIGINT (or `stop()`); 0 after a clean stop, 1 if the daemon failed."""
        try:
            return asyncio.run(self._serve())
        finally:
            if self.freeze_gc:   # (a server that failed to start had not collected again yet)
                gc.enable()

    def stop(self) -> None:
        """Stop from any thread: the API stops taking requests, the daemon after its step."""
        for server in self._servers:
            server.should_exit = True
        self.loop.stop()

    def _listeners(self) -> list[tuple[socket.socket, _QuietServer]]:
        """The Unix socket and, when configured, HTTPS: each socket with the uvicorn server that answers on it."""
        cfg = self.config.serve
        _enough_open_files(cfg)
        deadlines = Deadlines(cfg.header_timeout.total_seconds(), cfg.body_timeout.total_seconds(),
                              cfg.keepalive_timeout.total_seconds())
        app = RequestBodyLimit(self.app, cfg.max_request_body, deadlines.body_s)

        def answering(name: str, limit: int, peer_of: PeerOf, **options: Any) -> _QuietServer:
            listen = functools.partial(CappedListener, name=name, limit=limit, per_peer=cfg.peer_max_connections,
                                       peer_of=peer_of, handshake_s=deadlines.header_s,
                                       tls_shutdown_s=deadlines.keepalive_s)
            # (uvicorn's type says whole seconds; it takes any number, and a deadline may be a fraction)
            config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off",
                                    timeout_keep_alive=deadlines.keepalive_s, **options)   # type: ignore[arg-type]
            return _QuietServer(config, listen=listen, deadlines=deadlines)

        unix = unix_listener(cfg.socket, cfg.socket_group, cfg.socket_mode)
        made = [(unix, answering(f"unix:{cfg.socket}", cfg.socket_max_connections, _unix_user,
                                 http=_PeerCredentialsProtocol))]
        if cfg.listen:
            tcp = tcp_listener(cfg.listen)
            made.append((tcp, answering(f"https://{cfg.listen}", cfg.listen_max_connections, address_of,
                                        http=GuardedH11Protocol, ssl_certfile=cfg.tls_cert, ssl_keyfile=cfg.tls_key,
                                        ssl_version=ssl.PROTOCOL_TLS_SERVER)))
        return made

    async def _serve(self) -> int:
        cfg = self.config.serve
        listeners = self._listeners()
        tcp_address = listeners[1][0].getsockname()[:2] if len(listeners) > 1 else None
        self._servers = [server for _, server in listeners]
        loop = asyncio.get_running_loop()
        # (the routes are plain functions: they run on this loop's worker threads, as many at once as this)
        anyio.to_thread.current_default_thread_limiter().total_tokens = cfg.request_threads
        # (what asyncio reports on its own, a client may cause as often as it likes)
        loop.set_exception_handler(ThrottledLog(logging.getLogger("asyncio")).loop_exception)
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(ValueError, RuntimeError):   # (not the main thread: tests stop it)
                loop.add_signal_handler(sig, self.stop)
        stop_api = lambda: loop.call_soon_threadsafe(self._stop_api)  # noqa: E731
        with self.session.open():   # (`leasewise run` refuses to enact the same store while it is set)
            self.store.set_meta(SERVING_KEY, {"pid": os.getpid(), "host": socket.gethostname(), "socket": cfg.socket})
        thread = threading.Thread(target=self._run_daemon, args=(stop_api,), name="leasewise-daemon")
        thread.start()
        # (answer once the daemon has reconciled the hosts and taken its first step: what they made lives on)
        await asyncio.to_thread(self.loop.first_step.wait)
        if self.freeze_gc:
            _freeze_startup_objects()
        self.checkpoints.start()
        self.listening = Listening(cfg.socket, tcp_address)
        self.say(f"serving on unix:{cfg.socket}" + (f" and https://{cfg.listen}" if cfg.listen else ""))
        try:
            tasks = [asyncio.create_task(server.serve(sockets=[sock])) for sock, server in listeners]
            self.started.set()
            await asyncio.gather(*tasks)
        finally:
            self.loop.stop()
            await asyncio.to_thread(thread.join)
            for sock, _ in listeners:
                sock.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(cfg.socket)
            with contextlib.suppress(Exception), self.session.open():
                self.store.set_meta(SERVING_KEY, None)
            self.service.close()
            self.checkpoints.stop()
            self.store.close()
        return 1 if self._daemon_error is not None else 0

    def _stop_api(self) -> None:
        for server in self._servers:
            server.should_exit = True


def _enough_open_files(cfg: ServeConfig) -> None:
    """Room for every connection the listeners take, and the files the server needs besides (the soft
    limit raised to it when the hard one allows); else one line naming the caps."""
    connections = cfg.socket_max_connections + (cfg.listen_max_connections if cfg.listen else 0)
    needed = connections + FILES_BESIDES_CONNECTIONS
    allowed = open_files_for(needed)
    if allowed < needed:
        key = "serve.listen_max_connections" if cfg.listen else "serve.socket_max_connections"
        raise ConfigError(key, f"{connections} connections and {FILES_BESIDES_CONNECTIONS} other files need "
                               f"{needed} open files, and this process may open {allowed} (systemd: LimitNOFILE); "
                               "lower the caps or raise the limit")


def _freeze_startup_objects() -> None:
    """Leave what exists once the server is up (modules, the app, the scheduler as loaded, the hosts' state
    as the daemon's first step left it) out of the garbage collector's full passes: each pass stops every
    thread, and would otherwise walk all of it again while requests wait. Objects made later are collected
    as usual; a cycle among the frozen ones that becomes garbage stays (what the server was started with,
    once). The collector was off while they were made (`Server(freeze_gc=True)`): its passes over a growing
    heap that frees nothing were a third of a big site's start; one pass here, then it is on again."""
    gc.collect()
    gc.freeze()
    gc.enable()


def _locked(check: TokenCheck, session: SharedCluster) -> TokenCheck:
    """A token check that writes (its last use) under the writer's lock."""

    def locked(text: str):
        with session.open():
            return check(text)

    return locked


def _driver_for(store: Store, config: Config) -> Driver:
    if config.daemon.driver == "simulated":
        # (a simulated driver on the wall clock: its operations take the time the planner gives them)
        driver = simulated_driver_for(store, store.path.with_suffix(".hosts.json"), config.scheduling)
        driver.clock = RealClock()
        return driver
    from orchestrator.runtime.driver_factory import make_driver

    schedule = config.scheduling.downtime_schedule
    return make_driver(config.daemon.driver, [h.config for h in store.hosts()],
                       downtime_steps=schedule.steps, downtime_delay_s_per_gib=schedule.delay_s_per_gib,
                       connect_timeout_s=config.daemon.answer_timeout.total_seconds())
