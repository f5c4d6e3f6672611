"""How the head node (this machine's root namespace) and the lab hosts reach each other's libvirtd:

- ssh (the default): libvirtd listens on no port at all. Each host has a non-root user `leasewise` in its
  `libvirt` group (its own /etc/passwd, /etc/group and /etc/shadow, in its own /etc),
  allowed in by sshd with the head node's key and with every lab host's own peer key. The links are
  libvirt's libssh2 transport (`qemu+libssh2://leasewise@...`), which checks the host key against the
  known_hosts file it is given (libvirt's `qemu+ssh` runs the OpenSSH client, which would read only
  ~/.ssh/known_hosts); the remote side runs virt-ssh-helper (or nc) as `leasewise`, which reaches
  libvirtd's socket through the group. The head node's key and known_hosts are run/id_ed25519 and
  run/known_hosts; each host's (for peer-to-peer migrations, opened by its libvirtd) are
  /etc/libvirt/leasewise/{id_ed25519,known_hosts} in its namespace (run/hostN/etc/leasewise).
- tls: a lab CA (openssl, run/pki/ca), a server certificate per host naming its address and name, and client
  certificates for the head node (run/pki/head) and for every host (its libvirtd connects to the others
  for peer-to-peer migrations); libvirtd listens on TLS only (16514), each host's files in
  /etc/libvirt/pki (run/hostN/etc/pki).
- tcp: libvirtd on TCP without authentication (16509), as the lab ran before it spoke real transports.

Live migrations go host to host over the same transport (the inventory's `peer_uri`); QEMU's data channel
is each host's `migration_uri` (tcp, ports 49152-49215).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .common import ETC_COPY, RUN, die, host_dir, host_ip, host_name, run

TRANSPORTS = ("ssh", "tls", "tcp")
DEFAULT_TRANSPORT = "ssh"
TRANSPORT_FILE = RUN / "transport"
LAB_USER = "leasewise"
#: where a host keeps its peer key and known_hosts, and its certificates (inside its namespace; /etc/libvirt
#: is run/hostN/etc)
PEER_DIR = "/etc/libvirt/leasewise"
PKI_DIR = "/etc/libvirt/pki"
#: each host's key for copying memory images straight to the other hosts (as root, leasewise's `ssh` user)
COPY_KEY = f"{PEER_DIR}/copy_ed25519"
HEAD_KEY = RUN / "id_ed25519"
HEAD_KNOWN_HOSTS = RUN / "known_hosts"
CA_DIR = RUN / "pki" / "ca"
HEAD_PKI = RUN / "pki" / "head"
TLS_DAYS = "30"
#: the first uid/gid tried for the hosts' `leasewise` user (its own group), and the libvirt group's
LAB_USER_ID = 64077


def write_transport(transport: str) -> None:
    TRANSPORT_FILE.write_text(transport + "\n")


def read_transport() -> str:
    """The transport of the lab that is up (tcp for a lab brought up before transports were recorded)."""
    try:
        text = TRANSPORT_FILE.read_text().strip()
    except OSError:
        return "tcp"
    return text if text in TRANSPORTS else "tcp"


# -- URIs ---------------------------------------------------------------------------------------------------
def head_uri(n: int, transport: str) -> str:
    """The URI the head node opens (virsh, the lab's own checks): every file it needs named in it."""
    ip = host_ip(n)
    if transport == "ssh":
        return (f"qemu+libssh2://{LAB_USER}@{ip}/system?keyfile={HEAD_KEY}&known_hosts={HEAD_KNOWN_HOSTS}"
                "&sshauth=privkey")
    if transport == "tls":
        return f"qemu+tls://{ip}/system?pkipath={HEAD_PKI}"
    return f"qemu+tcp://{ip}/system"


def inventory_uri(n: int, transport: str) -> str:
    """The inventory's `uri`: for ssh without the key and known_hosts, which leasewise adds from the host's
    `ssh_key` and `known_hosts` (one file pins both the libvirt link and leasewise's own SSH)."""
    if transport == "ssh":
        return f"qemu+libssh2://{LAB_USER}@{host_ip(n)}/system"
    return head_uri(n, transport)


def peer_uri(n: int, transport: str) -> str | None:
    """The inventory's `peer_uri`: how the other hosts' libvirtd reach host n, with their own files."""
    ip = host_ip(n)
    if transport == "ssh":
        return (f"qemu+libssh2://{LAB_USER}@{ip}/system?keyfile={PEER_DIR}/id_ed25519"
                f"&known_hosts={PEER_DIR}/known_hosts&sshauth=privkey")
    if transport == "tls":
        return f"qemu+tls://{ip}/system?pkipath={PKI_DIR}"
    return None


def libvirtd_listening(transport: str) -> str:
    """libvirtd.conf's lines for what it listens on (with `--listen` unless ssh: then only its socket)."""
    if transport == "tls":
        return (f'listen_tls = 1\nlisten_tcp = 0\ntls_port = "16514"\nkey_file = "{PKI_DIR}/serverkey.pem"\n'
                f'cert_file = "{PKI_DIR}/servercert.pem"\nca_file = "{PKI_DIR}/cacert.pem"\n'
                "tls_no_verify_certificate = 0\n")
    if transport == "tcp":
        return 'listen_tls = 0\nlisten_tcp = 1\ntcp_port = "16509"\nauth_tcp = "none"\n'
    return "listen_tls = 0\nlisten_tcp = 0\n"


# -- ssh: the user, the keys, the known hosts ------------------------------------------------------------------
def _free_id(taken: set[int]) -> int:
    for candidate in range(LAB_USER_ID, 65000):
        if candidate not in taken:
            return candidate
    die("no free uid/gid from 64077 to 64999 for the lab's leasewise user")


def make_users(count: int) -> None:
    """Each host's /etc/passwd, /etc/group and /etc/shadow (in its copy of /etc): this machine's, plus the
    `leasewise` user in the host's `libvirt` group (which libvirtd's socket belongs to), its home in
    run/hostN/home."""
    passwd = Path("/etc/passwd").read_text()
    group = Path("/etc/group").read_text()
    shadow = Path("/etc/shadow").read_text() if os.access("/etc/shadow", os.R_OK) else ""
    uids = {int(line.split(":")[2]) for line in passwd.splitlines() if line.count(":") >= 6}
    gids = {int(line.split(":")[2]) for line in group.splitlines() if line.count(":") >= 3}
    uid = _free_id(uids | gids)
    group_lines = [line for line in group.splitlines() if line.strip()]
    if not any(line.startswith("libvirt:") for line in group_lines):
        group_lines.append(f"libvirt:x:{_free_id(gids | {uid})}:")
    members = []
    for line in group_lines:
        if line.startswith("libvirt:"):
            name, pw, gid, who = line.split(":", 3)
            line = f"{name}:{pw}:{gid}:{','.join([m for m in who.split(',') if m] + [LAB_USER])}"
        members.append(line)
    members.append(f"{LAB_USER}:x:{uid}:")
    for n in range(1, count + 1):
        hd = host_dir(n)
        home = hd / "home"
        home.mkdir(exist_ok=True)
        os.chown(home, uid, uid)
        etc = hd / ETC_COPY
        (etc / "passwd").write_text(passwd.rstrip("\n") + f"\n{LAB_USER}:x:{uid}:{uid}:leasewise lab:{home}:/bin/sh\n")
        (etc / "group").write_text("\n".join(members) + "\n")
        (etc / "shadow").write_text(shadow.rstrip("\n") + f"\n{LAB_USER}:*:19000:0:99999:7:::\n")


def make_ssh_trust(count: int, head_pub: str) -> None:
    """Who may log in where: root with the head node's key (leasewise's own SSH: save images) and every other
    host's copy key (memory images copied host to host), `leasewise` with the head node's key and every
    host's peer key; every host's peer key, copy key and known_hosts."""
    peers: list[str] = []
    copiers: list[str] = []
    for n in range(1, count + 1):
        peer_dir = host_dir(n) / "etc" / "leasewise"
        peer_dir.mkdir(parents=True, exist_ok=True)
        for key, comment, keys in (("id_ed25519", f"libvirtd@{host_name(n)}", peers),
                                   (Path(COPY_KEY).name, f"root@{host_name(n)} (copies)", copiers)):
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(peer_dir / key)])
            keys.append((peer_dir / f"{key}.pub").read_text().strip())
    for n in range(1, count + 1):
        ssh = host_dir(n) / "ssh"
        others = [key for m, key in enumerate(copiers, start=1) if m != n]
        (ssh / "authorized_keys.root").write_text("\n".join([head_pub, *others]) + "\n")
        (ssh / f"authorized_keys.{LAB_USER}").write_text("\n".join([head_pub, *peers]) + "\n")
        shutil.copy2(HEAD_KNOWN_HOSTS, host_dir(n) / "etc" / "leasewise" / "known_hosts")


def known_hosts_lines(n: int) -> list[str]:
    """Host n's SSH key under its address and its name (one line each: every SSH client reads that)."""
    keytype, key = (host_dir(n) / "ssh" / "ssh_host_ed25519_key.pub").read_text().split()[:2]
    return [f"{host_ip(n)} {keytype} {key}", f"{host_name(n)} {keytype} {key}"]


# -- tls: the lab's CA and certificates --------------------------------------------------------------------------
def _certificate(name: str, directory: Path, prefix: str, usage: str, subject_alt: str | None) -> None:
    """A key and a certificate for `name` signed by the lab CA: PREFIXkey.pem and PREFIXcert.pem."""
    directory.mkdir(parents=True, exist_ok=True)
    ext = directory / f"{prefix}.ext"
    lines = ["basicConstraints = critical, CA:FALSE", "keyUsage = critical, digitalSignature, keyEncipherment",
             f"extendedKeyUsage = {usage}"]
    if subject_alt:
        lines.append(f"subjectAltName = {subject_alt}")
    ext.write_text("\n".join(lines) + "\n")
    key, csr, cert = directory / f"{prefix}key.pem", directory / f"{prefix}.csr", directory / f"{prefix}cert.pem"
    run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-subj", f"/O=leasewise lab/CN={name}", "-out", str(csr)])
    run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(CA_DIR / "cacert.pem"), "-CAkey",
         str(CA_DIR / "cakey.pem"), "-CAcreateserial", "-days", TLS_DAYS, "-extfile", str(ext),
         "-out", str(cert)])
    os.chmod(key, 0o600)
    csr.unlink()
    ext.unlink()
    shutil.copy2(CA_DIR / "cacert.pem", directory / "cacert.pem")


def make_pki(count: int) -> None:
    """The lab CA; per host a server certificate (its address and name) and a client certificate; the head
    node's client certificate."""
    CA_DIR.mkdir(parents=True, exist_ok=True)
    ext = CA_DIR / "ca.ext"
    ext.write_text("basicConstraints = critical, CA:TRUE\nkeyUsage = critical, keyCertSign, cRLSign\n"
                   "subjectKeyIdentifier = hash\n")
    run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(CA_DIR / "cakey.pem"), "-out", str(CA_DIR / "cacert.pem"), "-days", TLS_DAYS,
         "-subj", "/O=leasewise lab/CN=leasewise lab CA", "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
    ext.unlink()
    for n in range(1, count + 1):
        pki = host_dir(n) / "etc" / "pki"
        _certificate(host_name(n), pki, "server", "serverAuth", f"IP:{host_ip(n)}, DNS:{host_name(n)}")
        _certificate(f"libvirtd@{host_name(n)}", pki, "client", "clientAuth", None)
    _certificate("leasewise head node", HEAD_PKI, "client", "clientAuth", None)
