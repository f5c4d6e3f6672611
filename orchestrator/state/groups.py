"""Which Unix groups a user is in: what a group quota (`@lab`) counts its members by.

A user is in a group when it is their primary group (the passwd entry's gid) or a supplementary one (the
group entry lists them), as `id -Gn` says. An unknown user (a name leases were submitted under that the
system does not know) is in no group. Asked afresh each time: nothing is cached, so a user added to a group
counts at once; a server that wants a cache passes its own resolver to `Cluster`.
"""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Callable

#: user name -> the names of their groups
GroupsOf = Callable[[str], frozenset[str]]


def unix_groups(user: str) -> frozenset[str]:
    """The names of `user`'s primary and supplementary groups; none for an unknown user."""
    if not user:
        return frozenset()
    try:
        entry = pwd.getpwnam(user)
    except (KeyError, ValueError):
        return frozenset()
    # (the C library's own list, as `id -Gn` and login make it: one lookup, not a read of every group)
    names = set()
    for gid in os.getgrouplist(user, entry.pw_gid):
        try:
            names.add(grp.getgrgid(gid).gr_name)
        except KeyError:   # a gid with no group entry: no name to match a quota by
            pass
    return frozenset(names)
