"""Memory images copied host to host: when a copy may go that way, and the command the source host runs
(run here in a real shell for what it does before ssh; the whole copy is a lab test)."""

from __future__ import annotations

import shlex
import subprocess

from drivers.inventory import HostConfig
from drivers.libvirt.host_to_host import NO_FILE, can_push, push_command

SRC = HostConfig("a", "qemu+tcp://10.0.0.1/system", ssh="root@10.0.0.1", peer_ssh_key="/etc/lw/copy key",
                 peer_known_hosts="/etc/lw/known_hosts")
DST = HostConfig("b", "qemu+tcp://10.0.0.2/system", ssh="copier@10.0.0.2:2222")


def test_a_copy_goes_host_to_host_only_with_the_sources_key_and_both_ssh_targets():
    assert can_push(SRC, DST)
    assert not can_push(DST, SRC)                                      # b has no key to copy with
    assert not can_push(SRC, HostConfig("c", "qemu+tcp://10.0.0.3/system"))   # c has no ssh target


def test_the_source_sends_with_its_own_key_and_pinned_host_keys_to_the_destinations_target():
    command = push_command(SRC, DST, "/save/lw 1.state", "/save/lw 1.state.part-x", 15)
    ssh = shlex.split(command.split("exec ", 1)[1])
    assert ssh[:3] == ["ssh", "-F", "none"]   # (nothing of the host's own ssh configuration)
    words = [w for w in ssh[1:-4] if w != "-T"]
    options = dict(zip(words[::2], words[1::2]))
    assert options["-i"] == "/etc/lw/copy key" and options["-p"] == "2222" and options["-l"] == "copier"
    assert {"BatchMode=yes", "StrictHostKeyChecking=yes", "UserKnownHostsFile=/etc/lw/known_hosts",
            "ConnectTimeout=15"} <= {v for k, v in zip(words[::2], words[1::2]) if k == "-o"}
    assert ssh[-4:] == ["10.0.0.2", "mkdir -p -- /save && cat > '/save/lw 1.state.part-x'", "<", "/save/lw 1.state"]


def test_the_source_says_when_the_file_is_not_there_before_any_ssh(tmp_path):
    missing = tmp_path / "gone.state"
    done = subprocess.run(["sh", "-c", push_command(SRC, DST, str(missing), f"{missing}.part", 5)],
                          capture_output=True, text=True, timeout=10)
    assert done.returncode == NO_FILE and done.stdout == ""
