"""A request from fields given as text (the web form's way): keys and cloud-config are the values themselves,
checked as the CLI checks the files it reads, and nothing of the server's own is read or added."""

from __future__ import annotations

from datetime import datetime

import pytest

from orchestrator.model.errors import InvalidRequest
from orchestrator.model.lease import VMImage
from orchestrator.model.lease_fields import request_from_fields
from orchestrator.model.timeutil import UTC

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFvboQNZtwefN4L+HjRQtDNq3IXxjfcrFoSfUPrceJOx alice@laptop"
IMAGE = VMImage(disk="/srv/images/debian12.qcow2", name="debian12", size_mib=2048)


def _request(**fields):
    values = {"cpus": "1", "memory": "1024", "duration": "1h", "image": "debian12", **fields}
    return request_from_fields(values, NOW, default_user="alice", images=lambda name: IMAGE)


def test_keys_and_cloud_config_are_taken_as_text():
    request = _request(ssh_key=f"\r\n{KEY}\r\n\r\n{KEY.replace('alice@laptop', 'second')}\r\n",
                       user_data="#cloud-config\r\npackages: [htop]\r\n")
    assert request.guest.ssh_keys == (KEY, KEY.replace("alice@laptop", "second"))
    assert request.guest.user_data == "#cloud-config\npackages: [htop]\n"
    assert request.user == "alice"


def test_no_key_is_added_when_none_is_given():
    assert _request().guest.ssh_keys == ()


@pytest.mark.parametrize(("fields", "message"), [
    ({"ssh_key": "/root/.ssh/id_ed25519.pub"}, "ssh_key: line 1: unknown key type '/root/.ssh/id_ed25519.pub'"),
    ({"ssh_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n"}, "ssh_key: line 1: this is a private key"),
    ({"user_data": "packages: [htop]\n"}, "user_data: user-data: the first line must be '#cloud-config'"),
    ({"user_data": "#cloud-config\n" + "a: b\n" * 20000}, "user_data: is larger than 64 KiB"),
    ({"ssh_key": "\n".join([KEY] * 65)}, "ssh_key: at most 64 keys (got 65)"),
])
def test_bad_guest_text_names_its_field(fields, message):
    with pytest.raises(InvalidRequest) as caught:
        _request(**fields)
    assert str(caught.value).startswith(message)
