#!/usr/bin/env python3
"""leasewise lab: N libvirt "hosts" on this one machine, for the lab test tier and for VMs a person can use.

    deploy/lab/lab up [-n N] [--transport ssh|tls|tcp] [--storage shared|local] [--link-rate 1gbit|none]
                      [--link-delay 0.2ms]
                                 bring up N hosts (default 3) reached over TRANSPORT (default ssh), their
                                 image directory shared (default) or each host's own, replacing any lab
                                 already up
    deploy/lab/lab status        per host: namespace, VM bridge, daemons, libvirt (over the lab's
                                 transport) and SSH reachability, running domains; the DHCP server
    deploy/lab/lab crash HOST    HOST loses its power: all its processes (QEMU, libvirtd, sshd) killed at once
    deploy/lab/lab boot HOST     HOST comes back after a crash, empty (its domain definitions kept)
    deploy/lab/lab cut HOST      HOST is cut off: it drops every packet (no "connection refused"), its VMs
                                 and daemons run on
    deploy/lab/lab mend HOST     HOST answers again after a cut
    deploy/lab/lab down          stop and remove everything (idempotent; safe when nothing is up)

Each host labN (N = 1..) is
  * a network namespace `lw-labN`, with a veth (`lwvethN` <-> `eth0`) into the bridge `lwbr0`
    (10.77.0.1/24 on the root namespace). Inside, `eth0` is a port of the host's own bridge `br0`, which
    holds the host's address 10.77.0.(10+N), as a real host's uplink bridge would: a VM's NIC
    (`<interface type='bridge'><source bridge='br0'/>`) is then on the lab network itself, and stays on it
    when the VM migrates to another host. There is no default route anywhere in the lab: traffic only goes
    between the bridge and the lab hosts (and their VMs).
  * VM addresses: one dnsmasq in the root namespace, bound to `lwbr0` only, serves DHCP for
    10.77.0.100-10.77.0.199 (no router, no DNS: the lab has neither); its pid, log and lease files are
    run/dnsmasq.{pid,log,leases}. It is started by `up` and stopped by `down`.
  * a private mount + UTS namespace (hostname `labN`), kept alive by a holder process (`sleep infinity`)
    whose pid is in run/hostN/holder.pid. In it, /etc is a copy of this machine's made at `up` (with the
    host's own /etc/hosts, and its own users: `leasewise` in its `libvirt` group), and /run/libvirt,
    /var/lib/libvirt/qemu, /var/cache/libvirt, /var/log/libvirt and /etc/libvirt are bind mounts of
    deploy/lab/run/hostN/...
    /var/lib/libvirt/images stays shared by every host, like NFS in a real lab; with `--storage local`
    each host has its own (run/hostN/images bound over it), as hosts with only their own disks.
  * a shaped link: each veth end sends at most `--link-rate` (default 1gbit, a token bucket `tbf` on
    both ends, so traffic into and out of each host is limited, as on a lab's switch port), and with
    `--link-delay` also delayed (netem; refused at once if this kernel lacks it). Unshaped veths run at
    memory speed, where every live migration converges in a pass or two and the pre-copy model's hard
    part goes untested; `--link-rate none` gives them back.
  * its own virtlogd, libvirtd (its own host_uuid; listening as the transport says) and sshd (root with the
    lab key, for leasewise's own SSH; `leasewise` with the lab key and every host's peer key), all started
    inside the host's namespaces with `nsenter -t HOLDER -m -u -n`.

The transports (lablib/transports.py): `ssh` (libvirtd on its socket only, reached as `leasewise` over
libvirt's libssh2 transport with known_hosts pinned), `tls` (a lab CA, server and client certificates,
libvirtd on TLS only) and `tcp` (no authentication). Live migrations go host to host, peer to peer, over
the same transport.

Nothing in the lab can reach beyond 10.77.0.0/24: the hosts have no default route, and an `unreachable`
route for 10.77.0.0/24 (metric 4077, under the bridge's own route) stays after `down`, so a client still
talking to a lab address fails at once instead of sending its packets out through the default route.

`up` writes run/inventory.toml (the leasewise host inventory; each host's VMs attach to its bridge br0),
run/id_ed25519 (the head node's key), run/known_hosts (the hosts' keys), run/transport, run/storage, and for tls
run/pki/. Everything under run/ is generated (and gitignored).

Only the standard library is used; needs root.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from lablib.common import (
    BRIDGE,
    DEFAULT_LINK_RATE,
    DHCP_FIRST,
    DHCP_LAST,
    DNSMASQ_LEASES,
    DEFAULT_STORAGE,
    DIR_BINDS,
    GATEWAY,
    GUARD_METRIC,
    MAX_HOSTS,
    NS_PREFIX,
    PREFIXLEN,
    RUN,
    SHARED_IMAGES,
    STORAGES,
    SUBNET,
    VM_BRIDGE,
    acquire_lab_lock,
    alive,
    die,
    existing_netns,
    host_dir,
    host_ip,
    host_name,
    kill_pids,
    lab_host_numbers,
    link_exists,
    netns,
    netns_pids,
    pid_comm,
    quiet,
    read_pid,
    read_storage,
    require_root,
    run,
    say,
    veth,
    write_storage,
)
from lablib.dhcp import dhcp_leases, dnsmasq_pids, start_dhcp
from lablib.hosts import prepare_host_dir, start_daemons, start_holder
from lablib.inventory import write_inventory
from lablib.machine import ensure_packages, fix_kvm_permissions
from lablib.network import (
    check_link_shaping,
    ensure_leak_guard,
    leak_guard_present,
    link_shape_text,
    make_network,
    parse_delay,
    parse_rate,
    shape_link,
    vm_bridge_ok,
)
from lablib.cut import cut, is_cut, mend
from lablib.power import boot, crash, host_number
from lablib.reach import prewarm, ssh_cmd, virsh, wait_libvirt, wait_ssh
from lablib.transports import (
    DEFAULT_TRANSPORT,
    HEAD_KEY,
    HEAD_KNOWN_HOSTS,
    LAB_USER,
    TRANSPORTS,
    head_uri,
    known_hosts_lines,
    make_pki,
    make_ssh_trust,
    make_users,
    read_transport,
    write_transport,
)

# ------------------------------------------------------------------------------------------------- down

def down(verbose: bool = True) -> int:
    require_root()
    ensure_leak_guard()
    nums = lab_host_numbers()
    did = False
    dhcp = dnsmasq_pids()
    if dhcp:
        kill_pids(dhcp, "dnsmasq")
        did = True
    for n in nums:
        hd = host_dir(n)
        ns = netns(n)
        # libvirtd first, so that it does not react to its domains dying; then QEMU, sshd, virtlogd, holder.
        libvirtd = read_pid(hd / "libvirtd.pid")
        in_ns = set(netns_pids(ns))
        if libvirtd and libvirtd in in_ns:
            kill_pids([libvirtd], f"{host_name(n)} libvirtd")
        known = [read_pid(hd / f) for f in ("virtlogd.pid", "sshd.pid", "holder.pid")]
        others = set(netns_pids(ns)) | {p for p in known if p and pid_comm(p) in ("virtlogd", "sshd", "sleep")}
        if others or libvirtd in in_ns:
            did = True
        kill_pids(sorted(others), f"{host_name(n)} processes")
        if ns in existing_netns():
            run(["ip", "netns", "del", ns], check=False)
            did = True
        if link_exists(veth(n)):
            run(["ip", "link", "del", veth(n)], check=False)
            did = True
    # anything of ours still mounted in the root namespace (should not happen: binds live in the hosts' own
    # mount namespaces and vanish with them)
    try:
        mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    except OSError:
        mounts = []
    for m in reversed(mounts):
        m = m.replace("\\040", " ")
        if m.startswith(str(RUN) + "/") or m.startswith(f"/run/netns/{NS_PREFIX}"):
            run(["umount", "-l", m], check=False)
            did = True
    # `ip netns add` makes /run/netns a mount point of its own; drop it when no namespace is left in it
    netns_dir = Path("/run/netns")
    if "/run/netns" in mounts and netns_dir.is_dir() and not any(netns_dir.iterdir()):
        run(["umount", "/run/netns"], check=False)
    if link_exists(BRIDGE):
        run(["ip", "link", "del", BRIDGE], check=False)
        did = True
    if RUN.exists():
        shutil.rmtree(RUN, ignore_errors=True)
        did = True
    if verbose:
        say("down: lab stopped and removed" if did else "down: nothing was up")
    return 0



# --------------------------------------------------------------------------------------------------- up

def up(count: int, transport: str = DEFAULT_TRANSPORT, rate: str | None = None, delay: str | None = None,
       storage: str = DEFAULT_STORAGE) -> int:
    require_root()
    if storage not in STORAGES:
        die(f"--storage must be one of {', '.join(STORAGES)} (got {storage!r})")
    if not 1 <= count <= MAX_HOSTS:
        die(f"-n must be between 1 and {MAX_HOSTS}")
    if transport not in TRANSPORTS:
        die(f"--transport must be one of {', '.join(TRANSPORTS)} (got {transport!r})")
    t0 = time.monotonic()
    ensure_packages()
    check_link_shaping(rate, delay)
    fix_kvm_permissions()
    if lab_host_numbers() or link_exists(BRIDGE) or dnsmasq_pids():
        say("tearing down the lab that is already up")
        down(verbose=False)
    for cidr_owner in run(["ip", "-o", "-4", "addr", "show"], check=False).stdout.splitlines():
        # (the bridge is gone by now: any 10.77.0.x address left belongs to something else)
        if " 10.77.0." in cidr_owner:
            die(f"10.77.0.0/24 is already in use on this machine: {cidr_owner.strip()}")
    hosts = list(range(1, count + 1))
    try:
        RUN.mkdir(parents=True, exist_ok=True)
        SHARED_IMAGES.mkdir(parents=True, exist_ok=True)
        for target in DIR_BINDS.values():
            Path(target).mkdir(parents=True, exist_ok=True)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        Path("/run/netns").mkdir(exist_ok=True)
        write_transport(transport)
        write_storage(storage)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "leasewise-lab-head", "-f", str(HEAD_KEY)])
        head_pub = HEAD_KEY.with_suffix(".pub").read_text().strip()

        ensure_leak_guard()
        run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        run(["ip", "addr", "add", f"{GATEWAY}/{PREFIXLEN}", "dev", BRIDGE])
        run(["ip", "link", "set", BRIDGE, "up"])
        start_dhcp()

        for n in hosts:
            prepare_host_dir(n, count, transport, storage)
        make_users(count)
        HEAD_KNOWN_HOSTS.write_text("\n".join(line for n in hosts for line in known_hosts_lines(n)) + "\n")
        make_ssh_trust(count, head_pub)
        if transport == "tls":
            make_pki(count)
        holders = {}
        for n in hosts:
            make_network(n)
            shape_link(n, rate, delay)
            holders[n] = start_holder(n, storage)
        for n in hosts:
            start_daemons(n, holders[n], transport)
        wait_libvirt(hosts, transport)
        wait_ssh(hosts)
        prewarm(hosts, transport)
        inv = write_inventory(count, transport, storage)
    except BaseException:
        say("up failed; logs are in run/hostN/ (kept until `down`)")
        raise
    link = " ".join(x for x in (rate or "unshaped", f"delay {delay}" if delay else "") if x)
    say(f"up: {count} host(s) over {transport}, {storage} storage, in {time.monotonic() - t0:.1f} s; "
        f"links {link}; inventory {inv}")
    say(f"  VMs: bridge {VM_BRIDGE} on each host; DHCP {DHCP_FIRST}-{DHCP_LAST} (leases in {DNSMASQ_LEASES})")
    for n in hosts:
        say(f"  {host_name(n)}  virsh -c '{head_uri(n, transport)}'")
    return 0


# ----------------------------------------------------------------------------------------------- status

def status() -> int:
    require_root()
    nums = lab_host_numbers()
    dhcp = dnsmasq_pids()
    if not nums:
        say("status: no lab is up" + (f" (but its dnsmasq still runs: pid {dhcp})" if dhcp else ""))
        return 1
    transport = read_transport()
    ok = True
    bridge = "up" if link_exists(BRIDGE) else "MISSING"
    print(f"bridge {BRIDGE} ({GATEWAY}/{PREFIXLEN}): {bridge}; transport {transport}; storage {read_storage()}")
    ok &= bridge == "up"
    guard = leak_guard_present()
    print(f"leak guard (unreachable {SUBNET} metric {GUARD_METRIC}): {'present' if guard else 'MISSING'}")
    ok &= guard
    leases = dhcp_leases()
    print(f"dhcp dnsmasq on {BRIDGE} ({DHCP_FIRST}-{DHCP_LAST}): "
          f"{f'running (pid {dhcp[0]})' if dhcp else 'NOT RUNNING'}, {len(leases)} lease(s) in {DNSMASQ_LEASES}")
    ok &= bool(dhcp)
    for expiry, mac, ip, hostname, *_ in leases:
        until = time.strftime("%H:%M:%S", time.localtime(int(expiry))) if expiry.isdigit() else expiry
        print(f"  lease {ip:15} {mac}  {hostname}  until {until}")
    print(f"{'host':6} {'address':11} {'link':10} {'netns':6} {VM_BRIDGE:4} {'holder':7} {'libvirtd':9} "
          f"{'virtlogd':9} {'sshd':5} {'cut':4} {'libvirt':9} {'ssh':4} domains")
    for n in nums:
        hd = host_dir(n)
        ns_ok = netns(n) in existing_netns()
        br_ok = ns_ok and vm_bridge_ok(n)
        holder_ok = alive(read_pid(hd / "holder.pid"))
        lv_ok = alive(read_pid(hd / "libvirtd.pid"))
        vl_ok = alive(read_pid(hd / "virtlogd.pid"))
        sshd_ok = alive(read_pid(hd / "sshd.pid"))
        # a cut host (`lab cut`) answers nothing: it is not asked (each ask would wait out its timeout)
        cut_off = ns_ok and is_cut(n)
        domains = "-"
        libvirt_ok = False
        if ns_ok and not cut_off:
            proc = virsh(n, transport, "list", "--name", timeout=8)
            if proc is not None and proc.returncode == 0:
                libvirt_ok = True
                names = [d for d in proc.stdout.split() if d]
                domains = ",".join(names) if names else "(none)"
        ssh_ok = False
        if ns_ok and not cut_off and HEAD_KEY.exists():
            ssh_ok = quiet(ssh_cmd(n, "true", timeout=4), timeout=10)
        unasked = "(cut)" if cut_off else None
        print(f"{host_name(n):6} {host_ip(n):11} {link_shape_text(n):10} {yn(ns_ok):6} {yn(br_ok):4} "
              f"{yn(holder_ok):7} {yn(lv_ok):9} {yn(vl_ok):9} {yn(sshd_ok):5} {'YES' if cut_off else 'no':4} "
              f"{unasked or yn(libvirt_ok):9} {unasked or yn(ssh_ok):4} {domains}")
        ok &= all((ns_ok, br_ok, holder_ok, lv_ok, vl_ok, sshd_ok, libvirt_ok, ssh_ok))
    inv = RUN / "inventory.toml"
    print(f"inventory: {inv if inv.exists() else 'MISSING'}")
    return 0 if ok else 1


def yn(ok: bool) -> str:
    return "yes" if ok else "NO"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="deploy/lab/lab", description=(__doc__ or "").split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="bring the lab up (replacing one already up)")
    p_up.add_argument("-n", type=int, default=3, help="number of hosts (default 3)")
    p_up.add_argument("--transport", choices=TRANSPORTS, default=DEFAULT_TRANSPORT,
                      help=f"how libvirt reaches the hosts and they reach each other (default {DEFAULT_TRANSPORT}: "
                           f"as {LAB_USER} over libssh2; tls: certificates; tcp: no authentication)")
    p_up.add_argument("--storage", choices=STORAGES, default=DEFAULT_STORAGE,
                      help=f"the image directory {SHARED_IMAGES}: one every host shares (default "
                           f"{DEFAULT_STORAGE}, as NFS), or each host's own (local)")
    p_up.add_argument("--link-rate", default=DEFAULT_LINK_RATE, metavar="RATE",
                      help=f"each host's link rate, as tc reads it (default {DEFAULT_LINK_RATE}; none: unshaped)")
    p_up.add_argument("--link-delay", default=None, metavar="DELAY",
                      help="one-way delay added on each end of a host's link, e.g. 0.2ms (needs netem)")
    sub.add_parser("down", help="stop and remove everything")
    sub.add_parser("status", help="show each host's state")
    p_crash = sub.add_parser("crash", help="a host loses its power: all its processes killed at once")
    p_crash.add_argument("host", metavar="HOST", help="the host's name (lab1, lab2, ...)")
    p_boot = sub.add_parser("boot", help="a crashed host comes back, empty")
    p_boot.add_argument("host", metavar="HOST", help="the host's name (lab1, lab2, ...)")
    p_cut = sub.add_parser("cut", help="a host drops every packet (a partition, a firewall): nothing answers")
    p_cut.add_argument("host", metavar="HOST", help="the host's name (lab1, lab2, ...)")
    p_mend = sub.add_parser("mend", help="a cut host answers again")
    p_mend.add_argument("host", metavar="HOST", help="the host's name (lab1, lab2, ...)")
    args = ap.parse_args(argv)
    if args.cmd == "status":
        return status()
    require_root()
    lock = acquire_lab_lock(args.cmd)  # noqa: F841  (held until this process exits)
    if args.cmd == "up":
        return up(args.n, args.transport, parse_rate(args.link_rate), parse_delay(args.link_delay), args.storage)
    if args.cmd == "crash":
        crash(host_number(args.host, lab_host_numbers()))
        return 0
    if args.cmd == "boot":
        boot(host_number(args.host, lab_host_numbers()), read_transport())
        return 0
    if args.cmd in ("cut", "mend"):
        (cut if args.cmd == "cut" else mend)(host_number(args.host, lab_host_numbers()))
        return 0
    return down()


if __name__ == "__main__":
    sys.exit(main())
