"""The enactor the daemon uses: the scheduler's start/stop/suspend/resume/migrate, done through a `Driver`.

Names. Virtual node `v` of lease `n` is the VM `lw-<n>-<v>` (`vm_name`), the same on whichever host it
runs, so a restarted daemon finds its VMs by name alone; the lease id is also in the domain's metadata.
A suspended VM's memory image is `<state dir>/<vm name>.state` (not `.save`: libvirt takes
`<dir>/<vm>.save` for a managed-save image and then refuses to undefine the domain), the state dir being that of the host it was
suspended on (its `HostConfig.state_dir` when the enactor knows the host, else `[daemon] state_dir`). A
transfer copies the image to the same path on the destination, so a resumption reads it from there too.

Idempotence. After a crash the daemon may enact again what it had already done before it died, so every
operation accepts the outcome it would have produced: a start finds the VM already running on its planned
host, a stop finds no VM, a suspension finds the VM saved, a resumption finds it running on its host. The
driver is tried first and the hosts are asked only when it refuses, so the usual path costs one call.

Failures. Driver errors become one `EnactmentError` line naming the operation, the VM and the host (the
scheduler then fails the lease). A start that fails part-way stops the VMs it had started: the lease is
failed and must not leave VMs behind. Stops go on through every VM before reporting what failed.

Every operation's `OperationReport` goes to `record(kind, lease_id, detail)` ("enacted"; an idempotent
no-op, an operation found already done, is "enactment-skipped", a failure "enactment-failed"), for the
daemon to keep in the event log.
"""

from __future__ import annotations

import logging
import math
import posixpath
import re
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, Protocol

from drivers.base import DiskSpec, Driver, OperationReport, VMInfo, VMSpec
from drivers.cloudinit import SeedSpec
from drivers.domain_xml import disk_format
from drivers.errors import DriverError, HostUnreachable, UnknownHost, VMAlreadyExists, VMNotFound
from drivers.inventory import HostConfig
from orchestrator.config import DaemonConfig
from orchestrator.model.lease import Lease
from orchestrator.model.reservations import Reservation, ReservationKind
from orchestrator.model.timeutil import iso, parse_time
from orchestrator.model.tolerance import EPSILON
from orchestrator.planning.enactment import EnactmentError

log = logging.getLogger(__name__)

VM_PREFIX = "lw-"
ACTIVE_STATES = frozenset({"running", "paused"})
_NAME = re.compile(r"lw-(\d+)-(\d+)")

Recorder = Callable[[str, int, dict], None]
#: how long a migration's network probe goes on after libvirt says it is done: a silence that outlasts
#: the migration is part of the outage
PROBE_LINGER_S = 1.0


class Probe(Protocol):
    def start(self) -> bool: ...

    def stop(self, linger_s: float = 0.0) -> None: ...

    def outage_ms(self) -> float | None: ...

    def answered_after(self) -> bool: ...


def _planned(rr: Reservation) -> dict[str, Any]:
    """Which reservation an operation enacted and when the plan had it, for `leasewise report`."""
    return {"reservation": rr.id, "reservation_kind": rr.kind.value, "planned_start": iso(rr.start), "planned_end": iso(rr.end)}


def vm_name(lease_id: int, vnode: int) -> str:
    """The VM of virtual node `vnode` of lease `lease_id`."""
    return f"{VM_PREFIX}{lease_id}-{vnode}"


def parse_vm_name(name: str) -> tuple[int, int] | None:
    """(lease id, vnode) of a name made by `vm_name`, or None for any other name."""
    match = _NAME.fullmatch(name)
    return (int(match[1]), int(match[2])) if match else None


def lease_vm_names(lease: Lease) -> list[str]:
    """The names of all the lease's VMs, in vnode order."""
    return [vm_name(lease.id, v) for v in range(lease.numnodes)]


def vm_spec(lease: Lease, vnode: int, dirty_rate: float = 0.0) -> VMSpec:
    """What to boot for one virtual node: its CPU (percent, rounded up to whole vCPUs) and memory, the
    lease's image (as an overlay of its own when it has a disk), its cloud-init seed and NIC when the lease
    has a guest setup, and the lease id for the domain's metadata. Its dirty rate (only the simulated
    driver uses it) is the lease's, else `dirty_rate`: what the planner assumes (`[scheduling] dirty_rate`)."""
    node = lease.request.nodes[vnode]
    image = lease.request.image
    guest = lease.request.guest
    name = vm_name(lease.id, vnode)
    disk = seed = None
    if image is not None and image.disk is not None:
        disk = DiskSpec(base=image.disk, base_format=image.format or disk_format(image.disk),
                        size_bytes=guest.disk_size_mib * 2**20 if guest and guest.disk_size_mib else None,
                        keep=bool(guest and guest.keep_disks))
        if guest is not None:
            seed = SeedSpec(instance_id=name, hostname=guest.hostname(name, vnode), ssh_keys=guest.ssh_keys,
                            user_data=guest.user_data,
                            # the user's own #cloud-config names its users itself
                            login_user=image.login_user if guest.user_data is None else None)
    return VMSpec(
        name=name,
        vcpus=max(1, math.ceil(node.cpu / 100 - EPSILON)),
        memory_mib=max(1, math.ceil(node.memory - EPSILON)),
        disk=disk,
        seed=seed,
        kernel=image.kernel if image is not None else None,
        initrd=image.initrd if image is not None else None,
        cmdline=image.cmdline if image is not None else None,
        mac=guest.mac(vnode) if guest is not None and guest.network else None,
        lease_id=str(lease.id),
        dirty_rate_mib_s=dirty_rate if lease.request.dirty_rate_mib_s is None else lease.request.dirty_rate_mib_s,
    )


class UnreachableHosts(EnactmentError):
    """Some hosts could not be asked what runs on them; nothing can be concluded about their VMs."""

    def __init__(self, message: str, hosts: list[str]):
        super().__init__(message)
        self.hosts = hosts


def _together(errors: list) -> UnreachableHosts:
    """Several operations that waited for silent hosts, as one error naming them all."""
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return UnreachableHosts(f"{errors[0]}{more}", sorted({h for e in errors for h in e.hosts}))


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class DriverEnactor:
    """Implements the `Enactor` protocol through a driver (see the module docstring)."""

    def __init__(
        self,
        driver: Driver,
        hosts: dict[str, HostConfig] | None,
        config: DaemonConfig,
        record: Recorder | None = None,
        now: Callable[[], datetime] | None = None,
        probe: Callable[[str], Probe] | None = None,
        dirty_rate: float = 0.0,
    ):
        """`now`: the daemon's clock, to time live migrations against their deadline (without one, the
        planned start of the migration stands for now). `dirty_rate`: a VM's when its lease gives none."""
        self.driver = driver
        self.hosts = dict(hosts) if hosts else {}
        #: the hosts the daemon found lost (replaced whole by the daemon's step; read by the runner's threads):
        #: a VM planned on one is gone with it, and stopping it is done
        self.lost_hosts: frozenset[str] = frozenset()
        self.config = config
        self._record = record
        self._now = now
        self._probe = probe          # makes a network probe of an address (live migrations' outage)
        self._dirty_rate = dirty_rate

    # -- naming ----------------------------------------------------------------------------------------
    vm_name = staticmethod(vm_name)          # the module's function, for callers holding only the enactor

    def state_dir(self, host: str) -> str:
        cfg = self.hosts.get(host)
        return cfg.state_dir if cfg is not None else self.config.state_dir

    def state_path(self, lease_id: int, vnode: int, host: str) -> str:
        """Where the memory image of the vnode goes when it is suspended on `host`."""
        return posixpath.join(self.state_dir(host), f"{vm_name(lease_id, vnode)}.state")

    def _image_path(self, lease: Lease, rr: Reservation, vnode: int, fallback: str) -> str:
        """Where the vnode's memory image is now: the path it was saved to on the host it was suspended on
        (a transfer keeps the path). That host is the vnode's host in the VM reservation before the one
        this resumption belongs to, else the source of its transfer, else `fallback`."""
        return self.state_path(lease.id, vnode, self._suspended_on(lease, rr, vnode) or fallback)

    @staticmethod
    def _suspended_on(lease: Lease, rr: Reservation, vnode: int) -> str | None:
        vm = rr.vm
        if vm is not None:
            for i, other in enumerate(lease.reservations):
                if other is vm:
                    if i > 0 and vnode in lease.reservations[i - 1].nodes:
                        return lease.reservations[i - 1].nodes[vnode]
                    break
            for pre in vm.pre:
                if pre.kind is ReservationKind.MIGRATE and vnode in pre.transfers:
                    return pre.transfers[vnode][0]
        return None

    # -- recording -------------------------------------------------------------------------------------
    def _emit(self, kind: str, lease_id: int, detail: dict[str, Any]) -> None:
        if self._record is None:
            return
        try:
            self._record(kind, lease_id, detail)
        except Exception:  # the operation happened: a broken log must not turn it into a failure
            log.exception("recording %s of lease %s failed", kind, lease_id)

    def _enacted(self, lease_id: int, vnode: int | None, report: OperationReport, vm: str | None = None,
                 rr: Reservation | None = None, **extra: Any) -> None:
        detail = {
            "operation": report.operation,
            "vm": report.vm or vm or "",
            "vnode": vnode,
            "host": report.host,
            "wall_seconds": report.wall_seconds,
            "bytes": report.bytes,
            **(_planned(rr) if rr is not None else {}),
            **extra,
        }
        log.info("lease %s: %s %s on %s took %.3f s", lease_id, detail["operation"], detail["vm"],
                 report.host, report.wall_seconds)
        self._emit("enacted", lease_id, detail)

    def _skipped(self, lease_id: int, operation: str, vm: str, vnode: int, host: str | None, why: str,
                 rr: Reservation | None = None, **measured: Any) -> None:
        """An operation found already done (after a restart: libvirt finished it while no daemon ran); with
        its reservation, `report` shows it found done, with what `measured` says of it (else not measured)."""
        log.info("lease %s: %s %s on %s: nothing to do (%s)", lease_id, operation, vm, host, why)
        self._emit("enactment-skipped", lease_id,
                   {"operation": operation, "vm": vm, "vnode": vnode, "host": host, "reason": why,
                    **(_planned(rr) if rr is not None else {}), **measured})

    def _error(self, lease_id: int, operation: str, vm: str, vnode: int | None, host: str | None,
               exc: BaseException | str, rr: Reservation | None = None, **extra: Any) -> EnactmentError:
        """The one-line error for a failed operation, recorded as "enactment-failed"."""
        message = _one_line(str(exc)) or type(exc).__name__
        prefix = f"{operation} {vm} on {host or '?'}"
        # drivers often start their messages with the same words: say them once
        text = message if message.startswith(prefix) else f"{prefix}: {message}"
        detail = {"operation": operation, "vm": vm, "vnode": vnode, "host": host, "error": text,
                  **(_planned(rr) if rr is not None else {}), **extra}
        if not isinstance(exc, str):
            detail["error_type"] = type(exc).__name__
        log.warning("lease %s: %s", lease_id, text)
        if isinstance(exc, HostUnreachable) and host is not None:
            # not a failure yet: the daemon tries again until the host answers or `host_timeout` passes
            self._emit("enactment-waits", lease_id, detail)
            return UnreachableHosts(text, [host])
        self._emit("enactment-failed", lease_id, detail)
        return EnactmentError(text)

    # -- looking at hosts ------------------------------------------------------------------------------
    def _info(self, name: str, host: str) -> VMInfo | None:
        """The VM `name` as `host` lists it, or None (also when the host cannot be asked)."""
        try:
            return next((i for i in self.driver.list_vms(host) if i.name == name), None)
        except DriverError as exc:
            log.debug("cannot list the VMs of %s: %s", host, exc)
            return None

    def _where(self, name: str) -> str | None:
        try:
            return self.driver.locate(name)
        except DriverError:
            return None

    def _await_job(self, lease_id: int, name: str, kinds: tuple[str, ...], until: datetime | None,
                   rr: Reservation | None = None) -> str | None:
        """If the hypervisor is already doing one of `kinds` to the VM (begun by a daemon that stopped
        before it ended), wait for it to end, at most until `until` (else 10 minutes); returns the job's
        kind, or None when there was none. What the job did is then read from the hosts."""
        try:
            job = self.driver.job(name)
        except DriverError as exc:
            log.debug("cannot ask for the job of %s: %s", name, exc)
            return None
        if job is None or job not in kinds:
            return None
        log.info("lease %s: %s of %s already under way: waiting for it to end", lease_id, job, name)
        self._emit("enactment-awaited", lease_id, {"operation": job, "vm": name,
                                                   **(_planned(rr) if rr is not None else {})})
        began = time.monotonic()
        while time.monotonic() - began < 600:
            if until is not None and self._now is not None and self._now() >= until:
                break
            time.sleep(0.5)
            try:
                if self.driver.job(name) is None:
                    break
            except DriverError:
                break
        return job

    # -- the Enactor protocol --------------------------------------------------------------------------
    def start_vms(self, lease: Lease, rr: Reservation) -> None:
        started: list[tuple[int, str, str]] = []
        silent: list[UnreachableHosts] = []
        for vnode, host in sorted(rr.nodes.items()):
            spec = vm_spec(lease, vnode, self._dirty_rate)
            try:
                self._start_one(lease, vnode, spec, host, rr)
            except UnreachableHosts as exc:
                silent.append(exc)   # the others start; this one again once its host answers
                continue
            except EnactmentError as exc:
                undone = self._roll_back(lease, started)
                if started:
                    raise EnactmentError(f"{exc} ({undone})") from exc
                raise
            started.append((vnode, spec.name, host))
        if silent:
            raise _together(silent)

    def _start_one(self, lease: Lease, vnode: int, spec: VMSpec, host: str, rr: Reservation) -> None:
        try:
            report = self.driver.start(spec, host)
        except VMAlreadyExists as exc:
            info = self._info(spec.name, host)
            if info is not None and info.state in ACTIVE_STATES:
                self._skipped(lease.id, "start", spec.name, vnode, host, f"already {info.state} on {host}", rr=rr)
                return
            if info is not None:
                raise self._error(lease.id, "start", spec.name, vnode, host,
                                  f"a VM of that name is already defined there ({info.state})", rr=rr) from exc
            elsewhere = self._where(spec.name)
            where = f"already exists on {elsewhere}" if elsewhere else str(exc)
            raise self._error(lease.id, "start", spec.name, vnode, host, where, rr=rr) from exc
        except (DriverError, ValueError) as exc:  # ValueError: the driver refused the spec (e.g. the image)
            raise self._error(lease.id, "start", spec.name, vnode, host, exc, rr=rr) from exc
        self._enacted(lease.id, vnode, report, rr=rr)

    def _roll_back(self, lease: Lease, started: list[tuple[int, str, str]]) -> str:
        """Stop what a failed start had started; says what happened, for the error message."""
        failed = []
        for vnode, name, host in reversed(started):
            try:
                report = self.driver.stop(name, graceful_timeout=0)
            except VMNotFound:
                continue
            except DriverError as exc:
                self._error(lease.id, "stop", name, vnode, host, exc, rollback=True)
                failed.append(name)
                continue
            self._enacted(lease.id, vnode, report, rollback=True)
        n = len(started)
        text = f"stopped the {n} VM{'s' if n > 1 else ''} already started"
        if failed:
            text += f"; could not stop {', '.join(failed)}"
        return text

    def stop_vms(self, lease: Lease, rr: Reservation) -> None:
        self._stop_all(lease, rr, "stop", self.config.graceful_timeout.total_seconds())

    def kill_vms(self, lease: Lease, rr: Reservation) -> None:
        self._stop_all(lease, rr, "kill", 0.0)

    def _stop_all(self, lease: Lease, rr: Reservation, operation: str, graceful_timeout: float) -> None:
        """Stop every VM of the lease wherever it is; one already gone is fine. All are tried before the
        first failure is reported."""
        errors: list[EnactmentError] = []
        for vnode in range(lease.numnodes):
            name = vm_name(lease.id, vnode)
            planned = rr.nodes.get(vnode) or (rr.vm.nodes.get(vnode) if rr.vm is not None else None)
            if planned is not None and planned in self.lost_hosts:
                self._skipped(lease.id, operation, name, vnode, planned, f"{planned} is lost: the VM went with it",
                              rr=rr)
                continue
            try:
                report = self.driver.stop(name, graceful_timeout=graceful_timeout)
            except VMNotFound:
                self._skipped(lease.id, operation, name, vnode, planned, "no such VM", rr=rr)
                continue
            except DriverError as exc:
                errors.append(self._error(lease.id, operation, name, vnode, planned, exc, rr=rr))
                continue
            killed: dict[str, Any] = {"killed": True} if operation == "kill" else {}
            self._enacted(lease.id, vnode, report, rr=rr, **killed)
        if errors:
            if all(isinstance(e, UnreachableHosts) for e in errors):
                raise _together(errors)
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise EnactmentError(f"{errors[0]}{more}")

    def suspend_vms(self, lease: Lease, rr: Reservation) -> None:
        for vnode, host in sorted(rr.nodes.items()):
            name = vm_name(lease.id, vnode)
            path = self.state_path(lease.id, vnode, host)
            self._await_job(lease.id, name, ("save",), None, rr)
            try:
                report = self.driver.suspend(name, path)
            except HostUnreachable as exc:
                raise self._error(lease.id, "suspend", name, vnode, host, exc, path=path, rr=rr) from exc
            except DriverError as exc:
                info = self._info(name, host)
                if info is not None and info.state == "saved" and self._image_there(host, path):
                    self._skipped(lease.id, "suspend", name, vnode, host, f"already saved to {path}", rr=rr)
                    continue
                raise self._error(lease.id, "suspend", name, vnode, host, exc, path=path, rr=rr) from exc
            self._enacted(lease.id, vnode, report, rr=rr, path=path)

    def _image_there(self, host: str, path: str) -> bool:
        """Whether `host` has a save image at `path`, when the driver can tell (the simulated one can);
        True when it cannot."""
        exists = getattr(self.driver, "state_file_exists", None)
        return bool(exists(host, path)) if callable(exists) else True

    def resume_vms(self, lease: Lease, rr: Reservation) -> None:
        for vnode, host in sorted(rr.nodes.items()):
            name = vm_name(lease.id, vnode)
            path = self._image_path(lease, rr, vnode, host)
            self._await_job(lease.id, name, ("restore",), None, rr)
            try:
                report = self.driver.resume(name, path, host)
            except HostUnreachable as exc:
                raise self._error(lease.id, "resume", name, vnode, host, exc, path=path, rr=rr) from exc
            except DriverError as exc:
                info = self._info(name, host)
                if info is not None and info.state in ACTIVE_STATES:
                    self._skipped(lease.id, "resume", name, vnode, host, f"already {info.state} on {host}", rr=rr)
                    continue
                problem: DriverError | str = exc
                if isinstance(exc, VMAlreadyExists):
                    elsewhere = self._where(name)
                    if elsewhere is not None and elsewhere != host:
                        problem = f"already running on {elsewhere}"
                raise self._error(lease.id, "resume", name, vnode, host, problem, path=path, rr=rr) from exc
            self._enacted(lease.id, vnode, report, rr=rr, path=path)
            suspended_on = self._suspended_on(lease, rr, vnode) or host
            self._remove_images(lease.id, name, path, {host, suspended_on})
            if suspended_on != host:
                self._remove_left_disks(lease.id, name, suspended_on, host)

    def _remove_images(self, lease_id: int, vm: str, path: str, hosts: Iterable[str]) -> list[str]:
        """Delete a memory image nothing needs any more (the VM runs again, or its lease is over) from
        `hosts`; a host that cannot be reached keeps it (logged)."""
        removed = []
        for host in sorted(hosts):
            try:
                self.driver.remove_state(path, host)
                removed.append(f"{host}:{path}")
            except DriverError as exc:
                log.warning("lease %s: could not delete the memory image %s of %s on %s: %s",
                            lease_id, path, vm, host, exc)
        return removed

    def _remove_left_disks(self, lease_id: int, vm: str, left: str, now_on: str) -> None:
        """A VM resumed on `now_on` with copies of its disks (hosts sharing no storage): the ones it left on
        `left` go (a host that cannot be reached keeps them until the lease's release)."""
        try:
            if not self.driver.shares_vm_storage(left, now_on):
                self.driver.remove_vm_storage(vm, left)
        except DriverError as exc:
            log.warning("lease %s: could not delete the disks %s left on %s: %s", lease_id, vm, left, exc)

    def release(self, lease: Lease) -> list[str]:
        """Everything a finished lease left on its hosts goes: VMs still running or defined (a cancelled
        lease's, a suspended one's definition), saved memory images, disk overlays (unless kept) and seeds.
        Returns what was removed; raises `EnactmentError` when a host could not be reached (try again later).
        A host removed from the cluster since is skipped (logged): the driver no longer reaches it.
        """
        hosts = sorted({h for rr in lease.reservations for h in rr.nodes.values()}
                       | {h for rr in lease.reservations for pre in rr.pre for t in pre.transfers.values() for h in t})
        keep = bool(lease.request.guest and lease.request.guest.keep_disks)
        removed: list[str] = []
        problems: list[str] = []
        for vnode in range(lease.numnodes):
            name = vm_name(lease.id, vnode)
            try:
                report = self.driver.stop(name, graceful_timeout=0)
                self._enacted(lease.id, vnode, report, released=True)
                removed.append(f"{report.host}:{name}")
            except VMNotFound:
                pass
            except DriverError as exc:
                problems.append(f"stop {name}: {_one_line(str(exc))}")
            for host in hosts:
                try:
                    self.driver.remove_state(self.state_path(lease.id, vnode, host), host)
                    removed.extend(f"{host}:{p}" for p in self.driver.remove_vm_storage(name, host, keep_disk=keep))
                except UnknownHost:   # removed from the cluster since: no longer the driver's to clean
                    log.warning("lease %s: host %s was removed; what %s left there (if anything) stays",
                                lease.id, host, name)
                except DriverError as exc:
                    problems.append(f"{host}: {_one_line(str(exc))}")
        if problems:
            raise EnactmentError(f"lease {lease.id}: could not clean up: {'; '.join(problems)}")
        return removed

    def migrate_images(self, lease: Lease, rr: Reservation) -> None:
        for vnode, (src, dst) in sorted(rr.transfers.items()):
            name = vm_name(lease.id, vnode)
            path = self.state_path(lease.id, vnode, src)
            try:
                report = self.driver.move_state(path, src, dst)
            except DriverError as exc:
                raise self._error(lease.id, "move_state", name, vnode, src, exc, path=path, src=src,
                                  dst=dst, rr=rr) from exc
            self._enacted(lease.id, vnode, report, vm=name, rr=rr, path=path, src=src, dst=dst, route=report.route)

    def live_migrate(self, lease: Lease, rr: Reservation) -> None:
        """Move each VM of the live-migration reservation to its destination, one after the other, with
        the planned maximum downtime and bandwidth. A migration still running at the reservation's
        `abort_at` (the last moment that leaves time for the fallback) is aborted: the VM stays on its
        source and the scheduler falls back. A VM already on its destination is skipped."""
        extra = rr.extra
        predicted = extra.get("predicted", {})
        abort_at = parse_time(extra["abort_at"], "abort_at") if extra.get("abort_at") else None
        for vnode, (src, dst) in sorted(rr.transfers.items()):
            name = vm_name(lease.id, vnode)
            guess = predicted.get(str(vnode), {})
            expected = {"src": src, "dst": dst, "predicted_seconds": guess.get("seconds"),
                        "predicted_downtime_ms": guess.get("downtime_ms"),
                        "predicted_disk_seconds": guess.get("disk_seconds"),
                        "model_bandwidth_mib_s": guess.get("bandwidth_mib_s"),
                        "max_downtime_ms": extra.get("max_downtime_ms")}
            if self._await_job(lease.id, name, ("migration-out", "migration-in"), abort_at, rr) is not None \
                    and self._where(name) == dst:   # (its predecessor's migration went through)
                self._found_migrated(lease.id, vnode, name, src, dst, rr, expected, watched=True)
                continue
            now = self._now() if self._now is not None else rr.start
            timeout = (abort_at - now).total_seconds() if abort_at is not None else 600.0
            if timeout <= 0:
                raise self._error(lease.id, "migrate", name, vnode, src,
                                  f"no time left: the fallback had to start by {iso(abort_at)}", **expected, rr=rr)
            probe = self._start_probe(name)
            try:
                # the job's limit leaves room for the switch-over (plans made before it existed: the maximum)
                limit = extra.get("downtime_limit_ms") or extra.get("max_downtime_ms", 300.0)
                report = self.driver.migrate(name, dst, max_downtime_ms=float(limit),
                                             bandwidth_mib_s=extra.get("bandwidth_mib_s"), timeout_s=timeout,
                                             on_timeout="abort")
            except DriverError as exc:
                if probe is not None:
                    probe.stop()
                if self._where(name) == dst:
                    self._found_migrated(lease.id, vnode, name, src, dst, rr, expected, watched=False)
                    continue
                measured = getattr(exc, "report", None)
                details = {"outcome": getattr(measured, "outcome", "failed"),
                           "total_seconds": getattr(measured, "total_seconds", None)}
                error = self._error(lease.id, "migrate", name, vnode, src, exc, **expected, **details, rr=rr)
                if self._now is not None:
                    error.at = self._now()   # when it gave up: the fallback is planned from then
                raise error from exc
            network: dict[str, Any] = {}
            if probe is not None:
                probe.stop(linger_s=PROBE_LINGER_S)
                network = {"network_outage_ms": probe.outage_ms(), "network_survived": probe.answered_after()}
            self._enacted(lease.id, vnode, OperationReport("migrate", name, src, report.total_seconds,
                                                           report.bytes_transferred), rr=rr, **expected,
                          total_seconds=report.total_seconds, downtime_ms=report.downtime_ms,
                          iterations=report.iterations, outcome=report.outcome,
                          disk_mib=report.disk_bytes / 2**20, **network)

    def _found_migrated(self, lease_id: int, vnode: int, name: str, src: str, dst: str, rr: Reservation,
                        expected: dict[str, Any], watched: bool) -> None:
        """A live migration found done (begun by a daemon that stopped): logged as skipped, with libvirt's
        measurements of it when the destination kept them. `watched`: this daemon waited for its job to end,
        so it ended just now (its real times); otherwise when it ran is not known and is not made up."""
        report = None
        try:
            report = self.driver.completed_migration(name, src)
        except DriverError as exc:
            log.debug("no measurements of the migration of %s: %s", name, exc)
        measured: dict[str, Any] = {"measured": report is not None}
        if report is not None:
            measured.update(total_seconds=report.total_seconds, downtime_ms=report.downtime_ms,
                            iterations=report.iterations, disk_mib=report.disk_bytes / 2**20,
                            **({"wall_seconds": report.total_seconds} if watched else {}))
        why = f"already on {dst}" + ("" if report is not None else "; libvirt kept no measurements of it")
        self._skipped(lease_id, "migrate", name, vnode, dst, why, rr=rr, **expected, **measured)

    def _start_probe(self, vm: str) -> Probe | None:
        """A network probe of the VM's first IPv4 address, running, or None (no prober, no address, no reply)."""
        if self._probe is None:
            return None
        try:
            addresses = [a.address for a in self.driver.vm_addresses(vm) if a.family == "ipv4"]
        except DriverError as exc:
            log.debug("no address of %s to probe: %s", vm, exc)
            return None
        if not addresses:
            return None
        probe = self._probe(addresses[0])
        return probe if probe.start() else None

    # -- reconciliation ------------------------------------------------------------------------------------
    def running_vms(self, lease: Lease, listings: dict[str, Any] | None = None) -> dict[int, str | None]:
        """vnode -> host it really runs (or is paused) on, None when it does not run on its hosts.

        The hosts asked are those of the lease's open VM reservations. Raises `UnreachableHosts` when one of
        them cannot be asked: a VM there is neither known to run nor known to be gone."""
        # while a lease is being evacuated its VMs may be on the old hosts or the new ones
        hosts = {h for vm in (lease.open_vms() or lease.reservations[-1:]) for h in vm.nodes.values()}
        wanted = {vm_name(lease.id, v): v for v in range(lease.numnodes)}
        found: dict[int, str | None] = {v: None for v in range(lease.numnodes)}
        unreachable: dict[str, str] = {}
        for host in sorted(hosts):
            # `listings`: one step's answers of each host (list or error), asked once for all its leases
            infos = listings.get(host) if listings is not None else None
            if infos is None:
                try:
                    infos = self.driver.list_vms(host)
                except DriverError as exc:
                    infos = exc
                if listings is not None:
                    listings[host] = infos
            if isinstance(infos, DriverError):
                unreachable[host] = _one_line(str(infos))
                continue
            for info in infos:
                vnode = wanted.get(info.name)
                if vnode is not None and info.state in ACTIVE_STATES:
                    found[vnode] = host
        if unreachable:
            silent = sorted(unreachable)
            raise UnreachableHosts(
                f"lease {lease.id}: cannot tell which VMs run: "
                + "; ".join(f"{h}: {unreachable[h]}" for h in silent), silent)
        return found

    def unknown_domains(self, known_names: Iterable[str]) -> list[tuple[str, str]]:
        """(host, name) of every domain named lw-* that no lease accounts for; reported, never touched.
        Hosts that cannot be asked are skipped (and logged)."""
        known = set(known_names)
        strays: list[tuple[str, str]] = []
        for host in self.driver.hosts():
            try:
                infos = self.driver.list_vms(host)
            except DriverError as exc:
                log.warning("cannot look for unknown domains on %s: %s", host, exc)
                continue
            strays.extend((host, i.name) for i in infos if i.name.startswith(VM_PREFIX) and i.name not in known)
        return sorted(strays)
