"""Reaching the lab hosts from the head node as the lab itself does: virsh over the lab's transport, ssh as root
with the lab key; waiting until every host answers both, and having each libvirtd probe QEMU at once."""

from __future__ import annotations

import shutil
import subprocess
import time

from .common import CAPS_CACHE, RUN, SSH_WAIT_S, TCP_WAIT_S, die, host_dir, host_ip, host_name, say
from .transports import head_uri


def virsh(n: int, transport: str, *args: str, timeout: float = 10) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(["virsh", "-q", "-c", head_uri(n, transport), *args], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def ssh_cmd(n: int, remote: str, timeout: int = 5, user: str = "root") -> list[str]:
    return ["ssh", "-i", str(RUN / "id_ed25519"), "-o", f"UserKnownHostsFile={RUN / 'known_hosts'}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={timeout}",
            "-o", "IdentitiesOnly=yes", "-o", "LogLevel=ERROR", f"{user}@{host_ip(n)}", remote]


def wait_libvirt(hosts: list[int], transport: str) -> None:
    """Until every host's libvirtd answers over the transport (and says the host's own name)."""
    deadline = time.monotonic() + TCP_WAIT_S
    pending = set(hosts)
    last: dict[int, str] = {}
    while pending and time.monotonic() < deadline:
        for n in sorted(pending):
            proc = virsh(n, transport, "hostname", timeout=10)
            if proc is None:
                last[n] = "virsh timed out"
            elif proc.returncode == 0 and proc.stdout.strip() == host_name(n):
                pending.discard(n)
            elif proc.returncode == 0:
                last[n] = f"answered as {proc.stdout.strip()!r}, not {host_name(n)!r}"
            else:
                last[n] = (proc.stderr or proc.stdout).strip()
        if pending:
            time.sleep(0.3)
    if pending:
        details = "; ".join(f"{host_name(n)} ({head_uri(n, transport)}): {last.get(n, 'no answer')}"
                            for n in sorted(pending))
        die(f"libvirtd did not answer over {transport} within {TCP_WAIT_S:.0f} s: {details}. "
            f"Logs: {RUN}/hostN/log/libvirtd.log, libvirtd.out and sshd.log")


def wait_ssh(hosts: list[int]) -> None:
    deadline = time.monotonic() + SSH_WAIT_S
    pending = set(hosts)
    last: dict[int, str] = {}
    while pending and time.monotonic() < deadline:
        for n in sorted(pending):
            try:
                proc = subprocess.run(ssh_cmd(n, "hostname"), stdin=subprocess.DEVNULL, capture_output=True,
                                      text=True, timeout=15)
            except subprocess.TimeoutExpired:
                last[n] = "ssh timed out"
                continue
            if proc.returncode == 0 and proc.stdout.strip() == host_name(n):
                pending.discard(n)
            else:
                last[n] = (proc.stderr or proc.stdout).strip()
        if pending:
            time.sleep(0.3)
    if pending:
        details = "; ".join(f"{host_name(n)}: {last.get(n, 'no answer')}" for n in sorted(pending))
        die(f"sshd did not answer within {SSH_WAIT_S:.0f} s: {details}")


def prewarm(hosts: list[int], transport: str) -> None:
    """Have every libvirtd probe its QEMU binaries now (a few seconds each, in parallel) rather than on its first
    domain start or incoming migration, so that the tests' timings measure the operation itself."""
    procs = []
    for n in hosts:
        procs.append((n, subprocess.Popen(
            ["virsh", "-q", "-c", head_uri(n, transport), "capabilities"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)))
    for n, proc in procs:
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            die(f"{host_name(n)}: probing QEMU (virsh capabilities) took over 120 s")
        if proc.returncode != 0:
            die(f"{host_name(n)}: libvirtd cannot use QEMU (domain type qemu): {err.strip()}")
    probed = sorted((host_dir(hosts[0]) / "cache" / "qemu" / "capabilities").glob("*.xml"))
    if probed:
        try:
            CAPS_CACHE.mkdir(parents=True, exist_ok=True)
            for f in probed:
                shutil.copy2(f, CAPS_CACHE / f.name)
        except OSError as exc:
            say(f"warning: cannot keep QEMU capabilities in {CAPS_CACHE}: {exc}")
