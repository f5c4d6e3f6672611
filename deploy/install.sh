#!/usr/bin/env bash
# Install everything leasewise's tests need on a fresh Debian 12 machine (run as root from anywhere):
#   * Debian packages: libvirt + QEMU (the lab tier), dnsmasq (the lab's DHCP for VMs), the tools to build the
#     lab guest and the VM images (mmdebstrap, e2fsprogs), sshd, ping, isoinfo, chromium and chromium-driver
#     (the web pages' browser tests)
#   * the project itself: pip install -e '.[test,libvirt,sweep]' from this repository's root (sweep: Ray;
#     test: pytest, hypothesis, import-linter, aiosmtpd: the SMTP server the notice tests run, selenium,
#     ruff and mypy: the lab program's lint and type check), which compiles the slot table's core
#     (orchestrator/compiled.py: core.pyx) with Cython (fetched by pip; gcc and the Python headers from
#     Debian): a build that fails ends this script with pip's error
#   * /dev/kvm owned by group kvm, mode 660 (otherwise libvirt re-probes QEMU on every domain start)
#   * the lab guest (deploy/guest/build: cached, downloads nothing once built)
#   * the VM image debian12 (deploy/images/build: cached the same way; its first build takes about 2 minutes)
# Idempotent, and quiet when there is nothing to do. `--no-guest` skips the guest build, `--no-images` the
# image build.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_GUEST=1
BUILD_IMAGES=1
for arg in "$@"; do
    case $arg in
        --no-guest) BUILD_GUEST=0 ;;
        --no-images) BUILD_IMAGES=0 ;;
        *) echo "usage: $0 [--no-guest] [--no-images]" >&2; exit 2 ;;
    esac
done

say() { echo "install: $*"; }
die() { echo "install: error: $*" >&2; exit 1; }
[[ $(id -u) == 0 ]] || die "must run as root"

PACKAGES=(
    libvirt-daemon-system libvirt-clients libvirt-dev pkg-config
    qemu-system-x86 qemu-utils
    openssh-server openssh-client
    cpio busybox-static gcc libc6-dev
    python3-dev    # Python.h: pip install compiles the core of orchestrator/compiled.py (Cython)
    mmdebstrap e2fsprogs
    iproute2 util-linux procps
    nftables       # the lab cuts a host off (deploy/lab/lab cut): every packet dropped in its namespace
    iputils-ping   # the daemon pings a VM through its live migration (the network outage users see)
    genisoimage    # isoinfo: the cloud-init seed tests read the ISO with it where iso9660 cannot be mounted
    dnsmasq-base
    openssl        # the service tests make a self-signed certificate for the HTTPS API
    chromium chromium-driver   # the web pages' tests drive a headless Chromium (tests/service/test_web_browser.py)
)
missing=()
for pkg in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [[ $status == "install ok installed" ]] || missing+=("$pkg")
done
if ((${#missing[@]})); then
    say "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Packages must not start their services (a root-namespace libvirtd, its default NAT network, sshd):
    # the lab starts its own, in its own namespaces. (dnsmasq-base is the binary alone, without the
    # dnsmasq package's system service: the lab starts the one DHCP server it needs, on its bridge only.)
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    apt-get update -qq >/dev/null || die "apt-get update failed"
    apt-get install -y -qq "${missing[@]}" >/dev/null || die "apt-get install ${missing[*]} failed"
fi

# /dev/kvm: group kvm, mode 660
if [[ -e /dev/kvm ]]; then
    getent group kvm >/dev/null || groupadd --system kvm
    [[ $(stat -c %G /dev/kvm) == kvm ]] || chgrp kvm /dev/kvm
    [[ $(stat -c %a /dev/kvm) == 660 ]] || chmod 660 /dev/kvm
fi

# The project, editable, with the test and libvirt extras; skipped when it already imports from this tree.
PY=${PYTHON:-python3}
if ! (cd / && "$PY" - "$ROOT" <<'EOF' >/dev/null 2>&1
import sys, pathlib, importlib
root = pathlib.Path(sys.argv[1]).resolve()
for mod in ("libvirt", "pytest", "hypothesis", "typer", "rich", "tenacity", "paramiko", "sortedcontainers", "yaml",
            "numpy", "matplotlib", "importlinter", "grimp", "pycdlib", "ray", "aiosmtpd",
            "fastapi", "uvicorn", "httpx", "jinja2", "selenium", "pydantic", "cryptography", "schemathesis",
            "ruff", "mypy"):
    importlib.import_module(mod)
for pkg in ("orchestrator", "drivers"):
    path = pathlib.Path(importlib.import_module(pkg).__file__).resolve()
    if root not in path.parents:
        sys.exit(1)
import orchestrator.compiled as compiled   # (the core built, from these sources: else build)
if compiled.problem(root) is not None:
    sys.exit(1)
EOF
); then
    say "pip install -e '.[test,libvirt,sweep]' in $ROOT"
    if ! out=$(cd "$ROOT" && "$PY" -m pip install -q --disable-pip-version-check -e '.[test,libvirt,sweep]' 2>&1); then
        printf '%s\n' "$out" | grep -v -e "Running pip as the 'root' user" | tail -40 >&2
        die "pip install failed (its last lines above): the compiled core (orchestrator/compiled.py) must build"
    fi
    printf '%s\n' "$out" | grep -v -e "Running pip as the 'root' user" -e "is ignored: it is neither a file nor a directory" \
        -e '^$' || true
    (cd / && "$PY" -c "import libvirt, pytest, ray, orchestrator, drivers") || die "pip install did not give importable packages"
    (cd / && "$PY" -c "import orchestrator.compiled as c; c.check()") \
        || die "pip install did not build the compiled core of orchestrator/compiled.py (Cython, gcc, Python.h)"
fi

if [[ $BUILD_GUEST == 1 ]]; then
    "$ROOT/deploy/guest/build" --quiet
fi
if [[ $BUILD_IMAGES == 1 ]]; then
    "$ROOT/deploy/images/build" debian12 --quiet
fi
