"""`host check`'s look at one ordered pair of hosts, as a live migration from one to the other needs them:

- "peer link": the source's libvirtd reaches the destination's over the configured transport (the
  destination's `peer_uri`, with the source host's own key or certificate), and "migration port": the
  source's QEMU reaches the destination's migration port. Both are tried for real: a probe guest (256 MiB,
  no disk, never run: started paused) is migrated peer to peer, exactly as a lease's VM would be
  (`VIR_MIGRATE_PEER2PEER | VIR_MIGRATE_LIVE`, the destination's `migration_uri`), then destroyed on
  whichever host has it. A failure names what is missing, from libvirt's own words. How long the probe
  took is the pair's first measured rate (`PairCheck.link_mib_s`: its memory over the time, fixed costs
  included, as the planner's model counts a migration of a guest that wrote little of its memory), which
  seeds what the daemon learns of the pair; it needs no root on the hosts and takes the real path.
- "cpu": whether the destination's CPU runs what a guest started on the source sees (`virConnectCompareCPU`):
  on KVM hosts the source's host-model CPU (libvirt's domain capabilities) against the destination; on TCG
  hosts guests run QEMU's emulated CPU, so any host runs them (the host CPUs are compared for the record).
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from typing import Any

from drivers.base import CheckItem, PairCheck
from drivers.errors import DriverError
from drivers.inventory import HostConfig

from .connection import Connections, error_text
from .host import GUEST_ARCH
from .transport import parse_link, peer_uri, what_is_missing

log = logging.getLogger(__name__)

#: the probe guest's names start with this (never `lw-`: reconciliation must not take it for a lease's VM)
PROBE_PREFIX = "leasewise-check-"
PROBE_MEMORY_MIB = 256   # (never touched: not resident on either host, sent as zero pages)
#: QEMU's migration ports (qemu.conf migration_port_min/max)
MIGRATION_PORTS = (49152, 49215)


def check_pair(connections: Connections, source: str, destination: str, timeout_s: float) -> PairCheck:
    src_cfg, dst_cfg = connections.host_config(source), connections.host_config(destination)
    peer, port, seconds = _probe_migration(connections, src_cfg, dst_cfg, timeout_s)
    rate = PROBE_MEMORY_MIB / seconds if seconds else None
    return PairCheck(source, destination, (peer, port, _cpu(connections, src_cfg, dst_cfg)), rate)


# -- a probe migration ----------------------------------------------------------------------------------------
def probe_xml(name: str, domain_type: str) -> str:
    """A guest that is never run: no disk, no boot device, `PROBE_MEMORY_MIB`; host-model CPU on KVM (as a
    lease's VM)."""
    domain = ET.Element("domain", {"type": domain_type})
    ET.SubElement(domain, "name").text = name
    ET.SubElement(domain, "memory", {"unit": "MiB"}).text = str(PROBE_MEMORY_MIB)
    ET.SubElement(domain, "vcpu").text = "1"
    os_el = ET.SubElement(domain, "os")
    ET.SubElement(os_el, "type").text = "hvm"
    if domain_type == "kvm":
        ET.SubElement(domain, "cpu", {"mode": "host-model"})
    ET.SubElement(domain, "devices")
    return ET.tostring(domain, encoding="unicode")


def _probe_migration(connections: Connections, src: HostConfig, dst: HostConfig,
                     timeout_s: float) -> tuple[CheckItem, CheckItem, float | None]:
    """The "peer link" and "migration port" items, and how many seconds the probe's migration took (None
    when it failed)."""
    lv = connections.libvirt
    target = peer_uri(dst)
    via = parse_link(target).describe()
    name = f"{PROBE_PREFIX}{src.name}-{dst.name}-{uuid.uuid4().hex[:6]}"
    try:
        src_conn = connections.call(src.name, "connect", lambda c: c)
        dst_conn = connections.call(dst.name, "connect", lambda c: c)
        dom = src_conn.createXML(probe_xml(name, src.domain_type), lv.VIR_DOMAIN_START_PAUSED)
    except (DriverError, lv.libvirtError) as exc:
        reason = error_text(exc)
        return (CheckItem("peer link", "FAIL", f"{src.name} -> {dst.name}: cannot start a probe guest on "
                                               f"{src.name}: {reason}"),
                CheckItem("migration port", "SKIP", "not tried"), None)
    params: dict[str, Any] = {}
    if dst.migration_uri:
        params[lv.VIR_MIGRATE_PARAM_URI] = dst.migration_uri
    outcome: dict[str, BaseException] = {}

    def migrate() -> None:
        try:
            dom.migrateToURI3(target, params, lv.VIR_MIGRATE_PEER2PEER | lv.VIR_MIGRATE_LIVE)
        except BaseException as exc:   # reported to the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=migrate, name=f"leasewise-probe-{name}", daemon=True)
    began = time.monotonic()
    worker.start()
    worker.join(timeout_s)
    took = time.monotonic() - began
    try:
        if worker.is_alive():
            try:
                dom.abortJob()
            except lv.libvirtError:
                pass
            worker.join(10)
            return (CheckItem("peer link", "FAIL", f"{src.name} -> {dst.name} over {via}: no answer within "
                                                   f"{timeout_s:g} s (a firewall dropping packets?)"),
                    CheckItem("migration port", "SKIP", "not tried"), None)
        error = outcome.get("error")
        if error is None:
            return (CheckItem("peer link", "PASS", f"{src.name} -> {dst.name} over {via}: {src.name}'s libvirtd "
                                                   f"connected and migrated a probe guest peer to peer "
                                                   f"({PROBE_MEMORY_MIB} MiB in {took:.2f} s)"),
                    CheckItem("migration port", "PASS", f"{dst.name} {_data_channel(dst)} reached from {src.name}"),
                    took)
        return (*_probe_failure(src, dst, via, error_text(error)), None)
    finally:
        _destroy(connections, src_conn, name)
        _destroy(connections, dst_conn, name)


def _probe_failure(src: HostConfig, dst: HostConfig, via: str, reason: str) -> tuple[CheckItem, CheckItem]:
    """Which of the two failed (the link, or QEMU's data channel), naming what is missing."""
    pair = f"{src.name} -> {dst.name}"
    port = re.search(r":(\d{4,5})\b", reason)
    data_channel = port is not None and MIGRATION_PORTS[0] <= int(port.group(1)) <= MIGRATION_PORTS[1]
    if data_channel or ("migrate" in reason.lower() and "connect to remote libvirt" not in reason.lower()
                        and "connection refused" in reason.lower()):
        return (CheckItem("peer link", "PASS", f"{pair} over {via}: {src.name}'s libvirtd reached {dst.name}'s"),
                CheckItem("migration port", "FAIL", f"{pair}: port: {dst.name}'s migration ports "
                                                    f"{MIGRATION_PORTS[0]}-{MIGRATION_PORTS[1]} ({_data_channel(dst)}) "
                                                    f"cannot be reached from {src.name}: {reason}"))
    missing = what_is_missing(reason)
    said = f"{missing} (on {src.name}'s side, to {dst.name}): {reason}" if missing else reason
    return (CheckItem("peer link", "FAIL", f"{pair} over {via}: {said}"),
            CheckItem("migration port", "SKIP", "not tried: the peer link failed"))


def _data_channel(dst: HostConfig) -> str:
    return dst.migration_uri or "the address libvirt picks"


def _destroy(connections: Connections, conn: Any, name: str) -> None:
    lv = connections.libvirt
    try:
        conn.lookupByName(name).destroy()
    except lv.libvirtError as exc:
        if not connections.is_no_domain(exc):
            log.warning("could not destroy the probe guest %s: %s", name, error_text(exc))


# -- CPU ------------------------------------------------------------------------------------------------------
def _cpu(connections: Connections, src: HostConfig, dst: HostConfig) -> CheckItem:
    lv = connections.libvirt
    pair = f"{src.name} -> {dst.name}"
    try:
        if src.domain_type == "kvm":
            xml = connections.call(src.name, "domain capabilities",
                                   lambda c: c.getDomainCapabilities(None, GUEST_ARCH, None, "kvm", 0))
            cpu = host_model_cpu(xml)
            if cpu is None:
                return CheckItem("cpu", "FAIL", f"{pair}: {src.name} offers no host-model CPU for KVM guests")
        else:
            caps = connections.call(src.name, "capabilities", lambda c: c.getCapabilities())
            host_cpu = ET.fromstring(caps).find("host/cpu")
            if host_cpu is None:
                return CheckItem("cpu", "FAIL", f"{pair}: {src.name}'s capabilities describe no host CPU")
            cpu = ET.tostring(host_cpu, encoding="unicode")
        result = connections.call(dst.name, "compare CPU", lambda c: c.compareCPU(cpu, 0))
    except DriverError as exc:
        if "not supported by this hypervisor driver" in str(exc):   # (test:///)
            return CheckItem("cpu", "SKIP", f"{pair}: the hypervisor driver cannot compare CPUs ({exc})")
        return CheckItem("cpu", "FAIL", f"{pair}: {exc}")
    verdict = {lv.VIR_CPU_COMPARE_IDENTICAL: "identical", lv.VIR_CPU_COMPARE_SUPERSET: "a superset",
               lv.VIR_CPU_COMPARE_INCOMPATIBLE: "incompatible"}.get(result, f"result {result}")
    if src.domain_type != "kvm":
        return CheckItem("cpu", "PASS", f"{pair}: TCG guests run QEMU's emulated CPU, whatever the host's "
                                        f"({dst.name}'s CPU is {verdict} to {src.name}'s, virConnectCompareCPU)")
    if result == lv.VIR_CPU_COMPARE_INCOMPATIBLE:
        return CheckItem("cpu", "FAIL", f"{pair}: a VM started on {src.name} (host-model CPU) cannot run on "
                                        f"{dst.name}: its CPU lacks what {src.name}'s offers (virConnectCompareCPU)")
    return CheckItem("cpu", "PASS", f"{pair}: {dst.name}'s CPU is {verdict} to {src.name}'s host-model CPU "
                                    "(virConnectCompareCPU)")


def host_model_cpu(domain_capabilities_xml: str) -> str | None:
    """The host-model CPU of libvirt's domain capabilities, as a guest CPU definition compareCPU takes."""
    mode = ET.fromstring(domain_capabilities_xml).find("cpu/mode[@name='host-model']")
    if mode is None or mode.get("supported") == "no" or mode.find("model") is None:
        return None
    cpu = ET.Element("cpu", {"mode": "custom", "match": "exact"})
    model = mode.find("model")
    ET.SubElement(cpu, "model", {"fallback": "forbid"}).text = model.text if model is not None else None
    vendor = mode.findtext("vendor")
    if vendor:
        ET.SubElement(cpu, "vendor").text = vendor
    for feature in mode.findall("feature"):
        ET.SubElement(cpu, "feature", {"policy": feature.get("policy", "require"), "name": feature.get("name", "")})
    return ET.tostring(cpu, encoding="unicode")
