"""MAC addresses unique beyond one store: each installation draws a random prefix (locally administered,
unicast, never libvirt's own 52:54:00, clear of the prefixes the hosts' domains use), and counts under it;
the simulated driver gives each MAC an address of its own."""

from __future__ import annotations

import itertools

import libvirt
import pytest

from drivers.inventory import HostConfig
from drivers.simulated.driver import simulated_address
from orchestrator.model.errors import InvalidRequest
from orchestrator.model.guest import LEGACY_MAC_PREFIX, GuestSetup, draw_mac_prefix, is_vm_mac
from orchestrator.runtime.host_admin import mac_prefixes_in_use
from orchestrator.state.store import Store


def test_a_drawn_prefix_is_locally_administered_unicast_and_avoids_what_it_must():
    for _ in range(200):
        prefix = draw_mac_prefix()
        assert is_vm_mac(prefix + ":00:00:00") and prefix != LEGACY_MAC_PREFIX
    # the first draws are libvirt's own prefix and one the hosts use: both passed over
    draws = iter([0x525400, 0x0A0B0C, 0x123456])
    assert draw_mac_prefix(avoid={"0a:0b:0c"}, random_bits=lambda _bits: next(draws)) == "12:34:56"
    # (the multicast bit cleared, the locally administered one set, whatever was drawn)
    assert draw_mac_prefix(random_bits=lambda _bits: 0xFFFFFF) == "fe:ff:ff"


@pytest.mark.parametrize("mac, ok", [("52:54:00:00:00:07", True), ("fe:12:34:00:00:01", True),
                                     ("00:16:3e:00:00:01", False), ("53:54:00:00:00:01", False),
                                     ("FE:12:34:00:00:01", False), ("fe:12:34:00:00", False)])
def test_a_vm_mac_is_local_and_unicast(mac, ok):
    assert is_vm_mac(mac) is ok
    if ok:
        assert GuestSetup(macs=(mac,)).macs == (mac,)
    else:
        with pytest.raises(InvalidRequest, match="macs: .* is not a locally administered unicast MAC address"):
            GuestSetup(macs=(mac,))


def test_two_stores_hand_out_macs_under_prefixes_of_their_own(tmp_path):
    with Store.open(tmp_path / "a.sqlite") as a, Store.open(tmp_path / "b.sqlite") as b:
        first, second = a.allocate_macs(2), b.allocate_macs(2)
        assert a.mac_prefix() != b.mac_prefix()   # (two draws of 22 random bits)
        assert [m[:8] for m in first] == [a.mac_prefix()] * 2 and first[1].endswith(":00:00:01")
        assert not set(first) & set(second)
        assert a.allocate_macs(1)[0].endswith(":00:00:02")
        assert a.ensure_mac_prefix({a.mac_prefix()}) == a.mac_prefix()   # (drawn once: kept)


def test_the_prefix_is_drawn_clear_of_the_hosts_domains():
    conn = libvirt.open("test:///default")
    try:
        test_domain = conn.lookupByName("test")
        used = {m[:8] for m in [el.split("'")[1] for el in test_domain.XMLDesc(0).split("<mac address=")[1:]]}
    finally:
        conn.close()
    assert used and mac_prefixes_in_use([HostConfig("a", "test:///default")], "libvirt") == used
    assert mac_prefixes_in_use([HostConfig("a", "test:///default")], "simulated") == set()


def test_the_simulated_address_of_each_mac_is_its_own():
    prefix = draw_mac_prefix()
    macs = [f"{prefix}:{n >> 16:02x}:{n >> 8 & 0xFF:02x}:{n & 0xFF:02x}"
            for n in itertools.chain(range(600), [0xFFFF, 0x10000, 0xFFFFFD])]
    addresses = [simulated_address(m) for m in macs]
    assert addresses[:2] == ["10.0.0.1", "10.0.0.2"] and addresses[-1] == "10.255.255.254"
    assert len(set(addresses)) == len(addresses)
    assert all(not a.endswith((".0.0.0", ".255.255.255")) for a in addresses)
