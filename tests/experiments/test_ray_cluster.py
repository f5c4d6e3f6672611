"""`leasewise sweep --address` on a real Ray cluster: a head and a second node started with `ray start` on this
machine (ports of their own, token authentication on, as Ray 2.52+ offers it), the token given the way Ray
documents it (RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH). The sweep's runs spread over both nodes; without
the right token the error says that the token is the cause.

Each Ray node runs in a session of its own (`ray start --block`), ended by pid when the test is done.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.support.processes import end_session, wait_until_gone

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "examples" / "sweeps" / "small.toml"

pytestmark = pytest.mark.skipif(shutil.which("ray") is None, reason="Ray is not installed (leasewise[sweep])")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_start(*args: str, env: dict[str, str], log: Path) -> subprocess.Popen:
    """`ray start ... --block` in a session of its own: the node's processes all belong to it."""
    with log.open("w") as out:
        return subprocess.Popen(["ray", "start", "--block", "--disable-usage-stats", "--num-cpus=1",
                                 "--node-ip-address=127.0.0.1", *args], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for_nodes(address: str, count: int, env: dict[str, str], timeout: float = 120) -> None:
    script = ("import sys, time, ray\nray.init(address=sys.argv[1], log_to_driver=False)\n"
              "deadline = time.monotonic() + float(sys.argv[3])\n"
              "while sum(n['Alive'] for n in ray.nodes()) < int(sys.argv[2]):\n"
              "    if time.monotonic() > deadline: sys.exit('nodes did not join')\n"
              "    time.sleep(0.5)\n")
    deadline = time.monotonic() + timeout
    while True:   # (the head's port opens a moment after `ray start` begins)
        done = subprocess.run([sys.executable, "-c", script, address, str(count), str(timeout)], env=env,
                              capture_output=True, text=True, timeout=timeout + 30)
        if done.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the Ray cluster at {address} did not come up: {done.stderr[-2000:]}")
        time.sleep(1)


def _sweep(out: Path, address: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from orchestrator.cli import main; main()", "sweep", "run",
                           str(SMALL), "--out", str(out), "--address", address, "--quiet"],
                          cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=600)


def test_a_sweep_runs_on_both_nodes_of_a_cluster_that_checks_its_token(tmp_path):
    work = Path(tempfile.mkdtemp(prefix="lwray", dir="/tmp"))   # (short: Ray's socket paths live under it)
    token = tmp_path / "ray-token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    home = tmp_path / "home"   # (no ~/.ray/auth_token of the machine's is read)
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token),
           "RAY_USAGE_STATS_ENABLED": "0"}
    port = _free_port()
    address = f"127.0.0.1:{port}"
    nodes = []
    try:
        nodes.append(_ray_start("--head", f"--port={port}", f"--temp-dir={work / 'ray'}", "--include-dashboard=false",
                                f"--ray-client-server-port={_free_port()}",
                                f"--dashboard-agent-listen-port={_free_port()}", env=env, log=tmp_path / "head.log"))
        _wait_for_nodes(address, 1, env)
        nodes.append(_ray_start(f"--address={address}", f"--dashboard-agent-listen-port={_free_port()}",
                                env=env, log=tmp_path / "node.log"))
        _wait_for_nodes(address, 2, env)

        done = _sweep(tmp_path / "out", address, env)
        assert done.returncode == 0, done.stderr[-3000:]
        ran_on = [json.loads(p.read_text())["node"] for p in sorted((tmp_path / "out" / "runs").glob("*.json"))]
        assert len(ran_on) == 6
        assert len(set(ran_on)) == 2, f"every run on one node: {ran_on}"

        # the wrong token: one line that names the token as the cause, exit code 2, nothing run
        wrong = {**env, "RAY_AUTH_TOKEN": secrets.token_hex(32)}
        refused = _sweep(tmp_path / "refused", address, wrong)
        assert refused.returncode == 2, refused.stderr[-3000:]
        message = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
        assert len(message) == 1 and "RAY_AUTH_MODE=token" in message[0] and "token" in message[0].split(":", 2)[2]
        assert not list((tmp_path / "refused").glob("runs/*.json"))
    finally:
        for node in reversed(nodes):
            end_session(node.pid)
            wait_until_gone(node.pid, timeout=20)
            node.wait(timeout=20)
        shutil.rmtree(work, ignore_errors=True)
