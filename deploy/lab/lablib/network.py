"""The lab's network: the bridge, each host's namespace, veth and VM bridge, the shaping of each host's link,
and the guard route that keeps lab traffic from leaving the machine."""

from __future__ import annotations

import re

from .common import (
    BRIDGE,
    GUARD_METRIC,
    LINK_BURST,
    LINK_LATENCY,
    PREFIXLEN,
    SUBNET,
    VM_BRIDGE,
    die,
    host_ip,
    link_exists,
    netns,
    run,
    veth,
)


def ensure_leak_guard() -> None:
    run(["ip", "route", "replace", "unreachable", SUBNET, "metric", GUARD_METRIC])


def leak_guard_present() -> bool:
    out = run(["ip", "route", "show", "type", "unreachable", SUBNET], check=False).stdout
    return f"metric {GUARD_METRIC}" in out



def make_network(n: int) -> None:
    """The host's uplink: veth lwvethN (a port of lwbr0) <-> eth0 in the host's namespace, a port of the
    host's bridge br0, which holds the host's address (VM NICs join br0)."""
    ns, v = netns(n), veth(n)
    run(["ip", "netns", "add", ns])
    run(["ip", "link", "add", v, "type", "veth", "peer", "name", "eth0", "netns", ns])
    run(["ip", "link", "set", v, "master", BRIDGE])
    run(["ip", "link", "set", v, "up"])
    run(["ip", "-n", ns, "link", "set", "lo", "up"])
    # no STP: a new port (a VM's tap, also on a migration's destination) forwards at once
    run(["ip", "-n", ns, "link", "add", VM_BRIDGE, "type", "bridge", "stp_state", "0", "forward_delay", "0"])
    # the bridge keeps eth0's MAC whatever ports join it later (its address's ARP entries stay right)
    mac = run(["ip", "netns", "exec", ns, "cat", "/sys/class/net/eth0/address"]).stdout.strip()
    run(["ip", "-n", ns, "link", "set", VM_BRIDGE, "address", mac])
    run(["ip", "-n", ns, "link", "set", "eth0", "master", VM_BRIDGE])
    run(["ip", "-n", ns, "addr", "add", f"{host_ip(n)}/{PREFIXLEN}", "dev", VM_BRIDGE])
    run(["ip", "-n", ns, "link", "set", "eth0", "up"])
    run(["ip", "-n", ns, "link", "set", VM_BRIDGE, "up"])


def vm_bridge_ok(n: int) -> bool:
    """br0 is up in the host's namespace, holds the host's address, and eth0 is its port."""
    ns = netns(n)
    addr = run(["ip", "-n", ns, "-o", "-4", "addr", "show", "dev", VM_BRIDGE, "up"], check=False).stdout
    port = run(["ip", "-n", ns, "-o", "link", "show", "dev", "eth0"], check=False).stdout
    return f" {host_ip(n)}/{PREFIXLEN} " in addr and f" master {VM_BRIDGE} " in port


def parse_rate(text: str) -> str | None:
    """`1gbit`, `500mbit`, `100Mbit`... as tc reads them; `none` (or `0`) is an unshaped link."""
    t = text.strip().lower()
    if t in ("none", "0", "off"):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(k|m|g)?bit", t)
    if not m or float(m.group(1)) <= 0:
        die(f"--link-rate: {text!r} is not a rate like 1gbit, 500mbit or none")
    return t


def parse_delay(text: str | None) -> str | None:
    if text is None:
        return None
    t = text.strip().lower()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(us|ms|s)", t)
    if not m:
        die(f"--link-delay: {text!r} is not a delay like 0.2ms")
    return None if float(m.group(1)) == 0 else t


def link_qdisc(rate: str | None, delay: str | None) -> list[str] | None:
    """The root qdisc for one end of a host's link: tbf for a rate alone, netem when there is a delay."""
    if delay is not None:
        return ["netem", "delay", delay, "limit", "100000"] + (["rate", rate] if rate else [])
    if rate is not None:
        return ["tbf", "rate", rate, "burst", LINK_BURST, "latency", LINK_LATENCY]
    return None


def check_link_shaping(rate: str | None, delay: str | None) -> None:
    """Try the qdisc on a throw-away veth before anything is built, so a kernel without it fails at once."""
    qdisc = link_qdisc(rate, delay)
    if qdisc is None:
        return
    probe = "lwprobe0"
    if link_exists(probe):
        run(["ip", "link", "del", probe], check=False)
    run(["ip", "link", "add", probe, "type", "veth", "peer", "name", "lwprobe1"])
    try:
        proc = run(["tc", "qdisc", "add", "dev", probe, "root", *qdisc], check=False)
    finally:
        run(["ip", "link", "del", probe], check=False)
    if proc.returncode != 0:
        what = "--link-delay (netem)" if delay is not None else "--link-rate (tbf)"
        die(f"{what}: this kernel cannot shape links: {(proc.stderr or proc.stdout).strip()}")


def shape_link(n: int, rate: str | None, delay: str | None) -> None:
    """Both ends of host n's veth: the root end shapes what the host receives, eth0 what it sends."""
    qdisc = link_qdisc(rate, delay)
    if qdisc is None:
        return
    run(["tc", "qdisc", "add", "dev", veth(n), "root", *qdisc])
    run(["ip", "netns", "exec", netns(n), "tc", "qdisc", "add", "dev", "eth0", "root", *qdisc])


def link_shape_text(n: int) -> str:
    proc = run(["tc", "qdisc", "show", "dev", veth(n)], check=False)
    for line in proc.stdout.splitlines():
        m = re.search(r"\brate (\S+)", line)
        d = re.search(r"\bdelay (\S+)", line)
        if m or d:
            return " ".join(x for x in ((m.group(1) if m else ""), (f"+{d.group(1)}" if d else "")) if x)
    return "unshaped"

