"""What a hostile user of a shared head node sends, through every door: raw HTTP on the Unix socket and on
HTTPS (with a user's token), lease files and the command line. Each case is refused in one line naming the
field (a 4xx with the API's error body, or exit 2), in under 2 s, and the store is unchanged.

The cases are data (tests/data/hostile/): `submissions.json` (lease submissions, each with the field its
error must name) and `requests.json` (the other routes: ids, lifetimes, bodies that are not JSON); hostile
files (FIFOs, /dev/zero, nesting, encodings, gzip bombs) are made here.
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import ssl
import stat
import time
from pathlib import Path

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.service.client import Client
from tests.service.conftest import ADMINS, as_user, self_signed_certificate, start_server
from tests.support.stores import snapshot
from tests.support.text import lines

DATA = Path(__file__).resolve().parents[1] / "data" / "hostile"
SUBMISSIONS = json.loads((DATA / "submissions.json").read_text())
REQUESTS = json.loads((DATA / "requests.json").read_text())
#: the longest a refusal may take
QUICK_S = 2.0


@pytest.fixture(scope="module")
def served(tmp_path_factory, unix_users):
    """One server on a Unix socket and on HTTPS, with a token of lwalice's (not an admin)."""
    tmp = tmp_path_factory.mktemp("hostile")
    cert, key = self_signed_certificate(tmp)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    from orchestrator.service.identity import token_checker

    running = start_server(tmp, config={"serve": {"listen": f"127.0.0.1:{port}", "tls_cert": str(cert),
                                                   "tls_key": str(key), "submits_per_minute": 100000,
                                                   "submit_burst": 100000}},
                           token_check=lambda store: token_checker(store, ADMINS))
    url = running.url
    token = as_user("lwalice", lambda: Client(url).token_create(None, False, None, "hostile tests"))["token"]
    unix = httpx.Client(transport=httpx.HTTPTransport(uds=str(running.socket)), base_url="http://leasewise",
                        timeout=30)
    tls = httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=ssl.create_default_context(cafile=str(cert)),
                       timeout=30,
                       headers={"authorization": f"Bearer {token}"})
    try:
        yield running, {"unix": unix, "https": tls}
    finally:
        unix.close()
        tls.close()
        running.stop()


def _refused(response: httpx.Response, field: str | None, took: float) -> None:
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:300])
    assert took < QUICK_S, took
    error = response.json()["error"]
    message = error["message"]
    assert "\n" not in message and message.isprintable(), message
    assert error["code"] in (2, 4), error
    if field is not None:
        assert message.startswith((f"{field}: ", f"{field}[")) or f" {field}: " in message, (field, message)


@pytest.mark.parametrize("listener", ["unix", "https"])
@pytest.mark.parametrize("case", SUBMISSIONS, ids=[c["id"] for c in SUBMISSIONS])
def test_a_hostile_submission_is_one_line_and_changes_nothing(served, listener, case):
    running, clients = served
    before = snapshot(running.store_path, besides=("tokens", "meta"))
    began = time.monotonic()
    response = clients[listener].post("/v1/leases", content=json.dumps(case["body"]).encode("utf-8", "surrogatepass"),
                                      headers={"content-type": "application/json"})
    _refused(response, case["field"], time.monotonic() - began)
    assert snapshot(running.store_path, besides=("tokens", "meta")) == before


def _raw(case: dict) -> bytes | None:
    if "deep" in case:
        return ("[" * case["deep"] + "]" * case["deep"]).encode()
    if "raw" in case:
        return case["raw"].replace("@PAD@", "x" * case.get("pad", 0)).encode()
    if "body" in case:
        return json.dumps(case["body"]).encode()
    return None


@pytest.mark.parametrize("listener", ["unix", "https"])
@pytest.mark.parametrize("case", REQUESTS, ids=[c["id"] for c in REQUESTS])
def test_a_hostile_request_is_a_4xx_in_one_line(served, listener, case):
    running, clients = served
    before = snapshot(running.store_path, besides=("tokens", "meta"))
    body = _raw(case)
    headers = {"content-type": "application/json", **case.get("headers", {})}
    began = time.monotonic()
    response = clients[listener].request(case["method"], case["path"], content=body, headers=headers)
    _refused(response, case["field"], time.monotonic() - began)
    assert snapshot(running.store_path, besides=("tokens", "meta")) == before


# -- the same through lease files and the command line --------------------------------------------------------------
#: the submissions a lease file can say (a lease file names key and cloud-config files, not their text)
#: (and what YAML itself reads otherwise: a NEL is a line break to it, '1' is text a lease file may give cpus as)
FILE_CASES = [c for c in SUBMISSIONS if not {"ssh_key", "user_data"} & set(c["body"]) and c["field"] != "request"
              and c["id"] not in ("name with a lone surrogate", "name with NEL", "cpus as a string")]


@pytest.fixture
def site(tmp_path):
    store = tmp_path / "state.sqlite"
    for name in ("h1", "h2"):
        assert CliRunner().invoke(app, ["host", "add", name, "--uri", "test:///default", "--cpus", "8", "--memory",
                                        "16384", "--state", str(store)]).exit_code == 0
    return store


def _cli(*args: str):
    began = time.monotonic()
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    return result, time.monotonic() - began


def _one_line_exit_2(result, took: float, name: str | None = None) -> str:
    assert result.exit_code == 2, result.output
    assert took < QUICK_S, took
    error = lines(result.stderr)
    assert len(error) == 1 and error[0].startswith("error: "), error
    assert error[0].isprintable(), error[0]
    if name is not None:
        assert f"{name}:" in error[0], (name, error[0])
    return error[0]


@pytest.mark.parametrize("case", FILE_CASES, ids=[c["id"] for c in FILE_CASES])
def test_a_hostile_lease_file_is_one_line_and_changes_nothing(site, tmp_path, case):
    path = tmp_path / "lease.yaml"
    path.write_text(yaml.safe_dump(case["body"], allow_unicode=True))
    before = snapshot(site)
    result, took = _cli("lease", "submit", str(path), "--state", str(site))
    line = _one_line_exit_2(result, took, case["field"])
    assert line.startswith(f"error: {path}: ")
    assert snapshot(site) == before


def _fifo(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    os.mkfifo(path)
    return path


def _deep_toml(tmp_path: Path) -> Path:
    path = tmp_path / "deep.toml"
    path.write_text("[daemon]\nx = " + "[" * 5000 + "]" * 5000 + "\n")
    return path


def _bomb(tmp_path: Path) -> Path:
    path = tmp_path / "bomb.swf.gz"
    with gzip.open(path, "wb", compresslevel=9) as out:
        chunk = b"\0" * (1 << 20)
        for _ in range(1024):   # 1 GiB of zeros, about 1 MiB packed
            out.write(chunk)
    return path


#: (what, how to make the file from tmp_path, the command with {} for it, the name the line must hold)
FILES = [
    ("a lease file that is a FIFO", lambda t: _fifo(t, "lease.yaml"), ["lease", "submit", "{}"], "file"),
    ("a lease file that is /dev/zero", lambda t: Path("/dev/zero"), ["lease", "submit", "{}"], "file"),
    ("a lease file nested 50000 deep", lambda t: _write(t, "deep.yaml", "a: " + "[" * 50000 + "]" * 50000),
     ["lease", "submit", "{}"], None),
    ("a JSON lease file nested 50000 deep", lambda t: _write(t, "deep.json", "{\"a\": " + "{\"a\": " * 50000 + "1"
                                                               + "}" * 50001), ["lease", "submit", "{}"], None),
    ("a configuration that is a FIFO", lambda t: _fifo(t, "c.toml"), ["lease", "list", "--config", "{}"], None),
    ("a configuration that is /dev/zero", lambda t: Path("/dev/zero"), ["lease", "list", "--config", "{}"], None),
    ("a configuration with arrays 5000 deep", _deep_toml, ["lease", "list", "--config", "{}"], None),
    ("a workload that is a FIFO", lambda t: _fifo(t, "w.lwf"), ["simulate", "{}", "--quiet"], None),
    ("a workload that is /dev/zero", lambda t: Path("/dev/zero"), ["simulate", "{}", "--quiet"], None),
    ("an LWF in the encoding x-evil", lambda t: _write(t, "w.lwf", '<?xml version="1.0" encoding="x-evil"?>'
                                                                    "<lease-workload/>"), ["simulate", "{}", "--quiet"],
     None),
    ("an injected lease of 1e30 VMs", lambda t: _write(t, "i.lwf", "0 -1 3600 3600 1e30 1 1024 0 'x' 0\n"),
     ["simulate", "{}", "--quiet"], "numnodes"),
    ("an injected lease 1e300 s long", lambda t: _write(t, "i.lwf", "0 -1 1e300 3600 1 1 1024 0 'x' 0\n"),
     ["simulate", "{}", "--quiet"], "duration"),
    ("a gzip that unpacks to 1 GiB", _bomb, ["simulate", "{}", "--quiet"], None),
    ("an inventory that is a FIFO", lambda t: _fifo(t, "inv.toml"), ["host", "import", "{}"], None),
    ("an inventory with arrays 5000 deep", _deep_toml, ["host", "import", "{}"], None),
    ("a sweep that is a FIFO", lambda t: _fifo(t, "sweep.toml"), ["sweep", "run", "{}"], None),
    ("user-data that is a FIFO", lambda t: _lease_with(t, "user_data", _fifo(t, "init.yaml")),
     ["lease", "submit", "{}"], "user_data"),
    ("a key that is /dev/zero", lambda t: _lease_with(t, "ssh_key", Path("/dev/zero")), ["lease", "submit", "{}"],
     "ssh_key"),
]


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _lease_with(tmp_path: Path, key: str, target: Path) -> Path:
    return _write(tmp_path, "lease.yaml", yaml.safe_dump({"cpus": 1, "memory": 512, "duration": "1h",
                                                          "image": "/srv/images/d.qcow2", key: str(target)}))


@pytest.mark.parametrize(("what", "make", "command", "name"), FILES, ids=[f[0] for f in FILES])
def test_a_file_that_is_no_file_is_one_line(site, tmp_path, what, make, command, name):
    path = make(tmp_path)
    before = snapshot(site)
    args = [a.replace("{}", str(path)) for a in command]
    if args[0] in ("lease", "host"):
        args += ["--state", str(site)]
    result, took = _cli(*args)
    _one_line_exit_2(result, took, name)
    assert snapshot(site) == before


def test_a_user_data_error_quotes_nothing_of_the_file(site, tmp_path):
    secret = _write(tmp_path, "secret.txt", "password=hunter2\n")
    result, took = _cli("lease", "submit", str(_lease_with(tmp_path, "user_data", secret)), "--state", str(site))
    line = _one_line_exit_2(result, took, "user_data")
    assert "hunter2" not in result.output and "#cloud-config" in line


@pytest.mark.parametrize("text", ["", "not a database\n"])
def test_state_never_changes_a_file_that_is_not_a_store(tmp_path, text):
    """`--state` on /dev/null (as root) or on a text file refuses it before changing its mode."""
    plain = _write(tmp_path, "notes.txt", text or "x")
    plain.chmod(0o644)
    null_mode = os.stat("/dev/null").st_mode
    for target in ("/dev/null", str(plain)):
        result, took = _cli("lease", "list", "--state", target)
        _one_line_exit_2(result, took, None)
    assert os.stat("/dev/null").st_mode == null_mode
    assert stat.S_IMODE(plain.stat().st_mode) == 0o644 and plain.read_text() == (text or "x")


@pytest.mark.parametrize("args", [["lease", "cancel", "-1"], ["lease", "show"], ["run", "--log-level", "loud"],
                                  ["lease", "list", "--status"]])
def test_a_command_line_click_cannot_read_is_one_line(args):
    result, took = _cli(*args)
    _one_line_exit_2(result, took, None)


def test_text_stored_before_these_checks_prints_harmlessly(site):
    """A row written by an older leasewise (or straight into the file) with escape codes and a bidi
    override in its name: `lease list`, `lease show` and the JSON show them spelled out."""
    import sqlite3

    assert _cli("lease", "submit", "--cpus", "1", "--memory", "512", "--duration", "1h", "--name", "plain",
                "--state", str(site))[0].exit_code == 0
    with sqlite3.connect(site) as db:
        db.execute("UPDATE leases SET name = ?, reason = ?", ("\x1b[2Jevil\u202eexe.txt\nlease 9", "\x1b]0;t\x07"))
    for args in (["lease", "list"], ["lease", "show", "1"]):
        result, _ = _cli(*args, "--state", str(site))
        assert result.exit_code == 0, result.output
        assert "\x1b" not in result.output and "\u202e" not in result.output
        assert "\\x1b[2Jevil\\u202eexe.txt\\x0alease 9" in result.output.replace("\n", ""), result.output
