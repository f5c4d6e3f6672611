"""`leasewise quota ...` and quotas at `lease submit` / `lease extend`: set, list, show, remove; a request over
quota is one line with the figure, exit 3, nothing written; bad input is one line naming the option, exit 2."""

import json

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.state.store import Store
from tests.support.stores import snapshot
from tests.support.text import has_row, lines


def ok(result):
    assert result.exit_code == 0, result.output
    return result


def test_set_list_show_and_remove(site):
    ok(site("quota", "set", "alice", "--vcpus", "32", "--memory", "65536", "--vms", "10", "--max-duration", "24h",
            "--max-ahead", "14d"))
    result = ok(site("quota", "set", "@lab", "--vcpus", "64"))
    assert lines(result.stdout) == ["quota of @lab set: vCPUs 64, memory unlimited, VMs unlimited, "
                                    "max duration unlimited, max ahead unlimited"]
    ok(site("lease", "submit", "--nodes", "2", "--cpus", "2", "--memory", "1000", "--duration", "1h",
            "--user", "alice"))
    listed = ok(site("quota", "list"))
    assert has_row(listed.stdout, "@lab", "64", "-", "-", "-", "-")
    assert has_row(listed.stdout, "alice", "32", "65536", "10", "24h", "14d", "4 vCPUs, 2000 MiB, 2 VMs")
    rows = json.loads(ok(site("quota", "list", "--json")).stdout)
    assert [r["subject"] for r in rows] == ["@lab", "alice"]
    assert rows[1]["limits"] == {"vcpus": 32, "memory_mib": 65536, "vms": 10, "max_duration_s": 86400.0,
                                 "max_ahead_s": 1209600.0}
    assert rows[1]["holding"] == {"vcpus": 4, "memory_mib": 2000, "vms": 2}
    shown = ok(site("quota", "show", "alice"))
    assert lines(shown.stdout)[0] == "alice holds 4 vCPUs, 2000 MiB, 2 VMs"
    assert has_row(shown.stdout, "alice", "vCPUs", "32", "4", "28")
    assert has_row(shown.stdout, "alice", "max duration", "24h")
    answer = json.loads(ok(site("quota", "show", "alice", "--json")).stdout)
    assert answer["quotas"][0]["left"] == {"vcpus": 28, "memory_mib": 63536, "vms": 8}
    removed = ok(site("quota", "remove", "alice"))
    assert lines(removed.stdout) == ["quota of alice removed: unlimited now"]
    assert [r["subject"] for r in json.loads(ok(site("quota", "list", "--json")).stdout)] == ["@lab"]


def test_set_changes_only_what_is_given_and_none_removes_a_limit(site, store_path):
    ok(site("quota", "set", "alice", "--vcpus", "8", "--vms", "2"))
    ok(site("quota", "set", "alice", "--vms", "none", "--max-duration", "2h"))
    [row] = json.loads(ok(site("quota", "list", "--json")).stdout)
    assert row["limits"] == {"vcpus": 8, "memory_mib": None, "vms": None, "max_duration_s": 7200.0,
                             "max_ahead_s": None}


def test_a_request_over_quota_is_one_line_exit_3_and_leaves_nothing(site, store_path):
    ok(site("quota", "set", "alice", "--vcpus", "4"))
    ok(site("lease", "submit", "--nodes", "3", "--cpus", "1", "--memory", "512", "--duration", "1h", "--user", "alice"))
    before = snapshot(store_path)
    result = site("lease", "submit", "--nodes", "2", "--cpus", "1", "--memory", "512", "--duration", "1h",
                  "--user", "alice")
    assert result.exit_code == 3, result.output
    assert result.stdout == "" and lines(result.stderr) == ["error: alice would hold 5 vCPUs > 4"]
    assert snapshot(store_path) == before
    again = ok(site("lease", "submit", "--cpus", "1", "--memory", "512", "--duration", "1h", "--user", "alice",
                    "--json"))
    assert json.loads(again.stdout)["id"] == 2   # no id was used up by the refusal


def test_a_lease_file_over_quota_and_other_users(site, tmp_path):
    ok(site("quota", "set", "bob", "--max-duration", "24h"))
    path = tmp_path / "lease.yaml"
    path.write_text("cpus: 1\nmemory: 512\nduration: 30h\nuser: bob\n")
    result = site("lease", "submit", str(path))
    assert result.exit_code == 3 and lines(result.stderr) == ["error: lease of 30h > bob's max duration 24h"]
    path.write_text("cpus: 1\nmemory: 512\nduration: 30h\nuser: carol\n")
    ok(site("lease", "submit", str(path)))


def test_max_ahead_at_submit(site, clock):
    ok(site("quota", "set", "alice", "--max-ahead", "14d"))
    result = site("lease", "submit", "--cpus", "1", "--memory", "512", "--duration", "1h", "--user", "alice",
                  "--start", "2027-03-19T09:00:00Z")
    assert result.exit_code == 3
    assert lines(result.stderr) == ["error: start 2027-03-19T09:00:00Z is 18d ahead > alice's max ahead 14d"]
    ok(site("lease", "submit", "--cpus", "1", "--memory", "512", "--duration", "1h", "--user", "alice",
            "--start", "2027-03-15T09:00:00Z"))   # exactly 14 days


def test_an_extension_over_quota_is_exit_3_and_changes_nothing(site, store_path):
    ok(site("lease", "submit", "--cpus", "1", "--memory", "512", "--duration", "20h", "--user", "alice"))
    ok(site("quota", "set", "alice", "--max-duration", "24h"))
    ok(site("lease", "extend", "1", "--by", "4h"))
    before = snapshot(store_path)
    result = site("lease", "extend", "1", "--by", "1m")
    assert result.exit_code == 3 and lines(result.stderr) == ["error: lease of 24h1m > alice's max duration 24h"]
    assert snapshot(store_path) == before


def test_a_group_quota_counts_the_unix_groups_members(site):
    """root's primary group is root on every Linux system: a quota on @root limits root's leases."""
    ok(site("quota", "set", "@root", "--vms", "2"))
    ok(site("lease", "submit", "--nodes", "2", "--cpus", "1", "--memory", "512", "--duration", "1h", "--user", "root"))
    result = site("lease", "submit", "--cpus", "1", "--memory", "512", "--duration", "1h", "--user", "root")
    assert result.exit_code == 3 and lines(result.stderr) == ["error: group @root would hold 3 VMs > 2"]
    ok(site("lease", "submit", "--cpus", "1", "--memory", "512", "--duration", "1h", "--user", "no-such-user-x"))
    shown = json.loads(ok(site("quota", "show", "root", "--json")).stdout)
    assert "root" in shown["groups"] and shown["quotas"][0]["subject"] == "@root"
    assert shown["quotas"][0]["left"]["vms"] == 0


BAD = [
    (["quota", "set", "alice", "--vcpus", "x"], "--vcpus: must be a whole number >= 0 (got 'x')"),
    (["quota", "set", "alice", "--vcpus", "-1"], "--vcpus: must be a whole number >= 0 (got '-1')"),
    (["quota", "set", "alice", "--memory", "١٠٢٤"], "--memory: must be a whole number >= 0 (got '١٠٢٤')"),
    (["quota", "set", "alice", "--vms", "2147483648"], "--vms: is too large (got 2147483648; at most 2147483647)"),
    (["quota", "set", "alice", "--max-duration", "1 day"], "--max-duration:"),
    (["quota", "set", "alice", "--max-ahead", "-2d"], "--max-ahead: must not be negative (got '-2d')"),
    (["quota", "set", "alice"], "--vcpus, --memory, --vms, --max-duration, --max-ahead: give at least one limit"),
    (["quota", "set", "al ice", "--vms", "1"], "SUBJECT: 'al ice' is neither a user name nor @GROUP"),
    (["quota", "set", "@", "--vms", "1"], "SUBJECT:"),
    (["quota", "show", "@lab"], "USER: '@lab' is not a user name"),
    (["quota", "remove", "nobody-has-one"], "no quota for 'nobody-has-one'"),
    (["token", "create", "--expires", "0"], "--expires: must be a duration greater than zero, or never"),
    (["token", "create", "--expires", "soon"], "--expires:"),
    (["token", "create", "--expires", "2920000d"], "--expires: is too long"),
    (["token", "create", "--user", "@lab"], "--user: '@lab' is not a user name"),
    (["token", "create", "--note", "two\nlines"], "--note: must be one line"),
    (["token", "revoke", "x"], "ID: 'x' is not a token id"),
    (["token", "revoke", "0"], "ID: '0' is not a token id"),
    (["token", "revoke", "7"], "no token with id 7"),
    (["token", "list", "--user", "a b"], "--user:"),
]


@pytest.mark.parametrize(("args", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_exit_2_and_nothing_written(site, store_path, args, message):
    ok(site("quota", "set", "@lab", "--vcpus", "1"))
    before = snapshot(store_path)
    result = site(*args)
    assert result.exit_code == 2, result.output
    error = lines(result.stderr)
    assert len(error) == 1 and error[0].startswith(f"error: {message}"), error
    assert result.stdout == ""
    assert snapshot(store_path) == before


def test_reading_commands_create_no_store(cli, store_path, tmp_path):
    for args in (["quota", "list"], ["quota", "show", "alice"], ["token", "list"], ["quota", "remove", "alice"],
                 ["token", "revoke", "1"]):
        result = cli(*args)
        assert result.exit_code == 2 and lines(result.stderr) == [f"error: --state: {store_path} does not exist"]
    assert not store_path.exists()
    env = {"XDG_DATA_HOME": str(tmp_path / "xdg")}   # the default store, not there yet
    result = CliRunner().invoke(app, ["quota", "list"], env=env)
    assert result.exit_code == 0 and "no quotas" in result.stdout
    result = CliRunner().invoke(app, ["quota", "show", "alice", "--json"], env=env)
    assert result.exit_code == 0 and json.loads(result.stdout)["quotas"] == []
    result = CliRunner().invoke(app, ["token", "list", "--json"], env=env)
    assert result.exit_code == 0 and json.loads(result.stdout) == []
    assert not (tmp_path / "xdg").exists()


def test_the_store_keeps_the_quota_the_command_set(site, store_path):
    ok(site("quota", "set", "@lab", "--max-ahead", "0", "--vms", "0"))
    with Store.open(store_path) as store:
        quota = store.quota("@lab")
    assert quota.vms == 0 and quota.max_ahead.total_seconds() == 0 and quota.vcpus is None
