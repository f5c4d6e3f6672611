"""Host properties and lease placement (issue 32) on the CLI's own store: `host add --property`, `host set`,
an inventory's `properties`, `lease submit --where/--spread/--pack/--exclusive` and a lease file's keys, the
plan and the report showing them, quotas counting exclusive hosts whole, and LWF workloads carrying them.
Bad input is one line and exit 2; a placement no host can meet is exit 3 with the reason; neither leaves
anything behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drivers.inventory import HostConfig, dump_inventory, load_inventory
from orchestrator.cli import app
from tests.support.stores import snapshot
from tests.support.text import lines


def ok(result):
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def gpu_site(cli):
    """Three hosts of 4 vCPUs / 8 GiB: a GPU host in rack r1, two plain ones in r1 and r2."""
    for name, props in (("g1", ("gpu=a100", "rack=r1")), ("c1", ("rack=r1",)), ("c2", ("rack=r2",))):
        ok(cli("host", "add", name, "--uri", "test:///default", "--cpus", "4", "--memory", "8192",
               *[arg for p in props for arg in ("--property", p)]))
    return cli


def submit(cli, *args):
    return cli("lease", "submit", "--duration", "1h", "--json", *args)


def hosts(result) -> list[str]:
    return json.loads(ok(result).stdout)["hosts"]


def test_properties_are_listed_set_and_unset(gpu_site):
    listed = {h["name"]: h["properties"] for h in json.loads(ok(gpu_site("host", "list", "--json")).stdout)}
    assert listed == {"g1": {"gpu": "a100", "rack": "r1"}, "c1": {"rack": "r1"}, "c2": {"rack": "r2"}}
    table = ok(gpu_site("host", "list")).stdout
    assert "gpu=a100, rack=r1" in table and "rack=r2" in table
    done = ok(gpu_site("host", "set", "c2", "--property", "rack=r3", "--property", "ssd=yes"))
    assert lines(done.stdout) == ["host c2 properties: rack=r3, ssd=yes"]
    done = ok(gpu_site("host", "set", "c2", "--unset", "ssd", "--unset", "rack"))
    assert lines(done.stdout) == ["host c2 properties: none"]


@pytest.mark.parametrize("args, line", [
    (("--property", "gpu"), "error: --property: must be KEY=VALUE, e.g. gpu=a100 (got 'gpu')"),
    (("--property", "-x=1"), "error: --property: '-x' is not a property name (a letter, then letters, digits, "
                             "'_', '-' or '.'; at most 63)"),
    (("--property", "gpu=a 1"), "error: --property: 'a 1' is not a property value (letters, digits, '_', '-', "
                                "'.', ':' or '+'; at most 63)"),
    (("--property", "gpu=" + "a" * 64), None),
])
def test_bad_properties_are_one_line_and_nothing_added(cli, store_path, args, line):
    result = cli("host", "add", "h1", "--uri", "test:///default", "--cpus", "1", "--memory", "512", *args)
    assert result.exit_code == 2 and len(lines(result.output)) == 1, result.output
    assert line is None or lines(result.output) == [line]
    assert not Path(store_path).exists() or "h1" not in ok(cli("host", "list")).stdout


def test_an_inventory_brings_properties_and_a_change_of_them_is_named(cli, tmp_path):
    inventory = tmp_path / "hosts.toml"
    inventory.write_text('[[host]]\nname = "g1"\nuri = "test:///default"\nproperties = { gpu = "a100", '
                         'rack = "r1" }\n\n[[host]]\nname = "c1"\nuri = "test:///default"\n')
    assert [dict(h.properties) for h in load_inventory(inventory)] == [{"gpu": "a100", "rack": "r1"}, {}]
    # (what dump_inventory writes is read back the same)
    again = tmp_path / "again.toml"
    again.write_text(dump_inventory(load_inventory(inventory)))
    assert load_inventory(again) == load_inventory(inventory)
    ok(cli("host", "import", str(inventory), "--cpus", "2", "--memory", "2048"))
    listed = {h["name"]: h["properties"] for h in json.loads(ok(cli("host", "list", "--json")).stdout)}
    assert listed == {"g1": {"gpu": "a100", "rack": "r1"}, "c1": {}}
    ok(cli("host", "set", "c1", "--property", "rack=r2"))
    result = cli("host", "import", str(inventory), "--cpus", "2", "--memory", "2048")
    assert result.exit_code == 2 and "host 'c1' is already in the store with different settings (properties " \
                                      "differ)" in result.output
    bad = tmp_path / "bad.toml"
    bad.write_text('[[host]]\nname = "x"\nuri = "test:///default"\nproperties = { gpu = "a 1" }\n')
    result = cli("host", "import", str(bad), "--cpus", "2", "--memory", "2048")
    assert result.exit_code == 2 and lines(result.output) == [
        "error: host 'x'.properties: gpu: 'a 1' is not a property value (letters, digits, '_', '-', '.', ':' "
        "or '+'; at most 63)"]


def test_where_spread_pack_and_exclusive_place_the_vms(gpu_site):
    assert hosts(submit(gpu_site, "--cpus", "1", "--memory", "512", "--where", "gpu=a100")) == ["g1"]
    assert hosts(submit(gpu_site, "--cpus", "1", "--memory", "512", "--where", "!gpu", "--where", "rack!=r2")) == ["c1"]
    assert hosts(submit(gpu_site, "--nodes", "3", "--cpus", "1", "--memory", "512", "--spread")) == ["c1", "c2", "g1"]
    # the host with the most room takes all it can: c2 (3 vCPUs free) holds the 3 VMs
    assert hosts(submit(gpu_site, "--nodes", "3", "--cpus", "1", "--memory", "512", "--pack")) == ["c2"]
    # an exclusive lease waits for a host of its own (each holds something now): the first one in r1 to empty
    answer = json.loads(ok(submit(gpu_site, "--exclusive", "--where", "rack=r1")).stdout)
    assert answer["state"] == "scheduled" and answer["hosts"] in (["c1"], ["g1"])
    first_end = max(json.loads(ok(gpu_site("lease", "show", str(i), "--json")).stdout)["lease"]["end"]
                    for i in (1, 2, 3) if answer["hosts"][0] in
                    json.loads(ok(gpu_site("lease", "show", str(i), "--json")).stdout)["lease"]["hosts"])
    assert answer["start"] >= first_end
    shown = json.loads(ok(gpu_site("lease", "show", str(answer["id"]), "--json")).stdout)
    # the VM itself the host's size (no --cpus/--memory), its placement shown
    assert (shown["request"]["cpus"], shown["request"]["memory_mib"]) == (4, 8192)
    assert shown["request"]["placement"] == {"where": ["rack=r1"], "affinity": None, "exclusive": True}
    assert "placement: rack=r1; exclusive" in ok(gpu_site("lease", "show", str(answer["id"]))).stdout
    # nothing else is planned on its host while it holds it
    later = json.loads(ok(submit(gpu_site, "--cpus", "1", "--memory", "512", "--where", "rack=r1",
                                 "--where", "!gpu" if answer["hosts"] == ["c1"] else "gpu")).stdout)
    assert later["hosts"] == answer["hosts"] and (later["end"] <= answer["start"] or later["start"] >= answer["end"])
    plan = json.loads(ok(gpu_site("plan", "--json")).stdout)
    placements = {l["id"]: l["placement"] for l in plan["leases"]}
    assert placements[1] == "gpu=a100" and placements[3] == "spread" and placements[4] == "pack"
    assert placements[answer["id"]] == "rack=r1; exclusive"


def test_a_lease_file_carries_the_placement(gpu_site, tmp_path):
    lease = tmp_path / "lease.yaml"
    lease.write_text("nodes: 2\ncpus: 1\nmemory: 512\nduration: 1h\nwhere: [rack=r1]\nspread: true\n")
    assert hosts(gpu_site("lease", "submit", str(lease), "--json")) == ["c1", "g1"]
    lease.write_text("cpus: 1\nmemory: 512\nduration: 1h\nwhere: gpu\n")   # (one constraint as a string)
    assert hosts(gpu_site("lease", "submit", str(lease), "--json")) == ["g1"]


@pytest.mark.parametrize("body, line", [
    ("where: {gpu: a100}", "where: must be a list of constraints such as gpu=a100 (got a mapping)"),
    ("where: [gpu==a]", "where: 'gpu==a': '=a' is not a property value"),
    ("where: [nvme]", "where: no host has a property 'nvme' (known: gpu, rack)"),
    ("spread: yes please", "spread: must be true or false (got 'yes please')"),
    ("spread: true\npack: true", "pack: spread and pack exclude each other: give one"),
    ("exclusive: true\npack: true", "pack: an exclusive lease's VMs each take a host of their own: it cannot be "
                                    "packed"),
])
def test_a_bad_lease_file_placement_is_one_line_exit_2(gpu_site, store_path, tmp_path, body, line):
    lease = tmp_path / "lease.yaml"
    lease.write_text(f"cpus: 1\nmemory: 512\nduration: 1h\n{body}\n")
    before = snapshot(store_path)
    result = gpu_site("lease", "submit", str(lease))
    assert result.exit_code == 2 and lines(result.stderr) == [f"error: {lease}: {line}"], result.output
    assert snapshot(store_path) == before


@pytest.mark.parametrize("args, line", [
    (("--where", "gpu=h100"), "no host meets gpu=h100"),
    (("--nodes", "4", "--spread"), "4 VMs spread need 4 hosts, and only 3 exist"),
    (("--nodes", "2", "--exclusive", "--where", "gpu"), "2 VMs exclusive need 2 hosts, and only 1 meets the "
                                                        "constraints"),
    (("--nodes", "5", "--where", "gpu", "--cpus", "1", "--memory", "512"),
     "the 1 host that meets the constraints can hold 4 of its 5 VMs, even empty"),
])
def test_what_no_host_can_meet_is_refused_exit_3(gpu_site, store_path, args, line):
    flags = list(args) if "--cpus" in args else [*args, "--cpus", "1", "--memory", "512"]
    if "--exclusive" in args:
        flags = list(args)
    before = snapshot(store_path)
    result = gpu_site("lease", "submit", "--duration", "1h", *flags)
    assert result.exit_code == 3 and lines(result.stderr) == [f"error: lease not submitted: {line}"], result.output
    assert snapshot(store_path) == before


def test_quotas_count_an_exclusive_lease_as_whole_hosts(gpu_site, store_path):
    ok(gpu_site("quota", "set", "alice", "--vcpus", "6"))
    # 1 vCPU asked, but the host it may get (4 vCPUs) is what it holds
    ok(gpu_site("lease", "submit", "--cpus", "1", "--memory", "512", "--duration", "1h", "--exclusive",
                "--user", "alice"))
    shown = json.loads(ok(gpu_site("quota", "show", "alice", "--json")).stdout)
    assert shown["quotas"][0]["holding"]["vcpus"] == 4
    before = snapshot(store_path)
    result = gpu_site("lease", "submit", "--cpus", "1", "--memory", "512", "--duration", "1h", "--exclusive",
                      "--user", "alice")
    assert result.exit_code == 3 and lines(result.stderr) == ["error: alice would hold 8 vCPUs > 6"]
    assert snapshot(store_path) == before
    ok(gpu_site("lease", "submit", "--cpus", "1", "--memory", "512", "--duration", "1h", "--user", "alice"))


def _lease(lease_id: str, attributes: str, nodes: int, duration: str) -> str:
    return (f'    <lease-request arrival="00:00:00">\n      <lease id="{lease_id}" {attributes}>\n'
            f'        <nodes><node-set numnodes="{nodes}"><res type="CPU" amount="100"/>'
            f'<res type="Memory" amount="512"/></node-set></nodes>\n'
            f'        <start/><duration time="{duration}"/>\n      </lease>\n    </lease-request>\n')


LWF = ("""<lease-workload name="placement">
  <site>
    <resource-types names="CPU Memory"/>
    <nodes>
      <node-set numnodes="1" properties="gpu=a100"><res type="CPU" amount="200"/><res type="Memory" amount="2048"/></node-set>
      <node-set numnodes="2"><res type="CPU" amount="200"/><res type="Memory" amount="2048"/></node-set>
    </nodes>
  </site>
  <lease-requests>
""" + _lease("gpu", 'where="gpu=a100"', 1, "01:00:00") + _lease("apart", 'spread="true" where="!gpu"', 2, "01:00:00")
       + _lease("whole", 'exclusive="true"', 1, "00:30:00") + """  </lease-requests>
</lease-workload>
""")


def test_a_simulated_lwf_workload_honours_the_placement(tmp_path):
    workload = tmp_path / "placement.lwf"
    workload.write_text(LWF)
    out = tmp_path / "out.json"
    result = CliRunner().invoke(app, ["simulate", str(workload), "--json", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    leases = {l["id"]: l for l in json.loads(out.read_text())["leases"]}
    first = {l: leases[l]["reservations"][0] for l in ("gpu", "apart", "whole")}
    assert first["gpu"]["hosts"] == ["host1"]
    assert sorted(first["apart"]["hosts"]) == ["host2", "host3"]
    # every host holds something at the start: the exclusive lease waits for an empty one
    assert first["whole"]["start"] == leases["gpu"]["end"] or first["whole"]["start"] > first["gpu"]["start"]
    bad = tmp_path / "bad.lwf"
    bad.write_text(LWF.replace('where="gpu=a100"', 'where="gpu=h100"'))
    result = CliRunner().invoke(app, ["simulate", str(bad), "--quiet"])
    assert result.exit_code == 2 and lines(result.output) == [f"error: {bad}: lease gpu: where: no host meets gpu=h100"]
    bad.write_text(LWF.replace('spread="true"', 'spread="maybe"'))
    result = CliRunner().invoke(app, ["simulate", str(bad), "--quiet"])
    assert result.exit_code == 2 and "spread: must be true or false (got 'maybe')" in result.output


def test_host_remove_strands_no_lease(gpu_site, store_path):
    """`host remove` (with or without --drain) is refused, with each lease's reason, while a live lease's
    placement could then be met by no remaining host: planned there, or queued behind another."""
    ok(submit(gpu_site, "--cpus", "4", "--memory", "512", "--where", "gpu"))          # 1: on g1 now
    ok(submit(gpu_site, "--cpus", "4", "--memory", "512", "--where", "gpu=a100"))     # 2: waits for g1
    ok(submit(gpu_site, "--cpus", "1", "--memory", "512", "--nodes", "3", "--spread"))  # 3: one VM a host
    before = snapshot(store_path)
    for drain in ((), ("--drain",)):
        result = gpu_site("host", "remove", "g1", *drain)
        assert result.exit_code == 3 and lines(result.stderr) == [
            "error: host 'g1' not removed: without it, no host could hold what lease(s) 1, 2, 3 ask (lease 1: no "
            "host meets gpu; lease 2: no host meets gpu=a100; lease 3: 3 VMs spread need 3 hosts, and only 2 exist); "
            "cancel them first"], result.output
        assert snapshot(store_path) == before
    for lease in ("1", "2"):
        ok(gpu_site("lease", "cancel", lease))
    result = gpu_site("host", "remove", "c2", "--drain")
    assert result.exit_code == 3 and "lease(s) 3 ask (lease 3: 3 VMs spread need 3 hosts, and only 2 exist)" \
        in result.stderr
    ok(gpu_site("lease", "cancel", "3"))
    ok(submit(gpu_site, "--cpus", "1", "--memory", "512", "--where", "rack=r1", "--start",
              "2099-01-01T10:00:00Z"))   # 4: r1 has two hosts; removing r2's takes nothing it needs
    ok(gpu_site("host", "remove", "c2"))
    assert sorted(h["name"] for h in json.loads(ok(gpu_site("host", "list", "--json")).stdout)) == ["c1", "g1"]


def test_a_drain_says_which_leases_then_wait_for_an_undrain(gpu_site, store_path):
    ok(submit(gpu_site, "--cpus", "1", "--memory", "512", "--where", "gpu=a100"))   # 1: only g1 has a GPU
    ok(submit(gpu_site, "--cpus", "1", "--memory", "512", "--where", "rack=r1"))    # 2: g1 or c1
    result = ok(gpu_site("host", "drain", "g1"))
    said = dict(line.split(": ", 1) for line in lines(result.stdout) if line.startswith("lease "))
    assert said["lease 1"].endswith("; waits until a host is undrained: no host meets gpu=a100"), said
    assert "waits" not in said.get("lease 2", "")
    ok(gpu_site("host", "undrain", "g1"))
    assert json.loads(ok(gpu_site("lease", "show", "1", "--json")).stdout)["lease"]["state"] == "scheduled"


def test_a_host_keeps_properties_live_leases_need(gpu_site, store_path):
    # lease 1 holds the GPU host for an hour; lease 2 waits for it (queued or planned after it)
    ok(submit(gpu_site, "--cpus", "4", "--memory", "512", "--where", "gpu"))
    ok(submit(gpu_site, "--cpus", "4", "--memory", "512", "--where", "gpu=a100"))
    before = snapshot(store_path)
    result = gpu_site("host", "set", "g1", "--unset", "gpu")
    assert result.exit_code == 3 and lines(result.stderr) == [
        "error: host 'g1' not changed: lease(s) 1, 2 would no longer meet their constraints there, or anywhere "
        "(cancel them, or drain the host first)"]
    assert snapshot(store_path) == before
    ok(gpu_site("host", "set", "c1", "--property", "gpu=a100"))   # another host with it: g1's may go now?
    result = gpu_site("host", "set", "g1", "--unset", "gpu")
    assert result.exit_code == 3 and "lease(s) 1, 2 would" in result.stderr   # (planned there: still needed)
    ok(gpu_site("lease", "cancel", "1"))
    ok(gpu_site("lease", "cancel", "2"))
    ok(gpu_site("host", "set", "g1", "--unset", "gpu"))
