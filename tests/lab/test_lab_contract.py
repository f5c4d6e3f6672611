"""tests/drivers/test_driver_contract.py's driver contract, run against a LibvirtDriver on the real lab (as that
module's docstring describes), including the live-migration cases the in-process test hypervisor cannot run:
over the lab tier's transport, ssh (qemu+libssh2 as `leasewise`, peer-to-peer migrations host to host over
it); tests/lab/test_tls_lab.py runs its core over qemu+tls.
"""

from __future__ import annotations

import pytest

from drivers.base import VMSpec
from drivers.inventory import load_inventory
from drivers.libvirt import LibvirtDriver
from tests.drivers.test_driver_contract import ContractTarget, DriverContract
from tests.lab.labkit import GUEST_DIR, SHARED_DIR, Console, import_libvirt

CONTRACT_STATE_DIR = SHARED_DIR / "leasewise-contract"   # shared by every lab host


def lab_guest(name: str, lease_id: str | None) -> VMSpec:
    # 64 MiB written once and then left alone: enough real memory that 16 MiB/s cannot move the guest
    # within 3 s (the slow cases), little enough that a forced (paused) finish takes only seconds.
    return VMSpec(
        name, 1, 256,
        kernel=str(GUEST_DIR / "vmlinuz"),
        initrd=str(GUEST_DIR / "initrd.img"),
        cmdline="console=ttyS0 quiet dirtier.mib=64 dirtier.pps=0 dirtier.report=1",
        lease_id=lease_id,
    )


# the dirtier's line once its working set is touched, or the status line it prints every second after that (the
# console may open after the first)
WRITTEN_LINE = r"dirtier: (ready|t=[0-9]+s) mib=64"


def written_waiter(uris: dict[str, str]):
    """Waits on a lab guest's console until its dirtier has written its 64 MiB (boot takes seconds under TCG)."""
    libvirt = import_libvirt()

    def wait(name: str, host: str) -> None:
        console = Console(libvirt, uris[host], name)
        try:
            console.wait_for(WRITTEN_LINE, timeout=120)
        finally:
            console.close()

    return wait


@pytest.mark.lab
class TestTransportSshContract(DriverContract):
    @pytest.fixture
    def contract_driver(self, lab_inventory_path, lab):
        CONTRACT_STATE_DIR.mkdir(parents=True, exist_ok=True)
        hosts = load_inventory(lab_inventory_path)
        spare = next(h for h in hosts if h.name == lab.names[2])   # added while the driver runs
        driver = LibvirtDriver([h for h in hosts if h is not spare])
        target = ContractTarget(
            "lab", driver, lab.names[0], lab.names[1], state_dir=str(CONTRACT_STATE_DIR),
            make_spec=lab_guest, new_host=spare,
            # a guest stopped before its ACPI button driver loaded ignores the button: destroyed after 5 s
            graceful_timeout=5, slow_bandwidth_mib_s=16, slow_timeout_s=3,
            wait_until_written=written_waiter(dict(lab.uris)),
        )
        yield target
        target.cleanup()
