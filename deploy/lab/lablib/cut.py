"""A lab host cut off from the network, and mended.

`cut` drops every packet in and out of the host's network namespace (an nftables table of its own), as a
firewall or a partition does: nothing answers, not even "connection refused", so a connect to it waits
for the kernel's SYN retries (about two minutes) and a connection already open hangs until its keepalive
gives up. This is the harder half of a power cut (`crash` is the other: the host's processes die and its
address refuses). Its VMs and daemons run on. `mend` takes the table away.
"""

from __future__ import annotations

import shutil

from .common import die, host_name, netns, run, say

TABLE = "lw_cut"
RULES = f"""table inet {TABLE} {{
    chain input {{ type filter hook input priority -300; policy drop; }}
    chain output {{ type filter hook output priority -300; policy drop; }}
}}
"""


def _nft(n: int, *args: str, rules: str | None = None, check: bool = True) -> int:
    """`nft ARGS` in host n's network namespace (`rules` on its standard input); its exit code."""
    if shutil.which("nft") is None:
        die("cutting a host off needs nft: apt-get install nftables")
    command = ["ip", "netns", "exec", netns(n), "nft", *args]
    if rules is None:
        return run(command, check=check).returncode
    return run(command, check=check, input=rules, stdin=None).returncode


def is_cut(n: int) -> bool:
    return _nft(n, "list", "table", "inet", TABLE, check=False) == 0


def cut(n: int) -> None:
    """Host n drops every packet from now on."""
    if is_cut(n):
        die(f"{host_name(n)} is cut off already")
    _nft(n, "-f", "-", rules=RULES)
    say(f"cut: {host_name(n)} drops every packet (its VMs and daemons run on)")


def mend(n: int) -> None:
    """Host n answers again."""
    if not is_cut(n):
        die(f"{host_name(n)} is not cut off")
    _nft(n, "delete", "table", "inet", TABLE)
    say(f"mend: {host_name(n)} answers again")
