"""The libvirt link's transport (drivers/libvirt/transport.py): which transport a URI uses, the URI leasewise
opens (the inventory's key and known_hosts added where libvirt honours them), the URI a peer host opens, and
what an operator must fix, named from libvirt's own error text (messages as libvirt 9.0 gives them, taken
from the lab)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from drivers.errors import DriverConfigError
from drivers.inventory import HostConfig
from drivers.libvirt.transport import known_hosts_file, link_uri, parse_link, peer_uri, what_is_missing


def query(uri: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(uri).query)


@pytest.mark.parametrize("uri, transport, address, text", [
    ("qemu+libssh2://leasewise@10.77.0.11/system", "libssh2", "10.77.0.11:22", "ssh (libssh2) leasewise@10.77.0.11:22"),
    ("qemu+ssh://root@h:2222/system", "ssh", "h:2222", "ssh (OpenSSH) root@h:2222"),
    ("qemu+tls://10.77.0.12/system?pkipath=/etc/pki/x", "tls", "10.77.0.12:16514", "tls 10.77.0.12:16514"),
    ("qemu://10.77.0.12/system", "tls", "10.77.0.12:16514", "tls 10.77.0.12:16514"),
    ("qemu+tcp://10.77.0.13/system", "tcp", "10.77.0.13:16509", "tcp 10.77.0.13:16509"),
    ("qemu:///system", "local", "", "local (qemu:///system)"),
    ("test:///default", "local", "", "local (test:///default)"),
])
def test_a_uri_says_its_transport_and_address(uri, transport, address, text):
    link = parse_link(uri)
    assert (link.transport, link.address, link.describe()) == (transport, address, text)


def test_libssh2_links_take_the_inventorys_key_and_known_hosts():
    cfg = HostConfig("h", "qemu+libssh2://leasewise@10.77.0.11/system", ssh_key="/k/id", known_hosts="/k/known")
    assert query(link_uri(cfg)) == {"keyfile": ["/k/id"], "sshauth": ["privkey"], "known_hosts": ["/k/known"]}
    assert known_hosts_file(cfg) == "/k/known"
    # the URI's own parameters win; others it has are kept
    own = HostConfig("h", "qemu+libssh2://u@h/system?known_hosts=/mine&sshauth=privkey", ssh_key="/k/id",
                     known_hosts="/k/known")
    assert query(link_uri(own)) == {"known_hosts": ["/mine"], "sshauth": ["privkey"], "keyfile": ["/k/id"]}
    assert link_uri(HostConfig("h", "qemu+libssh2://u@h/system?keyfile=/own")) == "qemu+libssh2://u@h/system?keyfile=/own"
    assert known_hosts_file(own) == "/mine"


def test_qemu_ssh_takes_the_key_but_not_known_hosts_which_openssh_would_ignore():
    cfg = HostConfig("h", "qemu+ssh://leasewise@h/system", ssh_key="/k/id", known_hosts="/k/known")
    assert query(link_uri(cfg)) == {"keyfile": ["/k/id"]}
    assert known_hosts_file(cfg).endswith("/.ssh/known_hosts")


def test_tls_and_tcp_links_are_opened_as_written():
    for uri in ("qemu+tls://h/system?pkipath=/p", "qemu+tcp://h/system", "test:///default"):
        assert link_uri(HostConfig("h", uri, ssh_key="/k/id", known_hosts="/k/known")) == uri
    assert parse_link("qemu+tls://h/system?pkipath=/p").pki_files == ("/p/cacert.pem", "/p/clientcert.pem",
                                                                      "/p/clientkey.pem")


def test_the_peer_uri_is_the_inventorys_else_the_uri_as_written():
    plain = HostConfig("h", "qemu+libssh2://leasewise@h/system", ssh_key="/head/key", known_hosts="/head/known")
    assert peer_uri(plain) == "qemu+libssh2://leasewise@h/system"   # nothing of the head node's files
    peer = "qemu+libssh2://leasewise@h/system?keyfile=/etc/libvirt/leasewise/id_ed25519"
    assert peer_uri(HostConfig("h", plain.uri, peer_uri=peer)) == peer
    with pytest.raises(DriverConfigError, match="peer_uri"):
        HostConfig("h", plain.uri, peer_uri="qemu:///system")


@pytest.mark.parametrize("error, missing", [
    ("authentication failed: authentication with private key '/k' has failed: Username/PublicKey combination "
     "invalid", "key"),
    ("SSH transport error: SSH host key for '10.77.0.12' (39:3A:70) was not accepted", "host key"),
    ("authentication failed: !!! SSH HOST KEY VERIFICATION FAILED !!!: Identity of host '10.77.0.12:22' differs "
     "from stored identity.", "host key"),
    ("Cannot recv data: Host key verification failed.: Connection reset by peer", "host key"),
    ("SSH transport error: Remote command terminated with non-zero code: 127", "helper"),
    ("SSH transport error: Remote command terminated with non-zero code: 1", "group"),
    ("Cannot read CA certificate '/p/cacert.pem': No such file or directory", "certificate"),
    ("Our own certificate /p/clientcert.pem failed validation against /p/cacert.pem: The certificate hasn't got "
     "a known issuer.", "certificate"),
    ("Unable to read TLS confirmation: Input/output error", "certificate"),
    ("authentication failed: Failed to verify peer's certificate", "certificate"),
    ("unable to connect to server at '10.77.0.12:16514': Connection refused", "port"),
])
def test_a_failed_link_names_what_is_missing(error, missing):
    assert what_is_missing(error).split(":")[0] == missing


def test_an_unrecognised_failure_names_nothing():
    assert what_is_missing("internal error: something else") is None
