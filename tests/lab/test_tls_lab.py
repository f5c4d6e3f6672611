"""The lab over tls (deploy/lab/lab up --transport tls), brought up for this module and back over the tier's
transport afterwards: a lab CA, a server certificate per host, client certificates for the head node and for
every host (their libvirtd connect to each other for peer-to-peer migrations), libvirtd on TLS only. A small
part of the driver contract runs over it (start, stop, suspend and resume across hosts, a live migration peer
to peer, the host and pair checks), and `host check` names a missing certificate, on the head node's side and
on a source host's."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

import pytest

from tests.lab import test_lab_contract
from tests.lab.labkit import LAB_TRANSPORT, host_check, imported_site

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module", autouse=True)
def over_tls(lab):
    """The lab over tls for this module's tests (each brings it up anew: about as long as `lab up` takes)."""
    lab.up("tls")
    yield lab
    lab.up(LAB_TRANSPORT)


def moved_away(path: Path):
    """`path` renamed away for a `with` block, back afterwards."""

    class Away:
        def __enter__(self):
            path.rename(path.with_suffix(".away"))

        def __exit__(self, *exc):
            path.with_suffix(".away").rename(path)

    return Away()


def test_tls_lab_listens_on_tls_only_and_wants_a_client_certificate(lab):
    head_pki = lab.run_dir / "pki" / "head"
    for n, host in enumerate(lab.hosts, start=1):
        ip = f"10.77.0.{10 + n}"
        assert host.uri == f"qemu+tls://{ip}/system?pkipath={head_pki}"
        assert host.peer_uri == f"qemu+tls://{ip}/system?pkipath=/etc/libvirt/pki"
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((ip, 16509), timeout=5).close()
    # a client without a certificate: the handshake may complete, libvirtd then refuses it
    context = ssl.create_default_context(cafile=str(head_pki / "cacert.pem"))
    with socket.create_connection(("10.77.0.11", 16514), timeout=5) as raw:
        try:
            with context.wrap_socket(raw, server_hostname="10.77.0.11") as tls:
                assert tls.recv(1) != b"\x01"
        except (ssl.SSLError, ConnectionResetError):
            pass


def test_tls_host_check_passes_and_names_a_missing_certificate(lab, tmp_path):
    common = imported_site(lab, tmp_path)
    target, source = lab.names[1], lab.names[0]
    code, checked = host_check(common, target)
    assert code == 0, checked
    found = {r["check"]: (r["status"], r["detail"]) for r in checked["checks"]}
    assert found["transport"][0] == "PASS" and "tls 10.77.0.12:16514" in found["transport"][1]
    assert "server CN=lab2 verified" in found["transport"][1] and found["host key"][0] == "SKIP"
    assert all(p["status"] == "PASS" for p in checked["pairs"]), checked["pairs"]
    # the head node's client certificate is missing
    head_cert = lab.run_dir / "pki" / "head" / "clientcert.pem"
    with moved_away(head_cert):
        code, checked = host_check(common, target)
    found = {r["check"]: (r["status"], r["detail"]) for r in checked["checks"]}
    assert code == 1 and found["transport"][0] == "FAIL"
    assert f"certificate: the client certificate {head_cert} is missing" in found["transport"][1], found
    # the source host's client certificate is missing: its libvirtd cannot reach the destination's
    with moved_away(lab.host_dir(source) / "etc" / "pki" / "clientcert.pem"):
        code, checked = host_check(common, target)
    between = {(p["source"], p["destination"], p["check"]): (p["status"], p["detail"]) for p in checked["pairs"]}
    status, detail = between[(source, target, "peer link")]
    assert code == 1 and status == "FAIL" and "certificate" in detail and f"on {source}'s side" in detail, detail
    assert between[(lab.names[2], target, "peer link")][0] == "PASS"


class TestTlsContract(test_lab_contract.TestTransportSshContract):
    """The driver contract's core over qemu+tls (the rest of it runs over ssh)."""

    # (left out over tls: covered over ssh, and each costs a guest boot or a timeout)
    test_a_host_added_while_it_runs_takes_vms_and_a_removed_one_is_gone = None
    test_migration_timeout_abort_leaves_the_vm_on_the_source = None
    test_migration_timeout_force_completes_on_the_destination = None
    test_measured_dirty_rate_is_a_rate_or_none_and_needs_the_vm = None
    test_resume_without_an_image_fails_and_creates_nothing = None
    test_a_removed_image_cannot_be_resumed_and_removing_it_again_is_harmless = None
    test_stop_on_a_given_host_stops_only_the_copy_there = None
    test_starting_an_existing_name_raises_vm_already_exists = None
    test_unknown_host_raises_unknown_host = None
    test_operations_on_an_unknown_vm_raise_vm_not_found = None
    test_migrating_to_its_own_host_fails_and_keeps_it_running = None
