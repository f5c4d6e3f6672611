"""What the machine needs before a lab can come up: Debian's packages, and /dev/kvm usable by QEMU."""

from __future__ import annotations

import grp
import os
import shutil
from pathlib import Path

from .common import PACKAGES, die, quiet, run, say

# ---------------------------------------------------------------------------------------- prerequisites

def ensure_packages() -> None:
    missing = [pkg for pkg, binary in PACKAGES.items() if not os.path.exists(binary)]
    if not missing:
        return
    if not shutil.which("apt-get"):
        die(f"missing packages {missing} and no apt-get to install them")
    say(f"installing Debian packages: {' '.join(missing)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-qq"], timeout=600, env=env)
    policy = Path("/usr/sbin/policy-rc.d")  # packages must not start services (the lab starts its own)
    made_policy = not policy.exists()
    if made_policy:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    try:
        run(["apt-get", "install", "-y", "-qq", *missing], timeout=1800, env=env)
    finally:
        if made_policy:
            policy.unlink(missing_ok=True)
    still = [pkg for pkg, binary in PACKAGES.items() if not os.path.exists(binary)]
    if still:
        die(f"packages still missing after apt-get install: {still}")


def fix_kvm_permissions() -> None:
    """Group kvm, mode 660: otherwise libvirt re-probes QEMU on every domain start (tens of seconds)."""
    kvm = Path("/dev/kvm")
    if not kvm.exists():
        return
    if not quiet(["getent", "group", "kvm"]):
        run(["groupadd", "--system", "kvm"], check=False)
    st = kvm.stat()
    try:
        kvm_gid = grp.getgrnam("kvm").gr_gid
    except KeyError:
        return
    if st.st_gid != kvm_gid:
        os.chown(kvm, 0, kvm_gid)
    if (st.st_mode & 0o777) != 0o660:
        os.chmod(kvm, 0o660)

