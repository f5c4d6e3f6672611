"""`leasewise serve --check`: the configuration, the store, the socket's directory and group, the TLS files,
every host and every pair of hosts, checked before a server is started; nothing is served."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest


def _config(tmp_path: Path, driver: str, **serve: str) -> Path:
    path = tmp_path / "serve.toml"
    values = {"socket": str(tmp_path / "api.sock"), "socket_group": "", **serve}
    path.write_text(f'[daemon]\ndriver = "{driver}"\n[serve]\n'
                    + "".join(f'{key} = "{value}"\n' for key, value in values.items()))
    return path


@pytest.fixture
def two_hosts(cli):
    for name in ("lab1", "lab2"):
        assert cli("host", "add", name, "--uri", "test:///default", "--cpus", "8", "--memory", "16384").exit_code == 0
    return cli


def test_a_site_that_is_ready_says_so_host_by_host_and_serves_nothing(two_hosts, tmp_path, store_path):
    result = two_hosts("serve", "--check", config=_config(tmp_path, "simulated"))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"store {store_path}: 2 host(s), schema version ok",
        "host lab1 (test:///default): ok; transport: simulated (simulated driver: nothing contacted)",
        "host lab2 (test:///default): ok; transport: simulated (simulated driver: nothing contacted)",
        "host pairs: 2 checked both ways (peer link, migration port, cpu)",
        "ready to serve"]
    assert not (tmp_path / "api.sock").exists()


def test_every_problem_is_one_line_and_the_exit_is_1(cli, tmp_path):
    with socket.socket() as sock:   # (a port nothing listens on)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert cli("host", "add", "gone", "--uri", f"qemu+tcp://127.0.0.1:{port}/system", "--cpus", "2",
               "--memory", "512").exit_code == 0
    missing = tmp_path / "missing.pem"
    config = _config(tmp_path, "libvirt", socket_group="no-such-group-here", tls_cert=str(missing),
                     tls_key=str(missing), listen=f"127.0.0.1:{port}")
    result = cli("serve", "--check", config=config)
    assert result.exit_code == 1, result.output
    problems = [line for line in result.stdout.splitlines() if line.startswith("problem:")]
    assert problems[:3] == ["problem: serve.socket_group: no group named 'no-such-group-here'",
                            f"problem: serve.tls_cert: {missing} cannot be read",
                            f"problem: serve.tls_key: {missing} cannot be read"]
    assert "problem: host gone: connect" in problems
    assert "ready to serve" not in result.stdout
