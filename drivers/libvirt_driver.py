"""The real driver: libvirt over the network to the lab's hosts (or `test:///` URIs in tests).

Design points, each for a failure we expect in a lab:

* one cached connection per host, opened on first use, with keepalive and a close callback that marks it
  dropped so the next call re-opens it (a libvirtd restart or a network blip must not need a daemon
  restart); caching also matters for `test:///` URIs, whose state lives and dies with the connection;
* transient errors (connection reset, RPC failure, timeout, no connection) are retried with tenacity,
  bounded and logged; everything else becomes one of `drivers.errors`, never a raw `libvirtError`;
* each libvirt step is written so a retry after a lost reply is harmless (fixed UUID on define, state
  checks before create/save/restore);
* a live migration is judged by where the domain really runs afterwards, on both hosts, not by whether
  `migrate3` raised (it can fail after the guest already moved, or return while the source still runs).

libvirt-python is imported when a driver is built, so the rest of leasewise works without it.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from drivers.clock import Clock, RealClock

from .base import (
    Driver,
    HostInfo,
    MigrationProgress,
    MigrationReport,
    OnTimeout,
    OperationReport,
    ProgressCallback,
    VMInfo,
    VMSpec,
    VMStateName,
    validate_migration_args,
)
from .domain_xml import lease_id_from_xml, render_domain_xml
from .errors import (
    DriverError,
    DriverUnavailable,
    HostUnreachable,
    MigrationFailed,
    OperationFailed,
    UnknownHost,
    VMAlreadyExists,
    VMNotFound,
)
from .inventory import HostConfig, split_ssh_target

log = logging.getLogger(__name__)

T = TypeVar("T")

INSTALL_HINT = (
    "the libvirt driver needs libvirt-python: apt-get install libvirt-dev pkg-config "
    "&& pip install 'leasewise[libvirt]'"
)
EVENT_LOOP_THREAD = "leasewise-libvirt-events"
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


def downtime_steps(
    max_downtime_ms: float, memory_bytes: int, steps: int = 10, delay_s_per_gib: float = 75.0
) -> list[tuple[float, float]]:
    """(seconds into the migration, max downtime in ms) pairs, as Nova raises the allowed downtime.

    It starts at max/steps so a guest that can converge with a tiny pause gets one, and reaches the full
    max after `steps` delays; the delay grows with guest memory, since bigger guests need longer passes.
    """
    if steps < 1:
        raise ValueError(f"downtime steps must be at least 1 (got {steps})")
    delay = delay_s_per_gib * memory_bytes / 2**30
    base = max_downtime_ms / steps
    offset = (max_downtime_ms - base) / steps
    return [(delay * i, base + offset * i) for i in range(steps + 1)]


def downtime_at(steps: Iterable[tuple[float, float]], elapsed: float) -> float:
    """The step value in force `elapsed` seconds into the migration."""
    value = None
    for at, downtime in steps:
        if elapsed >= at:
            value = downtime
    if value is None:
        raise ValueError("downtime steps must start at 0 s")
    return value


def format_version(number: int) -> str:
    """libvirt's packed version (major * 1e6 + minor * 1e3 + release) as text."""
    return f"{number // 1_000_000}.{number // 1000 % 1000}.{number % 1000}"


@dataclass
class _Connection:
    host: str
    conn: Any
    dropped: bool = False


class LibvirtDriver(Driver):
    """Drives the hosts of an inventory through libvirt (see the module docstring for the failure model)."""

    name = "libvirt"

    def __init__(
        self,
        hosts: list[HostConfig],
        *,
        clock: Clock | None = None,
        retry_attempts: int = 4,
        retry_wait_s: float = 0.5,
        retry_wait_max_s: float = 8.0,
        keepalive_interval_s: int = 5,
        keepalive_count: int = 3,
        poll_interval_s: float = 0.5,
        downtime_steps: int = 10,
        downtime_delay_s_per_gib: float = 75.0,
        ssh_timeout_s: float = 15.0,
    ):
        self._libvirt = import_libvirt()
        if not hosts:
            raise ValueError("hosts must name at least one host")
        self._hosts: dict[str, HostConfig] = {}
        for host in hosts:
            if host.name in self._hosts:
                raise ValueError(f"duplicate host name {host.name!r}")
            self._hosts[host.name] = host
        if retry_attempts < 1:
            raise ValueError(f"retry_attempts must be at least 1 (got {retry_attempts})")
        self._clock = clock if clock is not None else RealClock()
        self._retry_attempts = retry_attempts
        self._retry_wait_s = retry_wait_s
        self._retry_wait_max_s = retry_wait_max_s
        self._keepalive = (keepalive_interval_s, keepalive_count)
        self._poll_interval_s = poll_interval_s
        self._downtime_steps = downtime_steps
        self._downtime_delay = downtime_delay_s_per_gib
        self._ssh_timeout_s = ssh_timeout_s
        self._lock = threading.RLock()
        self._connections: dict[str, _Connection] = {}
        # libvirt prints every error to stderr by default; we report them ourselves.
        self._libvirt.registerErrorHandler(_log_libvirt_error, None)

    # -- connections and retries -----------------------------------------------------------------

    def hosts(self) -> list[str]:
        return list(self._hosts)

    def host_config(self, host: str) -> HostConfig:
        try:
            return self._hosts[host]
        except KeyError:
            raise UnknownHost(f"unknown host {host!r} (known: {', '.join(self._hosts)})") from None

    def _connection(self, host: str) -> Any:
        """The cached connection to `host`, re-opened when it was dropped."""
        cfg = self.host_config(host)
        lv = self._libvirt
        with self._lock:
            entry = self._connections.get(host)
            if entry is not None and not entry.dropped:
                try:
                    alive = entry.conn.isAlive()
                except lv.libvirtError:
                    alive = 0
                if alive:
                    return entry.conn
                entry.dropped = True
            if entry is not None:
                log.info("re-opening the libvirt connection to %s (%s)", host, cfg.uri)
                self._close_quietly(entry.conn)
                del self._connections[host]
            if cfg.is_remote:
                ensure_event_loop(lv)
            conn = lv.open(cfg.uri)
            try:
                conn.setKeepAlive(*self._keepalive)
            except lv.libvirtError as exc:
                log.debug("no keepalive on %s: %s", cfg.uri, exc.get_error_message())
            entry = _Connection(host, conn)
            try:
                # The entry itself is the opaque: a late callback from a replaced connection marks only that one.
                conn.registerCloseCallback(self._on_close, entry)
            except lv.libvirtError as exc:
                log.debug("no close callback on %s: %s", cfg.uri, exc.get_error_message())
            self._connections[host] = entry
            return conn

    def _on_close(self, conn: Any, reason: int, entry: _Connection) -> None:
        log.warning("libvirt connection to %s closed (reason %s); it will be re-opened", entry.host, reason)
        with self._lock:
            entry.dropped = True

    def _mark_dropped(self, host: str) -> None:
        """Force a re-open on next use (after a transient error, or when told the link dropped)."""
        with self._lock:
            entry = self._connections.get(host)
            if entry is not None:
                entry.dropped = True

    def _close_quietly(self, conn: Any) -> None:
        try:
            conn.unregisterCloseCallback()
        except Exception:  # the callback may never have been registered
            pass
        try:
            conn.close()
        except Exception as exc:  # a dead connection cannot be closed cleanly: nothing to do
            log.debug("closing a libvirt connection: %s", exc)

    def close(self) -> None:
        with self._lock:
            for entry in self._connections.values():
                self._close_quietly(entry.conn)
            self._connections.clear()

    def is_transient(self, exc: BaseException) -> bool:
        """Whether retrying (on a re-opened connection) may help."""
        lv = self._libvirt
        if not isinstance(exc, lv.libvirtError):
            return False
        code = exc.get_error_code()
        message = (exc.get_error_message() or str(exc)).lower()
        if code in (lv.VIR_ERR_RPC, lv.VIR_ERR_OPERATION_TIMEOUT, lv.VIR_ERR_NO_CONNECT, lv.VIR_ERR_INVALID_CONN):
            return True
        if code in (lv.VIR_ERR_SYSTEM_ERROR, lv.VIR_ERR_INTERNAL_ERROR):
            return any(word in message for word in _CONNECTION_WORDS)
        return False

    def _call(self, host: str, what: str, step: Callable[[Any], T], vm: str | None = None) -> T:
        """Run `step(connection)` with bounded retries on transient errors; map libvirt errors."""

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            log.warning(
                "%s on %s failed (%s); attempt %d of %d, retrying in %.1f s",
                what, host, exc, state.attempt_number, self._retry_attempts,
                state.next_action.sleep if state.next_action else 0.0,
            )
            self._mark_dropped(host)

        retrying = Retrying(
            stop=stop_after_attempt(self._retry_attempts),
            wait=wait_exponential(multiplier=self._retry_wait_s, max=self._retry_wait_max_s),
            retry=retry_if_exception(self.is_transient),
            before_sleep=before_sleep,
            sleep=lambda seconds: self._clock.sleep(timedelta(seconds=seconds)),
            reraise=True,
        )
        try:
            return retrying(lambda: step(self._connection(host)))
        except self._libvirt.libvirtError as exc:
            raise self._map_error(exc, host, what, vm) from exc

    def _map_error(self, exc: Any, host: str, what: str, vm: str | None) -> DriverError:
        lv = self._libvirt
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

    def _is_no_domain(self, exc: BaseException) -> bool:
        return isinstance(exc, self._libvirt.libvirtError) and exc.get_error_code() == self._libvirt.VIR_ERR_NO_DOMAIN

    # -- finding VMs -----------------------------------------------------------------------------

    def _where(self, vm: str, hosts: Iterable[str] | None = None) -> tuple[str | None, list[str]]:
        """(host defining `vm` or None, hosts that could not be asked)."""
        unreachable: list[str] = []
        for host in hosts if hosts is not None else self._hosts:
            try:
                self._call(host, f"look up {vm}", lambda c: c.lookupByName(vm), vm)
                return host, unreachable
            except VMNotFound:
                continue
            except (HostUnreachable, OperationFailed) as exc:
                log.debug("cannot ask %s about %s: %s", host, vm, exc)
                unreachable.append(host)
        return None, unreachable

    def _find(self, vm: str) -> str:
        # where it runs wins over a stale definition left on the host it was suspended on
        host, _ = self._where_active(vm)
        if host is not None:
            return host
        host, unreachable = self._where(vm)
        if host is not None:
            return host
        if unreachable:
            raise HostUnreachable(f"VM {vm!r} is on no reachable host; unreachable: {', '.join(unreachable)}")
        raise VMNotFound(f"VM {vm!r} not found on any host ({', '.join(self._hosts)})")

    def locate(self, vm: str) -> str | None:
        return self._where_active(vm)[0] or self._where(vm)[0]

    # -- host and VM queries ---------------------------------------------------------------------

    def host_info(self, host: str) -> HostInfo:
        cfg = self.host_config(host)
        try:
            info, kind, hv, lib = self._call(
                host, "host info", lambda c: (c.getInfo(), c.getType(), c.getVersion(), c.getLibVersion())
            )
        except DriverError as exc:
            return HostInfo(host, cfg.uri, 0, 0, cfg.domain_type, reachable=False, error=str(exc))
        return HostInfo(
            name=host,
            uri=cfg.uri,
            vcpus=int(info[2]),
            memory_mib=int(info[1]),
            domain_type=cfg.domain_type,
            hypervisor=f"{kind} {format_version(hv)}",
            libvirt_version=format_version(lib),
        )

    def _state_name(self, dom: Any) -> VMStateName:
        lv = self._libvirt
        state, reason = dom.state()
        if state in (lv.VIR_DOMAIN_RUNNING, lv.VIR_DOMAIN_BLOCKED):
            return "running"
        if state == lv.VIR_DOMAIN_PAUSED:
            return "paused"
        if state == lv.VIR_DOMAIN_SHUTOFF:
            if reason == lv.VIR_DOMAIN_SHUTOFF_SAVED or dom.hasManagedSaveImage(0):
                return "saved"
            return "shutoff"
        if state == lv.VIR_DOMAIN_CRASHED:
            return "crashed"
        return "other"

    def list_vms(self, host: str) -> list[VMInfo]:
        def listing(conn: Any) -> list[VMInfo]:
            found = []
            for dom in conn.listAllDomains(0):
                try:
                    _, max_kib, _, vcpus, _ = dom.info()
                    found.append(VMInfo(
                        dom.name(), host, self._state_name(dom), int(vcpus), int(max_kib) // 1024,
                        lease_id_from_xml(dom.XMLDesc(0)),
                    ))
                except self._libvirt.libvirtError as exc:
                    if not self._is_no_domain(exc):  # gone between listing and asking: not there
                        raise
            return found

        return self._call(host, "list domains", listing)

    def _active_on(self, host: str, vm: str) -> bool | None:
        """True/False whether `vm` runs (or is paused) on `host`; None when the host cannot be asked."""

        def ask(conn: Any) -> bool:
            try:
                return bool(conn.lookupByName(vm).isActive())
            except self._libvirt.libvirtError as exc:
                if self._is_no_domain(exc):
                    return False
                raise

        try:
            return self._call(host, f"state of {vm}", ask, vm)
        except DriverError as exc:
            log.warning("cannot tell whether %s runs on %s: %s", vm, host, exc)
            return None

    def measured_dirty_rate(self, vm: str) -> float | None:
        """MiB/s from libvirt's last dirty-rate calculation (`virsh domdirtyrate-calc`), if there was one.

        Only reads: starting a calculation would take seconds of guest time, so it is left to the operator.
        """
        lv = self._libvirt
        host = self._find(vm)

        def read(conn: Any) -> dict:
            stats = conn.domainListGetStats([conn.lookupByName(vm)], lv.VIR_DOMAIN_STATS_DIRTYRATE, 0)
            return stats[0][1] if stats else {}

        stats = self._call(host, f"dirty rate of {vm}", read, vm)
        measured = stats.get("dirtyrate.calc_status") == lv.VIR_DOMAIN_DIRTYRATE_MEASURED
        if not measured or "dirtyrate.megabytes_per_second" not in stats:
            return None
        return float(stats["dirtyrate.megabytes_per_second"])

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, spec: VMSpec, host: str) -> OperationReport:
        cfg = self.host_config(host)
        xml = render_domain_xml(spec, cfg.domain_type, uuid=str(uuid.uuid4()))
        existing, _ = self._where(spec.name)
        if existing is not None:
            raise VMAlreadyExists(f"VM {spec.name!r} already exists on {existing}")
        began = time.perf_counter()
        # The fixed UUID makes a retried define an update of the same domain, not a second one.
        self._call(host, f"define {spec.name}", lambda c: c.defineXML(xml), spec.name)

        def boot(conn: Any) -> None:
            dom = conn.lookupByName(spec.name)
            if not dom.isActive():
                dom.create()

        try:
            self._call(host, f"start {spec.name}", boot, spec.name)
        except DriverError:
            self._undefine_quietly(host, spec.name)
            raise
        return OperationReport("start", spec.name, host, time.perf_counter() - began)

    def _undefine_quietly(self, host: str, vm: str) -> None:
        def undefine(conn: Any) -> None:
            dom = conn.lookupByName(vm)
            if not dom.isActive() and dom.isPersistent():
                dom.undefine()

        try:
            self._call(host, f"undefine {vm}", undefine, vm)
        except DriverError as exc:
            log.warning("could not clean up the definition of %s on %s: %s", vm, host, exc)

    def stop(self, vm: str, graceful_timeout: float = 30.0) -> OperationReport:
        host = self._find(vm)
        began = time.perf_counter()

        def shutdown(conn: Any) -> bool:
            dom = conn.lookupByName(vm)
            if dom.isActive():
                dom.shutdown()
                return True
            return False

        if self._call(host, f"shut down {vm}", shutdown, vm):
            deadline = time.monotonic() + max(graceful_timeout, 0.0)
            while self._active_on(host, vm) and time.monotonic() < deadline:
                self._clock.sleep(timedelta(seconds=min(self._poll_interval_s, max(deadline - time.monotonic(), 0))))

            def destroy(conn: Any) -> None:
                dom = conn.lookupByName(vm)
                if dom.isActive():
                    log.info("%s did not shut down within %g s; destroying it", vm, graceful_timeout)
                    dom.destroy()

            self._call(host, f"destroy {vm}", destroy, vm)

        def undefine(conn: Any) -> None:
            try:
                dom = conn.lookupByName(vm)
            except self._libvirt.libvirtError as exc:
                if self._is_no_domain(exc):  # a transient domain vanishes when it stops
                    return
                raise
            if dom.isPersistent():
                dom.undefine()

        self._call(host, f"undefine {vm}", undefine, vm)
        return OperationReport("stop", vm, host, time.perf_counter() - began)

    # -- save images -----------------------------------------------------------------------------

    def suspend(self, vm: str, state_path: str, bypass_cache: bool = False) -> OperationReport:
        lv = self._libvirt
        host = self._find(vm)
        attempted = False

        def save(conn: Any) -> None:
            nonlocal attempted
            dom = conn.lookupByName(vm)
            if not dom.isActive():
                state, reason = dom.state()
                if attempted and state == lv.VIR_DOMAIN_SHUTOFF and reason == lv.VIR_DOMAIN_SHUTOFF_SAVED:
                    return  # the earlier attempt saved it; only the reply was lost
                raise OperationFailed(f"suspend {vm} on {host}: VM is not running")
            attempted = True
            if bypass_cache:
                dom.saveFlags(state_path, None, lv.VIR_DOMAIN_SAVE_BYPASS_CACHE)
            else:
                dom.save(state_path)

        began = time.perf_counter()
        self._call(host, f"save {vm} to {state_path}", save, vm)
        seconds = time.perf_counter() - began
        return OperationReport("suspend", vm, host, seconds, self._file_size(host, state_path))

    def _file_size(self, host: str, path: str) -> int:
        """Size of a save image, for calibration: 0 when it cannot be seen from here."""
        cfg = self.host_config(host)
        try:
            if not cfg.is_remote:
                return os.stat(path).st_size if os.path.exists(path) else 0
            if cfg.ssh:
                with ExitStack() as stack:
                    sftp = self._sftp(cfg, stack)
                    return int(sftp.stat(path).st_size or 0)
        except (OSError, DriverError) as exc:
            log.info("cannot read the size of %s on %s: %s", path, host, exc)
        return 0

    def resume(self, vm: str, state_path: str, host: str) -> OperationReport:
        lv = self._libvirt
        self.host_config(host)
        running, _ = self._where_active(vm)
        if running is not None:
            raise VMAlreadyExists(f"VM {vm!r} is already running on {running}")

        def image_name(conn: Any) -> str | None:
            return ET.fromstring(conn.saveImageGetXMLDesc(state_path, 0)).findtext("name")

        name = self._call(host, f"read save image {state_path}", image_name)
        if name != vm:
            raise OperationFailed(f"resume {vm} on {host}: {state_path} holds VM {name!r}")
        attempted = False

        def restore(conn: Any) -> None:
            nonlocal attempted
            try:
                if conn.lookupByName(vm).isActive():
                    if attempted:
                        return  # the earlier attempt restored it; only the reply was lost
                    raise VMAlreadyExists(f"VM {vm!r} is already running on {host}")
            except lv.libvirtError as exc:
                if not self._is_no_domain(exc):
                    raise
            attempted = True
            conn.restore(state_path)

        began = time.perf_counter()
        self._call(host, f"restore {vm} from {state_path}", restore, vm)
        seconds = time.perf_counter() - began

        def persist(conn: Any) -> None:
            # Restored on another host the domain is transient there; define it so stop and a daemon
            # restart find it like any other.
            dom = conn.lookupByName(vm)
            if not dom.isPersistent():
                conn.defineXML(dom.XMLDesc(lv.VIR_DOMAIN_XML_INACTIVE | lv.VIR_DOMAIN_XML_SECURE))

        self._call(host, f"define restored {vm}", persist, vm)
        for other in self._hosts:
            if other != host:
                self._undefine_quietly_if_defined(other, vm)
        return OperationReport("resume", vm, host, seconds, self._file_size(host, state_path))

    def _where_active(self, vm: str) -> tuple[str | None, list[str]]:
        unreachable = []
        for host in self._hosts:
            active = self._active_on(host, vm)
            if active:
                return host, unreachable
            if active is None:
                unreachable.append(host)
        return None, unreachable

    def _undefine_quietly_if_defined(self, host: str, vm: str) -> None:
        """Drop the stale saved definition a VM leaves on the host it was suspended on."""

        def undefine(conn: Any) -> None:
            try:
                dom = conn.lookupByName(vm)
            except self._libvirt.libvirtError as exc:
                if self._is_no_domain(exc):
                    return
                raise
            if not dom.isActive() and dom.isPersistent():
                log.info("removing the stale definition of %s on %s", vm, host)
                dom.undefine()

        try:
            self._call(host, f"undefine stale {vm}", undefine, vm)
        except DriverError as exc:
            log.warning("could not remove the stale definition of %s on %s: %s", vm, host, exc)

    # -- moving save images (SFTP) ---------------------------------------------------------------

    def _sftp(self, cfg: HostConfig, stack: ExitStack) -> Any:
        """An SFTP session to `cfg`'s ssh target; host keys must be known (RejectPolicy)."""
        try:
            import paramiko
        except ImportError:
            raise DriverUnavailable("moving save images needs paramiko: pip install paramiko") from None
        if not cfg.ssh:
            raise OperationFailed(f"host {cfg.name} has no ssh setting in the inventory (needed to copy save images)")
        user, hostname, port = split_ssh_target(cfg.ssh)
        client = paramiko.SSHClient()
        stack.callback(client.close)
        if cfg.known_hosts:
            client.load_host_keys(cfg.known_hosts)
        else:
            client.load_system_host_keys()
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(
                hostname, port=port, username=user, key_filename=cfg.ssh_key, timeout=self._ssh_timeout_s,
                banner_timeout=self._ssh_timeout_s, auth_timeout=self._ssh_timeout_s,
                allow_agent=cfg.ssh_key is None, look_for_keys=cfg.ssh_key is None,
            )
        except paramiko.BadHostKeyException as exc:
            raise OperationFailed(f"ssh to {cfg.name} ({cfg.ssh}): host key mismatch ({exc})") from None
        except paramiko.AuthenticationException as exc:
            raise OperationFailed(f"ssh to {cfg.name} ({cfg.ssh}): authentication failed ({exc})") from None
        except paramiko.SSHException as exc:
            # RejectPolicy lands here for a host missing from known_hosts.
            raise OperationFailed(f"ssh to {cfg.name} ({cfg.ssh}): {exc}") from None
        except OSError as exc:
            raise HostUnreachable(f"ssh to {cfg.name} ({cfg.ssh}): {exc}") from None
        sftp = client.open_sftp()
        stack.callback(sftp.close)
        return sftp

    def move_state(self, state_path: str, src_host: str, dst_host: str) -> OperationReport:
        src, dst = self.host_config(src_host), self.host_config(dst_host)
        if src_host == dst_host or (src.is_shared(state_path) and dst.is_shared(state_path)):
            return OperationReport("move_state", "", dst_host, 0.0, 0)
        began = time.perf_counter()
        retrying = Retrying(
            stop=stop_after_attempt(self._retry_attempts),
            wait=wait_exponential(multiplier=self._retry_wait_s, max=self._retry_wait_max_s),
            retry=retry_if_exception(lambda exc: isinstance(exc, HostUnreachable)),
            before_sleep=lambda state: log.warning(
                "copying %s %s -> %s failed (%s); retrying", state_path, src_host, dst_host,
                state.outcome.exception() if state.outcome else None,
            ),
            sleep=lambda seconds: self._clock.sleep(timedelta(seconds=seconds)),
            reraise=True,
        )
        copied = retrying(lambda: self._copy(src, dst, state_path))
        return OperationReport("move_state", "", dst_host, time.perf_counter() - began, copied)

    def _copy(self, src: HostConfig, dst: HostConfig, path: str) -> int:
        """Stream `path` from src to dst through this machine; written under a temporary name, then renamed."""
        partial = f"{path}.part-{uuid.uuid4().hex[:8]}"
        with ExitStack() as stack:
            src_sftp = self._sftp(src, stack)
            dst_sftp = self._sftp(dst, stack)
            try:
                size = int(src_sftp.stat(path).st_size or 0)
                with src_sftp.open(path, "rb") as reader, dst_sftp.open(partial, "wb") as writer:
                    reader.prefetch(size)
                    writer.set_pipelined(True)
                    copied = 0
                    while chunk := reader.read(1024 * 1024):
                        writer.write(chunk)
                        copied += len(chunk)
                dst_sftp.posix_rename(partial, path)
            except FileNotFoundError:
                raise OperationFailed(f"move_state: no save image at {path} on {src.name}") from None
            except (OSError, EOFError) as exc:
                try:
                    dst_sftp.remove(partial)
                except (OSError, EOFError):
                    pass
                if isinstance(exc, (socket.timeout, ConnectionError, EOFError)):
                    raise HostUnreachable(f"move_state {path} {src.name} -> {dst.name}: {exc}") from None
                raise OperationFailed(f"move_state {path} {src.name} -> {dst.name}: {exc}") from None
        if copied != size:
            raise OperationFailed(f"move_state {path}: copied {copied} of {size} bytes")
        return copied

    # -- live migration --------------------------------------------------------------------------

    def migrate(
        self,
        vm: str,
        dst_host: str,
        max_downtime_ms: float = 300.0,
        bandwidth_mib_s: float | None = None,
        timeout_s: float = 600.0,
        on_timeout: OnTimeout = "abort",
        progress: ProgressCallback | None = None,
    ) -> MigrationReport:
        """migrate3 (migrateToURI3 when peer-to-peer) in a worker thread while this thread samples
        jobStats, steps the downtime up and enforces the completion timeout; success is then read from
        the domain's state on both hosts."""
        lv = self._libvirt
        validate_migration_args(max_downtime_ms, bandwidth_mib_s, timeout_s, on_timeout)
        dst_cfg = self.host_config(dst_host)
        src_host = self._find(vm)
        src_cfg = self.host_config(src_host)
        began = time.monotonic()

        def report(success: bool, outcome: str, error: str = "", stats: dict | None = None,
                   memory_total: int = 0, samples: tuple[MigrationProgress, ...] = ()) -> MigrationReport:
            stats = dict(stats or {})
            if samples:  # no completed-job statistics (e.g. after an abort): the last sample is the best we have
                stats.setdefault("memory_iteration", samples[-1].iteration)
                stats.setdefault("memory_processed", samples[-1].memory_processed)
            return MigrationReport(
                vm=vm, source=src_host, destination=dst_host, success=success,
                total_seconds=stats.get("time_elapsed", (time.monotonic() - began) * 1000.0) / 1000.0,
                downtime_ms=float(stats.get("downtime", 0.0)),
                iterations=int(stats.get("memory_iteration", 0)),
                bytes_transferred=int(stats.get("memory_processed", stats.get("data_processed", 0))),
                # the guest's memory (as base.py defines it), not QEMU's total, which adds device memory
                memory_total=int(memory_total or stats.get("memory_total", 0)),
                outcome=outcome,  # type: ignore[arg-type]
                error=error,
                samples=samples,
            )

        def failed(message: str, outcome: str = "failed", **extra: Any) -> MigrationFailed:
            return MigrationFailed(
                f"migrate {vm} {src_host} -> {dst_host}: {message}", report(False, outcome, message, **extra)
            )

        if src_host == dst_host:
            raise failed(f"{vm} is already on {dst_host}")
        if not self._active_on(src_host, vm):
            raise failed(f"{vm} is not running on {src_host}")
        try:
            dst_conn = self._call(dst_host, "connect", lambda c: c)
            src_conn = self._call(src_host, "connect", lambda c: c)
            dom = src_conn.lookupByName(vm)
            memory_total = int(dom.info()[1]) * 1024
        except (DriverError, lv.libvirtError) as exc:
            raise failed(str(exc)) from exc

        flags = lv.VIR_MIGRATE_LIVE | lv.VIR_MIGRATE_PERSIST_DEST | lv.VIR_MIGRATE_UNDEFINE_SOURCE
        if src_cfg.is_remote:
            # The source libvirtd talks to the destination itself, so a client crash cannot strand it
            # (the destination URI in the inventory must then be reachable from the source host).
            flags |= lv.VIR_MIGRATE_PEER2PEER
        params: dict[str, Any] = {}
        if dst_cfg.migration_uri:
            params[lv.VIR_MIGRATE_PARAM_URI] = dst_cfg.migration_uri
        if bandwidth_mib_s is not None:
            params[lv.VIR_MIGRATE_PARAM_BANDWIDTH] = max(1, math.ceil(bandwidth_mib_s))
        steps = downtime_steps(max_downtime_ms, memory_total, self._downtime_steps, self._downtime_delay)
        downtime = downtime_at(steps, 0.0)
        self._set_downtime(dom, downtime)

        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                if flags & lv.VIR_MIGRATE_PEER2PEER:
                    # virDomainMigrate3 refuses PEER2PEER; the peer-to-peer form of the same call takes
                    # the destination's libvirt URI, which the source libvirtd connects to itself.
                    dom.migrateToURI3(dst_cfg.uri, params, flags)
                else:
                    dom.migrate3(dst_conn, params, flags)
                outcome["returned"] = True
            except BaseException as exc:  # reported to the polling thread, which decides
                outcome["error"] = exc

        worker = threading.Thread(target=run, name=f"leasewise-migrate-{vm}", daemon=True)
        log.info("migrating %s %s -> %s (flags %#x, params %s)", vm, src_host, dst_host, flags, params)
        worker.start()
        samples: list[MigrationProgress] = []
        action: str | None = None
        while True:
            worker.join(self._poll_interval_s)
            if not worker.is_alive():
                break
            elapsed = time.monotonic() - began
            sample = self._sample(dom, elapsed, downtime)
            if sample is not None:
                samples.append(sample)
                if progress is not None:
                    try:
                        progress(sample)
                    except Exception:  # a broken display must not leave a migration unattended
                        log.exception("migration progress callback failed")
            wanted = downtime_at(steps, elapsed)
            if wanted != downtime:
                log.info("raising max downtime of %s to %.0f ms after %.0f s", vm, wanted, elapsed)
                self._set_downtime(dom, wanted)
                downtime = wanted
            if action is None and elapsed > timeout_s:
                action = on_timeout
                self._on_timeout(dom, vm, on_timeout, timeout_s)

        error = outcome.get("error")
        if error is not None:
            log.info("migrate3 of %s raised: %s", vm, error)
        on_dst = self._active_on(dst_host, vm)
        on_src = self._active_on(src_host, vm)
        if on_dst and action == "force":
            self._resume_if_paused(dst_host, vm)
        stats = self._completed_stats(src_host, dst_host, vm, dom)
        if on_dst and on_src is False:
            return report(True, "forced" if action == "force" else "completed", stats=stats,
                          memory_total=memory_total, samples=tuple(samples))

        # Failed: make sure the guest runs where it was.
        self._resume_if_paused(src_host, vm)
        still = self._active_on(src_host, vm)
        reason = _error_text(error) if error is not None else "the domain did not end up running on the destination"
        if action == "abort":
            reason = f"not complete after {timeout_s:g} s; aborted ({reason})"
        if not still:
            reason += f"; WARNING: {vm} is not running on {src_host} either"
        raise failed(reason, "aborted" if action == "abort" else "failed", stats=stats,
                     memory_total=memory_total, samples=tuple(samples))

    def _set_downtime(self, dom: Any, downtime_ms: float) -> None:
        try:
            dom.migrateSetMaxDowntime(max(1, round(downtime_ms)), 0)
        except self._libvirt.libvirtError as exc:
            log.warning("cannot set the max downtime of %s: %s", dom.name(), _error_text(exc))

    def _sample(self, dom: Any, elapsed: float, downtime: float) -> MigrationProgress | None:
        try:
            stats = dom.jobStats(0)
        except self._libvirt.libvirtError as exc:
            log.debug("jobStats of %s: %s", dom.name(), _error_text(exc))
            return None
        if not stats or stats.get("type", 0) == self._libvirt.VIR_DOMAIN_JOB_NONE or not stats.get("memory_total"):
            return None  # no job, or one being cancelled: libvirt then reports no memory figures
        page = stats.get("memory_page_size", 4096)
        return MigrationProgress(
            elapsed_seconds=elapsed,
            memory_total=int(stats.get("memory_total", 0)),
            memory_processed=int(stats.get("memory_processed", 0)),
            memory_remaining=int(stats.get("memory_remaining", 0)),
            dirty_rate_bytes_s=float(stats.get("memory_dirty_rate", 0)) * page,
            iteration=int(stats.get("memory_iteration", 0)),
            max_downtime_ms=downtime,
        )

    def _on_timeout(self, dom: Any, vm: str, on_timeout: str, timeout_s: float) -> None:
        try:
            if on_timeout == "abort":
                log.warning("migration of %s not complete after %g s: aborting", vm, timeout_s)
                dom.abortJob()
            else:
                log.warning("migration of %s not complete after %g s: pausing it to force completion", vm, timeout_s)
                dom.suspend()
        except self._libvirt.libvirtError as exc:  # the job may have just finished on its own
            log.warning("timeout action %s on %s failed: %s", on_timeout, vm, _error_text(exc))

    def _resume_if_paused(self, host: str, vm: str) -> None:
        lv = self._libvirt

        def resume(conn: Any) -> None:
            try:
                dom = conn.lookupByName(vm)
            except lv.libvirtError as exc:
                if self._is_no_domain(exc):
                    return
                raise
            if dom.state()[0] == lv.VIR_DOMAIN_PAUSED:
                log.info("resuming paused %s on %s", vm, host)
                dom.resume()

        try:
            self._call(host, f"resume {vm}", resume, vm)
        except DriverError as exc:
            log.warning("could not resume %s on %s: %s", vm, host, exc)

    def _completed_stats(self, src_host: str, dst_host: str, vm: str, dom: Any) -> dict:
        """The finished job's statistics: from the source, else the destination (libvirt hands them over
        when the source domain is gone after a successful migration)."""
        flag = self._libvirt.VIR_DOMAIN_JOB_STATS_COMPLETED
        try:
            stats = dom.jobStats(flag)
            if stats and stats.get("type", 0) != self._libvirt.VIR_DOMAIN_JOB_NONE:
                return stats
        except self._libvirt.libvirtError as exc:
            log.debug("completed jobStats of %s on %s: %s", vm, src_host, _error_text(exc))
        try:
            stats = self._call(dst_host, f"job stats of {vm}", lambda c: c.lookupByName(vm).jobStats(flag), vm)
            if stats and stats.get("type", 0) != self._libvirt.VIR_DOMAIN_JOB_NONE:
                return stats
        except DriverError as exc:
            log.debug("completed jobStats of %s on %s: %s", vm, dst_host, exc)
        return {}


def _error_text(exc: BaseException) -> str:
    getter = getattr(exc, "get_error_message", None)
    return (getter() if callable(getter) else None) or str(exc)


def _log_libvirt_error(_ctx: object, error: tuple) -> None:
    log.debug("libvirt: %s", error[2] if len(error) > 2 else error)
