"""A host filter for sites without shared storage: a lease that boots an image copied to the hosts' own
storage is planned only on the hosts holding a copy.

The mapper consults one `ImageHolders` (from the store's record of which host holds which copied image);
an image on shared storage, or a lease that names no catalogued image, is not restricted.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from types import MappingProxyType

from orchestrator.model.lease import Lease


class ImageHolders:
    """Catalogued image name -> the hosts holding a copy, for the images copied to hosts' own storage."""

    def __init__(self, holders: Mapping[str, Collection[str]] | None = None, site: Collection[str] | None = None):
        """`site`: every host of the site; an image all of them hold restricts no lease, so it is left out
        (a lease booting it costs the mapper nothing: no list of hosts is made for it). A site that gains
        a host makes a new one (the cluster is built again)."""
        every = None if site is None else frozenset(site)
        self._holders = MappingProxyType({name: frozenset(hosts) for name, hosts in (holders or {}).items()
                                          if every is None or not every <= frozenset(hosts)})

    def hosts_for(self, lease: Lease) -> frozenset[str] | None:
        """The hosts `lease` may be planned on for its image; None: any host."""
        image = lease.request.image
        if image is None or image.name is None:
            return None
        return self._holders.get(image.name)

    def restrict(self, lease: Lease, only_hosts: Collection[str] | None) -> Collection[str] | None:
        """`only_hosts` (None: every host) narrowed to the hosts holding the lease's image."""
        if not self._holders:   # (shared storage, or every copy on every host: the usual site's lease)
            return only_hosts
        holding = self.hosts_for(lease)
        if holding is None:
            return only_hosts
        return holding if only_hosts is None else [h for h in only_hosts if h in holding]


#: no image restricts any lease (every image on shared storage)
NO_IMAGE_FILTER = ImageHolders()
