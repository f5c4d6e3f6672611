"""Host properties and lease placement (issue 32) through a real `leasewise serve` (simulated hosts, a Unix
socket, real Unix users) and raw JSON: `host add --property`, `host set`, `host list --json`, `lease submit
--where/--spread/--pack`; the same answers as the CLI on a store of its own, one line and exit 2 for bad
input (the service's own words, whichever client), exit 3 with the reason for what no host can meet, exit 4
for a user changing a host."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.model.errors import InvalidRequest
from orchestrator.service.client import RemoteError
from orchestrator.state.store import Store
from tests.service.conftest import as_user, make_store


def _cli(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _properties(path) -> dict[str, dict[str, str]]:
    with Store.open(path) as store:
        return {h.name: h.config.property_map for h in store.hosts()}


@pytest.fixture
def local(tmp_path):
    return make_store(tmp_path / "local" / "state.sqlite")


def test_host_properties_through_the_server_and_locally(running, local, unix_users):
    for where in (("--state", str(local)), ("--server", running.url)):
        added = _cli("host", "add", "h3", "--uri", "sim://h3", "--cpus", "4", "--memory", "8192",
                     "--property", "gpu=a100", "--property", "rack=r1", *where)
        assert added.exit_code == 0, added.output
        changed = _cli("host", "set", "h1", "--property", "rack=r2", *where)
        assert changed.exit_code == 0 and changed.stdout == "host h1 properties: rack=r2\n", changed.output
        changed = _cli("host", "set", "h3", "--property", "gpu=h100", "--unset", "rack", *where)
        assert changed.stdout == "host h3 properties: gpu=h100\n", changed.output
        listed = json.loads(_cli("host", "list", "--json", *where).stdout)
        assert {h["name"]: h["properties"] for h in listed} == {"h1": {"rack": "r2"}, "h2": {}, "h3": {"gpu": "h100"}}
    assert _properties(local) == _properties(running.store_path)

    # bad input: one line, exit 2, the same here and there; nothing changed
    for args, line in ((("host", "set", "h1", "--property", "rack"), "error: --property: must be KEY=VALUE, e.g. "
                                                                      "gpu=a100 (got 'rack')"),
                       (("host", "set", "h1", "--property", "r a=1"), None),
                       (("host", "set", "h1", "--property", "rack=r\x1b1"), None),
                       (("host", "set", "h1", "--unset", "gpu"), "error: --unset: host 'h1' has no property 'gpu'"),
                       (("host", "set", "h1"), "error: host set: give --property KEY=VALUE or --unset KEY"),
                       (("host", "add", "h4", "--uri", "sim://h4", "--cpus", "1", "--memory", "512",
                         "--property", "9x=1"), None)):
        here = _cli(*args, "--state", str(local))
        there = _cli(*args, "--server", running.url)
        assert here.exit_code == there.exit_code == 2, (args, here.output, there.output)
        assert _lines(here.output) == _lines(there.output) and len(_lines(there.output)) == 1, (args, there.output)
        assert line is None or _lines(there.output) == [line]
    assert _properties(local) == _properties(running.store_path) == {"h1": {"rack": "r2"}, "h2": {},
                                                                       "h3": {"gpu": "h100"}}

    # a user may not change hosts: exit 4, nothing changed
    code, out, err = as_user("lwalice", lambda: (lambda r: (r.exit_code, r.stdout, r.stderr))(
        _cli("host", "set", "h2", "--property", "gpu=x", "--server", running.url)))
    assert code == 4 and _lines(err) == ["error: changing hosts is for admins (lwalice is not one)"]
    assert _properties(running.store_path)["h2"] == {}


def test_raw_json_is_checked_by_the_same_words(running):
    client = running.client()
    with pytest.raises(InvalidRequest) as caught:
        client.post("/v1/hosts", {"config": {"name": "h9", "uri": "sim://h9", "properties": {"gpu": "a b"}},
                                  "cpus": 1, "memory": 512})
    assert caught.value.exit_code == 2 and str(caught.value).startswith(
        "config.properties: gpu: 'a b' is not a property value")
    with pytest.raises(InvalidRequest) as caught:
        client.post("/v1/hosts", {"config": {"name": "h9", "uri": "sim://h9", "properties": ["gpu"]},
                                  "cpus": 1, "memory": 512})
    assert caught.value.exit_code == 2 and str(caught.value).startswith("config.properties: must be a table")
    with pytest.raises(RemoteError) as caught:
        client._call("PATCH", "/v1/hosts/h1/properties", json={"set": {}, "unset": ["no such"]})
    assert caught.value.exit_code == 2 and "unset: 'no such' is not a property name" in str(caught.value)
    for body, start in (({"where": "gpu=a"}, "where: must be a list of constraints"),
                        ({"where": ["gpu=="]}, "where: 'gpu==': '=' is not a property value"),
                        ({"where": ["=a"]}, "where: '=a': '' is not a property name"),
                        ({"where": ["rack"], "spread": True, "pack": True}, "pack: spread and pack exclude each other"),
                        ({"spread": "yes"}, "spread: must be true or false"),
                        ({"where": ["gpu"]}, "where: no host has a property 'gpu' (known: none")):
        with pytest.raises(InvalidRequest) as caught:
            client.post("/v1/leases", {"cpus": 1, "memory": 512, "duration": "10m", **body})
        assert caught.value.exit_code == 2 and str(caught.value).startswith(start), (body, str(caught.value))
    with Store.open(running.store_path) as store:
        assert store.leases() == []   # nothing was written


def test_submit_with_placement_through_the_server(running, local, unix_users):
    for where in (("--state", str(local)), ("--server", running.url)):
        assert _cli("host", "set", "h1", "--property", "gpu=a100", *where).exit_code == 0
        assert _cli("host", "set", "h2", "--property", "rack=r2", *where).exit_code == 0
    submit = ("lease", "submit", "--cpus", "1", "--memory", "512", "--duration", "1h", "--json")
    for where in (("--state", str(local)), ("--server", running.url)):
        placed = _cli(*submit, "--where", "gpu=a100", *where)
        assert placed.exit_code == 0, placed.output
        assert json.loads(placed.stdout)["hosts"] == ["h1"]
        placed = _cli(*submit, "--where", "!gpu", "--where", "rack=r2", *where)
        assert json.loads(placed.stdout)["hosts"] == ["h2"]
        placed = _cli(*submit, "--nodes", "2", "--spread", *where)
        assert json.loads(placed.stdout)["hosts"] == ["h1", "h2"]
        placed = _cli(*submit, "--nodes", "3", "--pack", *where)
        assert len(json.loads(placed.stdout)["hosts"]) == 1
    # refused, with the reason: exit 3, one line, nothing stored
    for args, line in ((("--where", "gpu=h100"), "error: lease not submitted: no host meets gpu=h100"),
                       (("--nodes", "3", "--spread"), "error: lease not submitted: 3 VMs spread need 3 hosts, "
                                                      "and only 2 exist"),
                       (("--nodes", "2", "--spread", "--where", "gpu"), "error: lease not submitted: 2 VMs spread need "
                                                                        "2 hosts, and only 1 meets the constraints"),
                       (("--nodes", "9", "--where", "gpu"), "error: lease not submitted: the 1 host that meets the "
                                                            "constraints can hold 8 of its 9 VMs, even empty")):
        here = _cli(*submit, *args, "--state", str(local))
        there = _cli(*submit, *args, "--server", running.url)
        assert here.exit_code == there.exit_code == 3, (args, here.output, there.output)
        assert _lines(here.stderr) == _lines(there.stderr) == [line], (args, there.output)
    # bad input: exit 2, naming the flag
    for args, line in ((("--where", "gpu==a"), "error: --where: 'gpu==a': '=a' is not a property value"),
                       (("--where", "gpux"), "error: --where: no host has a property 'gpux' (known: gpu, rack)"),
                       (("--spread", "--pack"), "error: --pack: spread and pack exclude each other: give one")):
        here = _cli(*submit, *args, "--state", str(local))
        there = _cli(*submit, *args, "--server", running.url)
        assert here.exit_code == there.exit_code == 2, (args, here.output, there.output)
        assert _lines(here.stderr) == _lines(there.stderr) == [line], (args, there.output)
    with Store.open(running.store_path) as store:
        assert len(store.leases()) == 4
    # a host's properties may not change under a lease planned there that needs them
    refused = _cli("host", "set", "h1", "--unset", "gpu", "--server", running.url)
    assert refused.exit_code == 3 and "lease(s) 1 would no longer meet their constraints" in refused.stderr
    assert _properties(running.store_path)["h1"] == {"gpu": "a100"}
