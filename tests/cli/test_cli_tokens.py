"""`leasewise token ...`: the token printed once, alone on stdout, that then proves its user; the list never
shows a hash; revocation at once and again; expiry as the list sees it."""

import json
import sqlite3
from datetime import timedelta

import pytest

from orchestrator.state.store import Store
from orchestrator.state.tokens import InvalidToken, authenticate
from tests.support.text import has_row, lines
from tests.support.times import CLI_NOW


def ok(result):
    assert result.exit_code == 0, result.output
    return result


def test_create_prints_the_token_once_and_it_proves_its_user(cli, store_path):
    result = ok(cli("token", "create", "--user", "alice", "--note", "laptop"))
    [text] = lines(result.stdout)
    assert text.startswith("lw_1_") and len(text) == len("lw_1_") + 43
    assert lines(result.stderr) == [
        "token 1 for alice, expires 2027-05-30T09:00:00Z (in 90d):",
        "this is the only time it is shown: it cannot be shown again (`leasewise token revoke` it if it is lost)"]
    with Store.open(store_path) as store:
        record = authenticate(store, text, CLI_NOW)
        assert (record.user, record.admin, record.note) == ("alice", False, "laptop")
    dump = "\n".join(sqlite3.connect(store_path).iterdump())
    assert text.split("_", 2)[2] not in dump


def test_create_json_admin_and_never(cli):
    answer = json.loads(ok(cli("token", "create", "--user", "root", "--admin", "--expires", "never", "--json")).stdout)
    assert answer["token"].startswith("lw_1_") and answer["admin"] is True and answer["expires_at"] is None
    assert answer["user"] == "root" and "hash" not in answer and "salt" not in answer


def test_list_never_shows_a_hash_and_says_each_tokens_state(cli, store_path, clock):
    ok(cli("token", "create", "--user", "alice", "--expires", "1h"))
    ok(cli("token", "create", "--user", "bob", "--expires", "never", "--admin", "--note", "ci runner"))
    ok(cli("token", "create", "--user", "bob"))
    ok(cli("token", "revoke", "3"))
    clock["now"] = CLI_NOW + timedelta(hours=1)   # alice's token expires now
    listed = ok(cli("token", "list"))
    assert has_row(listed.stdout, "1", "alice", "no", "expired", "2027-03-01T09:00:00Z", "2027-03-01T10:00:00Z", "-",
                   "-")
    assert has_row(listed.stdout, "2", "bob", "yes", "active", "2027-03-01T09:00:00Z", "never", "-", "-", "ci runner")
    assert has_row(listed.stdout, "3", "bob", "no", "revoked")
    with Store.open(store_path) as store:
        hashes = [t.hash.hex() for t in store.tokens()]
    rows = json.loads(ok(cli("token", "list", "--user", "bob", "--json")).stdout)
    assert [(r["id"], r["state"]) for r in rows] == [(2, "active"), (3, "revoked")]
    for output in (listed.stdout, json.dumps(rows)):
        assert not any(h in output or h[:16] in output for h in hashes)
        assert "salt" not in output and "hash" not in output


def test_revoke_at_once_and_again(cli, store_path, clock):
    text = lines(ok(cli("token", "create", "--user", "alice")).stdout)[0]
    assert lines(ok(cli("token", "revoke", "1")).stdout) == ["token 1 (alice) revoked"]
    clock["now"] = CLI_NOW + timedelta(minutes=5)
    assert lines(ok(cli("token", "revoke", "1")).stdout) == [
        "token 1 (alice) was already revoked at 2027-03-01T09:00:00Z"]
    with Store.open(store_path) as store, pytest.raises(InvalidToken, match="^token 1 was revoked$"):
        authenticate(store, text, CLI_NOW)
