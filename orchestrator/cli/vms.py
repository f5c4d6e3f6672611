"""How `lease show` prints a lease's VMs (as the backend found them: `orchestrator.service.backend.VMAccess`)."""

from __future__ import annotations

import shlex

from rich.markup import escape

from orchestrator.cli.tables import Column, print_table
from orchestrator.service.backend import VMAccess


def print_vms(console, vms: list[VMAccess]) -> None:
    print_table(console, [Column("vm"), Column("host"), Column("state", wraps=True), Column("MAC", drop=2),
                          Column("dirty MiB/s", "right", drop=3),
                          Column("addresses", wraps=True), Column("ssh", wraps=True, drop=1)],
                [[v.name, v.host or "-", escape(v.state), v.mac or "-",
                  "-" if v.dirty_rate_mib_s is None else f"{v.dirty_rate_mib_s:.1f}",
                  ", ".join(f"{a.address}/{a.prefix} ({a.source})" for a in v.addresses) or "-",
                  escape(shlex.join(ssh)) if (ssh := v.ssh_command()) else "-"] for v in vms],
                title="VMs")
