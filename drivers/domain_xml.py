"""The one place that turns a `VMSpec` into libvirt domain XML, and reads our lease id back out of it.

The lease id lives in the domain's `<metadata>` under the leasewise namespace, so a daemon that restarts
can tell which lease each domain on a host belongs to. Everything is built with xml.etree, so user values
(names, paths, command lines) are always escaped.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import PurePosixPath

from .base import VMSpec

LEASEWISE_NS = "https://leasewise.dev/xmlns/libvirt/lease/1"
_PREFIX = "leasewise"
DOMAIN_TYPES = ("kvm", "qemu")
NETWORK_TYPES = ("bridge", "network")
GUEST_AGENT_CHANNEL = "org.qemu.guest_agent.0"


def render_domain_xml(spec: VMSpec, domain_type: str, uuid: str | None = None) -> str:
    """Domain XML for `spec`; `domain_type` comes from the host (kvm, or qemu for TCG when nested)."""
    if domain_type not in DOMAIN_TYPES:
        raise ValueError(f"domain_type must be one of {', '.join(DOMAIN_TYPES)} (got {domain_type!r})")
    if not spec.name:
        raise ValueError("name must not be empty")
    if spec.vcpus < 1:
        raise ValueError(f"vcpus must be at least 1 (got {spec.vcpus})")
    if spec.memory_mib < 1:
        raise ValueError(f"memory_mib must be at least 1 (got {spec.memory_mib})")
    if spec.kernel is None and (spec.initrd is not None or spec.cmdline is not None):
        raise ValueError("initrd and cmdline need kernel (direct kernel boot)")

    domain = ET.Element("domain", {"type": domain_type})
    ET.SubElement(domain, "name").text = spec.name
    if uuid is not None:
        ET.SubElement(domain, "uuid").text = uuid
    if spec.lease_id is not None:
        metadata = ET.SubElement(domain, "metadata")
        # A literal prefix (not ET.register_namespace, which is process-global) keeps the XML readable.
        lease = ET.SubElement(metadata, f"{_PREFIX}:lease", {f"xmlns:{_PREFIX}": LEASEWISE_NS})
        ET.SubElement(lease, f"{_PREFIX}:id").text = spec.lease_id
        if spec.disk is not None and spec.disk.keep:
            ET.SubElement(lease, f"{_PREFIX}:keep-disk")
    ET.SubElement(domain, "memory", {"unit": "MiB"}).text = str(int(spec.memory_mib))
    ET.SubElement(domain, "vcpu").text = str(int(spec.vcpus))

    os_el = ET.SubElement(domain, "os")
    ET.SubElement(os_el, "type").text = "hvm"
    if spec.kernel is not None:
        ET.SubElement(os_el, "kernel").text = spec.kernel
        if spec.initrd is not None:
            ET.SubElement(os_el, "initrd").text = spec.initrd
        if spec.cmdline is not None:
            ET.SubElement(os_el, "cmdline").text = spec.cmdline
    else:
        ET.SubElement(os_el, "boot", {"dev": "hd"})
    features = ET.SubElement(domain, "features")
    ET.SubElement(features, "acpi")  # graceful shutdown is an ACPI power-button press
    if domain_type == "kvm":
        # the source host's CPU model as libvirt names it, fixed when the VM starts: a live migration goes to
        # any host whose CPU offers as much (`host check`'s cpu row); TCG guests run QEMU's emulated CPU
        ET.SubElement(domain, "cpu", {"mode": "host-model"})

    devices = ET.SubElement(domain, "devices")
    if spec.disk_image is not None:
        disk = ET.SubElement(devices, "disk", {"type": "file", "device": "disk"})
        fmt = "qcow2" if spec.disk is not None else disk_format(spec.disk_image)   # an overlay is qcow2
        ET.SubElement(disk, "driver", {"name": "qemu", "type": fmt})
        ET.SubElement(disk, "source", {"file": spec.disk_image})
        ET.SubElement(disk, "target", {"dev": "vda", "bus": "virtio"})
    if spec.seed_image is not None:
        # NoCloud finds its seed by the filesystem label (cidata), whatever the device: a read-only virtio
        # disk, since cloud kernels (Debian's linux-image-cloud: no CONFIG_SATA_AHCI) see no SATA CD-ROM
        seed = ET.SubElement(devices, "disk", {"type": "file", "device": "disk"})
        ET.SubElement(seed, "driver", {"name": "qemu", "type": "raw"})
        ET.SubElement(seed, "source", {"file": spec.seed_image})
        ET.SubElement(seed, "target", {"dev": "vdb", "bus": "virtio"})
        ET.SubElement(seed, "readonly")
    if spec.network is not None:
        if spec.network_type not in NETWORK_TYPES:
            raise ValueError(f"network_type must be one of {', '.join(NETWORK_TYPES)} (got {spec.network_type!r})")
        nic = ET.SubElement(devices, "interface", {"type": spec.network_type})
        if spec.mac is not None:
            ET.SubElement(nic, "mac", {"address": spec.mac})
        ET.SubElement(nic, "source", {spec.network_type: spec.network})
        ET.SubElement(nic, "model", {"type": "virtio"})
    if spec.guest_agent:
        channel = ET.SubElement(devices, "channel", {"type": "unix"})
        ET.SubElement(channel, "target", {"type": "virtio", "name": GUEST_AGENT_CHANNEL})
    serial = ET.SubElement(devices, "serial", {"type": "pty"})
    ET.SubElement(serial, "target", {"port": "0"})
    console = ET.SubElement(devices, "console", {"type": "pty"})
    ET.SubElement(console, "target", {"type": "serial", "port": "0"})
    return ET.tostring(domain, encoding="unicode")


def disk_format(path: str) -> str:
    """qcow2 for `.qcow2`/`.qcow` files, raw for anything else (what qemu-img would also call them)."""
    return "qcow2" if PurePosixPath(path).suffix.lower() in (".qcow2", ".qcow") else "raw"


def lease_id_from_xml(domain_xml: str) -> str | None:
    """The lease id recorded by `render_domain_xml`, or None for a domain leasewise did not create."""
    try:
        root = ET.fromstring(domain_xml)
    except ET.ParseError as exc:
        raise ValueError(f"not valid domain XML: {exc}") from None
    node = root.find(f"metadata/{{{LEASEWISE_NS}}}lease/{{{LEASEWISE_NS}}}id")
    text = (node.text or "").strip() if node is not None else ""
    return text or None


def keeps_disk(domain_xml: str) -> bool:
    """Whether the lease asked to keep this VM's disk overlay when it stops (`render_domain_xml` notes it)."""
    try:
        root = ET.fromstring(domain_xml)
    except ET.ParseError:
        return False
    return root.find(f"metadata/{{{LEASEWISE_NS}}}lease/{{{LEASEWISE_NS}}}keep-disk") is not None
