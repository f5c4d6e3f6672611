"""run/inventory.toml: the leasewise host inventory of the lab that is up, for its transport."""

from __future__ import annotations

import json
from pathlib import Path

from .common import DEFAULT_STORAGE, RUN, SHARED_IMAGES, STATE_DIR, VM_BRIDGE, host_ip, host_name
from .transports import COPY_KEY, HEAD_KEY, HEAD_KNOWN_HOSTS, PEER_DIR, inventory_uri, peer_uri

INVENTORY = RUN / "inventory.toml"
#: with local storage, each host's VM overlays and seeds (leasewise's default directory name)
LOCAL_DISK_DIR = "leasewise-vms"


def write_inventory(count: int, transport: str, storage: str = DEFAULT_STORAGE) -> Path:
    """Each host's libvirt link and peer link over `transport`; leasewise's own SSH (root, the lab key, the
    lab's known_hosts, which also pins the libvirt link over ssh), and the host's own key and known_hosts
    for copying memory images straight to the others; its storage (`shared`: the image
    directory every host sees; `local`: no shared storage, each host's VM disks in its own directory) and
    VM bridge."""
    out = ["# leasewise host inventory of the local lab, written by deploy/lab/lab up", "",
           f"# transport: {transport}",
           f"# storage: {storage}" + ("" if storage == "shared" else
                                       f" (each host has its own {SHARED_IMAGES}: no shared storage)"), ""]
    for n in range(1, count + 1):
        values: dict[str, object] = {
            "name": host_name(n),
            "uri": inventory_uri(n, transport),
            "peer_uri": peer_uri(n, transport),
            "domain_type": "qemu",
            "ssh": f"root@{host_ip(n)}",
            "ssh_key": str(HEAD_KEY),
            "known_hosts": str(HEAD_KNOWN_HOSTS),
            "peer_ssh_key": COPY_KEY,
            "peer_known_hosts": f"{PEER_DIR}/known_hosts",
            "migration_uri": f"tcp://{host_ip(n)}",
            "state_dir": STATE_DIR,
            "shared_storage": [str(SHARED_IMAGES)] if storage == "shared" else [],
            "disk_dir": None if storage == "shared" else f"{SHARED_IMAGES}/{LOCAL_DISK_DIR}",
            "network": VM_BRIDGE,
            "network_type": "bridge",
        }
        out.append("[[host]]")
        # (a JSON string or list of strings is valid TOML)
        out += [f"{key} = {json.dumps(value)}" for key, value in values.items() if value is not None]
        out.append("")
    INVENTORY.write_text("\n".join(out))
    return INVENTORY
