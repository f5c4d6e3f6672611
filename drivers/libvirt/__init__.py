"""The real driver: libvirt over the network to the lab's hosts (or `test:///` URIs in tests).

One module per concern, each written for the failures we expect in a lab:

* connection.py: one cached connection per host, re-opened after a drop; transient errors retried,
  every libvirt error translated into `drivers.errors`;
* lifecycle.py: finding, listing, starting and stopping domains, each step safe to retry;
* state_transfer.py: save and restore, and save images copied (or removed) over SFTP;
* migration.py: live migration, judged by where the domain really runs afterwards, with the downtime
  and timeout policy as pure functions;
* ssh.py: SSH with known host keys only; host.py: capacity, versions and the pre-flight host checks;
* driver.py: `LibvirtDriver`, the `Driver` interface put together from these.

libvirt-python is imported when a driver is built, so importing this package never needs it.
"""

from .connection import import_libvirt
from .driver import LibvirtDriver

__all__ = ["LibvirtDriver", "import_libvirt"]
