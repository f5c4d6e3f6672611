"""Where a VM is and what state it is in, and defining, starting and stopping it.

Each step is written so a retry after a lost reply is harmless: a fixed UUID on define, state checks
before create and destroy. A VM is looked for on every host, preferring where it runs over a stale saved
definition left on the host it was suspended on.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import timedelta
import xml.etree.ElementTree as ET
from typing import Any

from drivers.base import OperationReport, VMInfo, VMSpec, VMStateName
from drivers.clock import Clock
from drivers.cloudinit import build_seed_iso
from drivers.domain_xml import keeps_disk, lease_id_from_xml, render_domain_xml
from drivers.errors import DriverError, HostUnreachable, OperationFailed, VMAlreadyExists, VMNotFound

from .connection import Connections
from .storage import Storage

log = logging.getLogger(__name__)


class Lifecycle:
    """Finding, listing, starting and stopping domains on the hosts of `connections`."""

    def __init__(self, connections: Connections, storage: Storage, clock: Clock, poll_interval_s: float):
        self._connections = connections
        self._storage = storage
        self._clock = clock
        self._poll_interval_s = poll_interval_s

    # -- finding VMs -----------------------------------------------------------------------------

    def active_on(self, host: str, vm: str) -> bool | None:
        """True/False whether `vm` runs (or is paused) on `host`; None when the host cannot be asked."""

        def ask(conn: Any) -> bool:
            dom = self._connections.domain_or_none(conn, vm)
            return dom is not None and bool(dom.isActive())

        try:
            return self._connections.call(host, f"state of {vm}", ask, vm, question=True)
        except DriverError as exc:
            log.warning("cannot tell whether %s runs on %s: %s", vm, host, exc)
            return None

    def where_active(self, vm: str) -> tuple[str | None, list[str]]:
        """(host `vm` runs on or None, hosts that could not be asked)."""
        unreachable: list[str] = []
        for host in self._connections.hosts():
            active = self.active_on(host, vm)
            if active:
                return host, unreachable
            if active is None:
                unreachable.append(host)
        return None, unreachable

    def where_defined(self, vm: str, hosts: Iterable[str] | None = None) -> tuple[str | None, list[str]]:
        """(host defining `vm` or None, hosts that could not be asked)."""
        unreachable: list[str] = []
        for host in hosts if hosts is not None else self._connections.hosts():
            try:
                self._connections.call(host, f"look up {vm}", lambda c: c.lookupByName(vm), vm, question=True)
                return host, unreachable
            except VMNotFound:
                continue
            except (HostUnreachable, OperationFailed) as exc:
                log.debug("cannot ask %s about %s: %s", host, vm, exc)
                unreachable.append(host)
        return None, unreachable

    def find(self, vm: str) -> str:
        """The host of `vm`; `VMNotFound`, or `HostUnreachable` when it may be on a host that did not answer."""
        # where it runs wins over a stale definition left on the host it was suspended on
        host, _ = self.where_active(vm)
        if host is not None:
            return host
        host, unreachable = self.where_defined(vm)
        if host is not None:
            return host
        if unreachable:
            raise HostUnreachable(f"VM {vm!r} is on no reachable host; unreachable: {', '.join(unreachable)}")
        raise VMNotFound(f"VM {vm!r} not found on any host ({', '.join(self._connections.hosts())})")

    def locate(self, vm: str) -> str | None:
        return self.where_active(vm)[0] or self.where_defined(vm)[0]

    # -- listing ---------------------------------------------------------------------------------

    def state_name(self, dom: Any) -> VMStateName:
        lv = self._connections.libvirt
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
        return self._connections.call(host, "list domains", self._listing(host), question=True)

    def list_every_host(self) -> dict[str, list[VMInfo] | DriverError]:
        return self._connections.ask_each("list domains", {host: self._listing(host)
                                                           for host in self._connections.hosts()})

    def _listing(self, host: str) -> Callable[[Any], list[VMInfo]]:
        """The question `list_vms` asks `host`'s connection."""
        def listing(conn: Any) -> list[VMInfo]:
            found = []
            for dom in conn.listAllDomains(0):
                try:
                    _, max_kib, _, vcpus, _ = dom.info()
                    found.append(VMInfo(
                        dom.name(), host, self.state_name(dom), int(vcpus), int(max_kib) // 1024,
                        lease_id_from_xml(dom.XMLDesc(0)),
                    ))
                except self._connections.libvirt.libvirtError as exc:
                    if not self._connections.is_no_domain(exc):  # gone between listing and asking: not there
                        raise
            return found

        return listing

    def domain_macs(self, host: str) -> set[str]:
        """The MAC addresses of every domain's NICs on `host`, leasewise's or not."""
        def reading(conn: Any) -> set[str]:
            macs: set[str] = set()
            for dom in conn.listAllDomains(0):
                try:
                    root = ET.fromstring(dom.XMLDesc(0))
                except self._connections.libvirt.libvirtError as exc:
                    if not self._connections.is_no_domain(exc):
                        raise
                    continue
                macs.update(m.get("address", "").lower() for m in root.findall("devices/interface/mac"))
            return macs - {""}

        return self._connections.call(host, "read the domains' MAC addresses", reading, question=True)

    # -- starting and stopping -------------------------------------------------------------------

    def start(self, spec: VMSpec, host: str) -> OperationReport:
        cfg = self._connections.host_config(host)
        render_domain_xml(spec, cfg.domain_type)   # bad input fails here, before anything is created
        existing, _ = self.where_defined(spec.name)
        if existing is not None:
            raise VMAlreadyExists(f"VM {spec.name!r} already exists on {existing}")
        began = time.perf_counter()
        spec = self._with_volumes_and_network(spec, host)
        xml = render_domain_xml(spec, cfg.domain_type, uuid=str(uuid.uuid4()))
        # The fixed UUID makes a retried define an update of the same domain, not a second one.
        try:
            self._connections.call(host, f"define {spec.name}", lambda c: c.defineXML(xml), spec.name)
        except DriverError:
            self._remove_volumes(host, spec)
            raise

        def boot(conn: Any) -> None:
            dom = conn.lookupByName(spec.name)
            if not dom.isActive():
                dom.create()

        try:
            self._connections.call(host, f"start {spec.name}", boot, spec.name)
        except DriverError:
            self._undefine_after_failed_start(host, spec.name)
            self._remove_volumes(host, spec)
            raise
        return OperationReport("start", spec.name, host, time.perf_counter() - began)

    def _with_volumes_and_network(self, spec: VMSpec, host: str) -> VMSpec:
        """`spec` with its overlay and seed made on `host` and its NIC on the host's network; what was made
        is deleted again when a later part fails."""
        cfg = self._connections.host_config(host)
        changes: dict[str, Any] = {}
        if spec.mac is not None and spec.network is None:
            if cfg.network is not None:
                changes.update(network=cfg.network, network_type=cfg.network_type)
            else:
                log.warning("%s: host %s names no network; the VM gets no NIC", spec.name, host)
        if spec.disk is not None:
            changes["disk_image"] = self._storage.create_overlay(host, spec.name, spec.disk)
        if spec.seed is not None:
            try:
                changes["seed_image"] = self._storage.upload_seed(host, spec.name, build_seed_iso(spec.seed))
            except BaseException:
                self._remove_volumes(host, spec)
                raise
        return replace(spec, **changes)

    def _remove_volumes(self, host: str, spec: VMSpec) -> None:
        if spec.disk is None and spec.seed is None:
            return
        keep = spec.disk is not None and spec.disk.keep
        try:
            self._storage.remove_vm_volumes(host, spec.name, keep_disk=keep)
        except DriverError as exc:
            log.warning("could not delete the volumes of %s on %s: %s", spec.name, host, exc)

    def _undefine_after_failed_start(self, host: str, vm: str) -> None:
        def undefine(conn: Any) -> None:
            dom = conn.lookupByName(vm)
            if not dom.isActive() and dom.isPersistent():
                dom.undefine()

        try:
            self._connections.call(host, f"undefine {vm}", undefine, vm)
        except DriverError as exc:
            log.warning("could not clean up the definition of %s on %s: %s", vm, host, exc)

    def stop(self, vm: str, graceful_timeout: float = 30.0, host: str | None = None) -> OperationReport:
        host = host if host is not None else self.find(vm)
        call = self._connections.call
        began = time.perf_counter()
        try:
            xml = call(host, f"read {vm}", lambda c: c.lookupByName(vm).XMLDesc(0), vm)
        except VMNotFound:
            xml = ""
        keep_disk = keeps_disk(xml)
        # (only a VM that has volumes in the host's pool costs the pool calls below)
        has_volumes = self._connections.host_config(host).vm_disk_dir in xml

        def shutdown(conn: Any) -> bool:
            dom = conn.lookupByName(vm)
            if dom.isActive():
                dom.shutdown()
                return True
            return False

        if call(host, f"shut down {vm}", shutdown, vm):
            deadline = time.monotonic() + max(graceful_timeout, 0.0)
            while self.active_on(host, vm) and time.monotonic() < deadline:
                self._clock.sleep(timedelta(seconds=min(self._poll_interval_s, max(deadline - time.monotonic(), 0))))

            def destroy(conn: Any) -> None:
                dom = conn.lookupByName(vm)
                if dom.isActive():
                    log.info("%s did not shut down within %g s; destroying it", vm, graceful_timeout)
                    try:
                        dom.destroy()
                    except self._connections.libvirt.libvirtError:
                        if dom.isActive():   # (else it shut down by itself between the two calls: done)
                            raise

            call(host, f"destroy {vm}", destroy, vm)

        def undefine(conn: Any) -> None:
            dom = self._connections.domain_or_none(conn, vm)   # (a transient domain vanishes when it stops)
            if dom is not None and dom.isPersistent():
                dom.undefine()

        call(host, f"undefine {vm}", undefine, vm)
        try:
            if has_volumes:
                self._storage.remove_vm_volumes(host, vm, keep_disk=keep_disk)
        except DriverError as exc:   # the VM is stopped; the daemon's cleanup of its lease tries again
            log.warning("%s stopped, but its volumes on %s could not be deleted: %s", vm, host, exc)
        return OperationReport("stop", vm, host, time.perf_counter() - began)

    def discard(self, host: str, vm: str) -> bool:
        """Destroy (if active) and undefine `vm` on `host`; its volumes stay. False if there is none."""

        def discard(conn: Any) -> bool:
            dom = self._connections.domain_or_none(conn, vm)
            if dom is None:
                return False
            log.info("discarding %s, which %s kept", vm, host)
            if dom.isActive():
                dom.destroy()
            if dom.isPersistent():
                dom.undefine()
            return True

        return self._connections.call(host, f"discard {vm}", discard, vm)

    def undefine_stale(self, vm: str, running_on: str) -> None:
        """Drop the saved definitions a VM left on the hosts it was suspended on (it now runs on
        `running_on`). Every other host is asked at once (a question each, waited for a while at most);
        only a host that holds such a definition is then changed."""
        connections = self._connections

        def stale(conn: Any) -> bool:
            dom = connections.domain_or_none(conn, vm)
            return dom is not None and not dom.isActive() and dom.isPersistent()

        def undefine(conn: Any) -> None:
            dom = connections.domain_or_none(conn, vm)
            if dom is not None and not dom.isActive() and dom.isPersistent():
                dom.undefine()

        others = {other: stale for other in connections.hosts() if other != running_on}
        for host, answer in connections.ask_each(f"look up {vm}", others, vm).items():
            try:
                if isinstance(answer, DriverError):
                    raise answer
                if answer:
                    log.info("removing the stale definition of %s on %s", vm, host)
                    connections.call(host, f"undefine stale {vm}", undefine, vm)
            except DriverError as exc:
                log.warning("could not remove the stale definition of %s on %s: %s", vm, host, exc)
