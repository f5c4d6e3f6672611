"""The lab tier: real libvirtd "hosts" on this machine (deploy/lab/lab) running the tiny guest
(deploy/guest/build).

    python -m pytest tests/lab -m lab -q

The session fixture `lab` builds the guest if needed, brings the lab up, and always brings it down at
the end of the session, whatever happened (finalizer; SIGTERM is turned into KeyboardInterrupt so a CI
timeout still tears it down). A machine that lacks something these tests need makes them FAIL with a
message saying what is missing: they never skip. Needs root (namespaces, bridge, libvirtd).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
import uuid
from pathlib import Path

import pytest

from tests.lab.labkit import (
    GUEST_BUILD,
    GUEST_DIR,
    INVENTORY,
    LAB,
    LAB_HOSTS,
    LAB_RUN,
    LAB_TRANSPORT,
    SHARED_DIR,
    TEST_VM_PREFIXES,
    VM_PREFIX,
    Console,
    Lab,
    LabConnections,
    _missing,
    _run,
    hold_lab_lock,
    import_driver,
    import_inventory,
    import_libvirt,
    lab_down,
)


def pytest_collection_modifyitems(config, items):
    """Every test under tests/lab is a lab test, marked or not (they all are, this is a safety net)."""
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.lab)


# ------------------------------------------------------------------------------------------- the lab

@pytest.fixture(scope="session")
def lab(request) -> Lab:
    if os.geteuid() != 0:
        _missing("not running as root", "The lab needs root for namespaces, the bridge and libvirtd.")
    for tool in ("ip", "nsenter", "unshare", "apt-get"):
        if not shutil.which(tool):
            _missing(f"`{tool}` is not on PATH", "Install iproute2, util-linux and apt (Debian 12).")
    if not os.access(LAB, os.X_OK) or not os.access(GUEST_BUILD, os.X_OK):
        _missing(f"{LAB} or {GUEST_BUILD} is missing or not executable", "They are part of the repository.")
    import_libvirt()
    load_inventory = import_inventory()

    lock = hold_lab_lock()  # one lab per machine: wait for any other session to finish with it

    # SIGTERM (e.g. a CI timeout) would kill pytest without running finalizers: make it an interrupt.
    previous = signal.getsignal(signal.SIGTERM)

    def _term(_sig, _frame):
        raise KeyboardInterrupt("SIGTERM")

    signal.signal(signal.SIGTERM, _term)

    def _finish():
        try:
            lab_down()
        finally:
            signal.signal(signal.SIGTERM, previous)
            lock.close()

    request.addfinalizer(_finish)  # registered before `up`, so a half-built lab is removed too

    timings: dict[str, float] = {}
    t0 = time.monotonic()
    proc = _run([GUEST_BUILD], timeout=900)
    timings["guest_build_s"] = time.monotonic() - t0
    if proc.returncode != 0:
        _missing(f"deploy/guest/build failed:\n{proc.stdout}{proc.stderr}", "See the message above.")
    for f in ("vmlinuz", "initrd.img"):
        if not (GUEST_DIR / f).is_file():
            _missing(f"the guest has no {GUEST_DIR / f} after deploy/guest/build", "See deploy/guest/build.")

    t0 = time.monotonic()
    proc = _run([LAB, "up", "-n", str(LAB_HOSTS), "--transport", LAB_TRANSPORT], timeout=1800)
    timings["lab_up_s"] = time.monotonic() - t0
    if proc.returncode != 0:
        _missing(f"deploy/lab/lab up failed:\n{proc.stdout}{proc.stderr}", "See the message above.")
    if not INVENTORY.is_file():
        _missing(f"deploy/lab/lab up wrote no {INVENTORY}", "See deploy/lab/lab.")
    load_inventory(INVENTORY)   # (a bad inventory fails here, naming what is wrong)
    lab = Lab(inventory=INVENTORY, hosts=[], names=[], uris={}, run_dir=LAB_RUN, timings=timings)
    lab.load(LAB_TRANSPORT)
    if len(lab.names) < 2:
        _missing(f"the lab inventory has {len(lab.names)} host(s)", "The lab tier needs at least two.")
    print(f"\nlab: guest build {timings['guest_build_s']:.1f} s, lab up over {LAB_TRANSPORT} "
          f"{timings['lab_up_s']:.1f} s, hosts {', '.join(lab.names)}")
    return lab


@pytest.fixture(scope="module")
def over_local_storage(lab):
    """The lab brought up with `--storage local` (each host's image directory its own) for one module, and
    back to shared storage afterwards."""
    lab.up(LAB_TRANSPORT, "local")
    yield lab
    lab.up(LAB_TRANSPORT)


@pytest.fixture(scope="session")
def lab_inventory_path(lab) -> Path:
    """The inventory `deploy/lab/lab up` wrote (what tests/drivers/test_driver_contract.py's docstring asks for)."""
    return lab.inventory


@pytest.fixture(scope="session")
def libvirt_mod(lab):
    return import_libvirt()


@pytest.fixture(scope="session")
def conns(lab, libvirt_mod):
    """Raw libvirt connections to every lab host: how the tests look at hosts independently of the driver
    (opened again when a module brings the lab up over another transport)."""
    opened = LabConnections(libvirt_mod, lab)
    yield opened
    opened.close()


@pytest.fixture(scope="session")
def host_a(lab) -> str:
    return lab.names[0]


@pytest.fixture(scope="session")
def host_b(lab) -> str:
    return lab.names[1]


@pytest.fixture
def driver(lab):
    LibvirtDriver = import_driver()
    drv = LibvirtDriver(lab.hosts)
    yield drv
    drv.close()


@pytest.fixture(autouse=True)
def _clean_lab(request, libvirt_mod, conns, lab):
    """After each lab test: no test domain left on any host, no test state file left anywhere."""
    yield
    for name in conns:
        try:
            domains = conns[name].listAllDomains(0)
        except libvirt_mod.libvirtError:   # (a host that does not answer has nothing we can clean)
            continue
        for dom in domains:
            if not dom.name().startswith(TEST_VM_PREFIXES):
                continue
            try:
                if dom.isActive():
                    dom.destroy()
            except libvirt_mod.libvirtError:
                pass
            try:
                dom.undefineFlags(libvirt_mod.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE)
            except libvirt_mod.libvirtError:
                pass
    for d in ("leasewise-lab-tests", "leasewise-contract"):
        shutil.rmtree(SHARED_DIR / d, ignore_errors=True)
    for name in lab.names:
        save = lab.private_path(name, "/var/lib/libvirt/qemu/save")
        for prefix in TEST_VM_PREFIXES:
            for f in save.glob(f"{prefix}*"):
                f.unlink(missing_ok=True)


@pytest.fixture
def vm_name(request) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:24]
    return f"{VM_PREFIX}{base}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def shared_state_dir() -> Path:
    d = SHARED_DIR / "leasewise-lab-tests"
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture
def console(libvirt_mod, lab):
    """console(host, vm) -> Console; closed after the test."""
    opened: list[Console] = []

    def _open(host: str, vm: str) -> Console:
        c = Console(libvirt_mod, lab.uris[host], vm)
        opened.append(c)
        return c

    yield _open
    for c in opened:
        c.close()


