"""A host as a whole: its capacity and versions (`read_host_info`), and the pre-flight checks an operator
runs before leases land on it (`run_host_checks`).

The checks use the driver's own connection (libvirt) and SSH code, so they test exactly what the driver
will use. Each contact with the host is bounded by the check's timeout: a host that does not answer is a
failed check, never a hung command.
"""

from __future__ import annotations

import os
import stat
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from typing import Any
from urllib.parse import urlsplit

from drivers.base import HOST_CHECKS, MAX_CLOCK_SKEW_S, CheckItem, CheckStatus, HostCheck, HostInfo
from drivers.deadline import Answer, answer_within
from drivers.errors import DriverError
from drivers.inventory import HostConfig

from .connection import Connections, error_text
from .link_check import link_checks
from .transport import what_is_missing
from .ssh import open_ssh

#: what the domain-capabilities question is asked about (the lab's guests are x86_64)
GUEST_ARCH = "x86_64"


def format_version(number: int) -> str:
    """libvirt's packed version (major * 1e6 + minor * 1e3 + release) as text."""
    return f"{number // 1_000_000}.{number // 1000 % 1000}.{number % 1000}"


def read_host_info(connections: Connections, host: str) -> HostInfo:
    """Capacity and versions from libvirt's node info; an unreachable host gives `reachable=False`."""
    cfg = connections.host_config(host)
    try:
        info, kind, hv, lib = connections.call(
            host, "host info", lambda c: (c.getInfo(), c.getType(), c.getVersion(), c.getLibVersion()),
            question=True)
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


def run_host_checks(connections: Connections, host: str, timeout_s: float) -> HostCheck:
    """The checks of HOST_CHECKS, in that order, each contact with the host bounded by `timeout_s`."""
    cfg = connections.host_config(host)
    answer = answer_within(lambda: link_checks(cfg, timeout_s), timeout_s * 3)
    link = answer.value or (CheckItem("transport", "FAIL", f"{cfg.uri}: {_unanswered(answer, timeout_s * 3)}"),
                            CheckItem("host key", "FAIL", "not checked"))
    items = [*link, *_libvirt_checks(connections, cfg, timeout_s), *_ssh_checks(cfg, timeout_s)]
    by_check = {item.check: item for item in items}
    return HostCheck(host, tuple(by_check[name] for name in HOST_CHECKS))


def _unanswered(answer: Answer, timeout_s: float) -> str | None:
    """Why a bounded call gave no value (no answer in time, or the error it raised), or None if it did."""
    if answer.timed_out:
        return f"no answer within {timeout_s:g} s"
    if answer.error is not None:
        return error_text(answer.error) or type(answer.error).__name__
    return None


# -- through libvirt --------------------------------------------------------------------------------------

def _libvirt_checks(connections: Connections, cfg: HostConfig, timeout_s: float) -> list[CheckItem]:
    """connect, versions and domain type."""
    answer = answer_within(lambda: read_host_info(connections, cfg.name), timeout_s)
    info = answer.value
    problem = _unanswered(answer, timeout_s) or (info.error if info is not None and not info.reachable else None)
    if problem is not None or info is None:
        missing = what_is_missing(problem or "")
        return [CheckItem("connect", "FAIL", f"{cfg.uri}: {problem}" + (f" ({missing})" if missing else "")),
                CheckItem("versions", "FAIL", "not connected"),
                CheckItem("domain type", "FAIL", "not connected")]
    items = [CheckItem("connect", "PASS", f"{cfg.uri}: {info.vcpus} vCPUs, {info.memory_mib} MiB"),
             CheckItem("versions", "PASS", f"libvirt {info.libvirt_version}, {info.hypervisor}")]
    support = answer_within(lambda: _domain_type_support(connections, cfg), timeout_s)
    items.append(support.value or CheckItem("domain type", "FAIL", _unanswered(support, timeout_s) or "no answer"))
    return items


def _domain_type_support(connections: Connections, cfg: HostConfig) -> CheckItem:
    """Whether libvirt can run `cfg.domain_type` guests on x86_64 there (getDomainCapabilities); where that
    call is not supported (test:///) say what the host's capabilities offer instead."""
    lv = connections.libvirt

    def ask(conn: Any) -> CheckItem:
        try:
            xml = conn.getDomainCapabilities(None, GUEST_ARCH, None, cfg.domain_type, 0)
        except lv.libvirtError as exc:
            if exc.get_error_code() != lv.VIR_ERR_NO_SUPPORT:
                return CheckItem("domain type", "FAIL",
                                 f"{cfg.domain_type} on {GUEST_ARCH}: {exc.get_error_message()}")
        else:
            root = ET.fromstring(xml)
            emulator = root.findtext("path") or "?"
            machine = root.findtext("machine") or "?"
            return CheckItem("domain type", "PASS",
                             f"{cfg.domain_type} on {GUEST_ARCH}: {emulator} (machine {machine})")
        return _offered_by_capabilities(cfg, conn.getCapabilities())

    return connections.call(cfg.name, "domain capabilities", ask)


def _offered_by_capabilities(cfg: HostConfig, capabilities_xml: str) -> CheckItem:
    offered: dict[str, set[str]] = {}
    for guest in ET.fromstring(capabilities_xml).findall("guest"):
        arch = guest.find("arch")
        if arch is None:
            continue
        for domain in arch.findall("domain"):
            offered.setdefault(domain.get("type") or "?", set()).add(arch.get("name") or "?")
    possible = "; ".join(f"{t} ({', '.join(sorted(a))})" for t, a in sorted(offered.items())) or "none"
    if GUEST_ARCH in offered.get(cfg.domain_type, set()):
        return CheckItem("domain type", "PASS", f"{cfg.domain_type} on {GUEST_ARCH} listed in the host capabilities "
                                                "(no domain capabilities API)")
    if urlsplit(cfg.uri).scheme == "test":
        return CheckItem("domain type", "SKIP", f"{cfg.uri} has no domain capabilities to ask about "
                                                f"{cfg.domain_type}; its guests can use domain type {possible}")
    return CheckItem("domain type", "FAIL",
                     f"{cfg.domain_type} on {GUEST_ARCH} is not offered; the host offers {possible}")


# -- through SSH, or here -----------------------------------------------------------------------------------

def _ssh_checks(cfg: HostConfig, timeout_s: float) -> list[CheckItem]:
    """ssh, image directory and clock skew: over SSH when the host has an ssh setting; for a local host
    without one, here (its files and clock are this machine's)."""
    if not cfg.ssh:
        no_ssh = CheckItem("ssh", "SKIP", "no ssh configured (needed to move save images between hosts)")
        if cfg.is_remote:
            return [no_ssh,
                    CheckItem("image directory", "SKIP", f"{cfg.state_dir}: remote host without ssh: cannot check"),
                    CheckItem("clock skew", "SKIP", "remote host without ssh: cannot check")]
        return [no_ssh, _local_image_directory(cfg.state_dir),
                CheckItem("clock skew", "PASS", "local host: same clock")]
    try:
        client = open_ssh(cfg, timeout_s)
    except Exception as exc:   # SSHFailed says why; any other failure is this check's result too
        return [CheckItem("ssh", "FAIL", f"{cfg.ssh}: {exc}"),
                CheckItem("image directory", "FAIL", f"{cfg.state_dir}: cannot check without ssh"),
                CheckItem("clock skew", "FAIL", "cannot check without ssh")]
    try:
        return [CheckItem("ssh", "PASS", f"{cfg.ssh}: connected, host key known"),
                _remote_image_directory(client, cfg.state_dir),
                _remote_clock_skew(client, timeout_s)]
    finally:
        client.close()


def _local_image_directory(directory: str) -> CheckItem:
    if not os.path.isdir(directory):
        return CheckItem("image directory", "FAIL", f"{directory} does not exist or is not a directory")
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".leasewise-check-"):
            pass
    except OSError as exc:
        return CheckItem("image directory", "FAIL", f"{directory}: cannot write ({exc.strerror or exc})")
    return CheckItem("image directory", "PASS", f"{directory} writable (local)")


def _remote_image_directory(client: Any, directory: str) -> CheckItem:
    """Whether `directory` is a directory we can write to over SFTP (a probe file, removed again)."""
    try:
        sftp = client.open_sftp()
    except Exception as exc:   # any failure is this check's result
        return CheckItem("image directory", "FAIL", str(exc))
    try:
        try:
            attrs = sftp.stat(directory)
        except OSError as exc:
            return CheckItem("image directory", "FAIL", f"{directory}: {exc.strerror or exc}")
        if not stat.S_ISDIR(attrs.st_mode or 0):
            return CheckItem("image directory", "FAIL", f"{directory} is not a directory")
        probe = f"{directory.rstrip('/')}/.leasewise-check-{uuid.uuid4().hex[:8]}"
        try:
            with sftp.open(probe, "wx") as handle:
                handle.write(b"leasewise host check\n")
            sftp.remove(probe)
        except OSError as exc:
            return CheckItem("image directory", "FAIL", f"{directory}: cannot write ({exc.strerror or exc})")
    except Exception as exc:
        return CheckItem("image directory", "FAIL", str(exc))
    finally:
        sftp.close()
    return CheckItem("image directory", "PASS", f"{directory} writable over SFTP")


def _remote_clock_skew(client: Any, timeout_s: float) -> CheckItem:
    try:
        skew = remote_clock_offset_s(client, timeout_s)
    except Exception as exc:   # any failure is this check's result
        return CheckItem("clock skew", "FAIL", str(exc) or type(exc).__name__)
    status: CheckStatus = "PASS" if abs(skew) <= MAX_CLOCK_SKEW_S else "FAIL"
    return CheckItem("clock skew", status, f"{skew:+.1f} s (limit ±{MAX_CLOCK_SKEW_S:g} s)")


def remote_clock_offset_s(client: Any, timeout_s: float) -> float:
    """Remote minus local clock, seconds (`date +%s` over SSH, against the midpoint of the round trip)."""
    before = time.time()
    _, stdout, stderr = client.exec_command("date +%s", timeout=timeout_s)
    out = stdout.read().decode("ascii", "replace").strip()
    status = stdout.channel.recv_exit_status()
    after = time.time()
    if status != 0 or not out.isdigit():
        err = stderr.read().decode("utf-8", "replace").strip()
        raise RuntimeError(f"`date +%s` failed (exit {status}): {err or out or 'no output'}")
    return int(out) + 0.5 - (before + after) / 2   # `date +%s` truncates: its true value is half a second on
