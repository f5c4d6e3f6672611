"""The store's quotas and API tokens: round trips, replacing and removing, revocation, and an older database
migrated forward with its data kept."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from orchestrator.model.quota import Quota
from orchestrator.model.timeutil import UTC
from orchestrator.state.store import SCHEMA_VERSION, Store, StoreError, apply_migrations

T0 = datetime(2026, 1, 1, 13, 0, tzinfo=UTC)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state.sqlite"


@pytest.fixture
def store(path: Path):
    with Store.open(path) as s:
        yield s


# -- quotas ------------------------------------------------------------------------------------------------------
def test_quotas_round_trip_with_unlimited_limits_as_none(store):
    alice = Quota(vcpus=32, memory_mib=65536, vms=10, max_duration=timedelta(hours=24), max_ahead=timedelta(days=14))
    lab = Quota(vcpus=64, max_duration=timedelta(seconds=90.5))
    store.set_quota("alice", alice, at=T0)
    store.set_quota("@lab", lab, at=T0)
    assert store.quota("alice") == alice
    assert store.quota("@lab") == lab and store.quota("@lab").memory_mib is None
    assert store.quota("bob") is None
    assert store.quotas() == {"@lab": lab, "alice": alice}
    assert store.quota_set_at("alice") == T0


def test_setting_a_quota_again_replaces_every_limit(store):
    store.set_quota("alice", Quota(vcpus=32, vms=10), at=T0)
    later = T0 + timedelta(hours=1)
    store.set_quota("alice", Quota(vms=0), at=later.astimezone(timezone(timedelta(hours=2))))
    assert store.quota("alice") == Quota(vms=0)
    assert store.quota_set_at("alice") == later and store.quota_set_at("alice").tzinfo is UTC


def test_removing_a_quota_and_a_missing_one(store):
    store.set_quota("@lab", Quota(vcpus=1), at=T0)
    store.remove_quota("@lab")
    assert store.quotas() == {}
    with pytest.raises(StoreError, match="no quota for '@lab'"):
        store.remove_quota("@lab")


def test_a_bad_subject_is_refused_before_anything_is_written(store):
    with pytest.raises(Exception, match="neither a user name nor @GROUP"):
        store.set_quota("al ice", Quota(vcpus=1), at=T0)
    assert store.quotas() == {}


def test_a_quota_written_around_the_checks_is_one_line_naming_it(path, store):
    with sqlite3.connect(path) as raw:   # (the CHECK constraints refuse negatives; a float vcpus slips by)
        raw.execute("INSERT INTO quotas (subject, vcpus, set_at) VALUES ('eve', 1.5, '2026-01-01T13:00:00.000000Z')")
    with pytest.raises(StoreError) as exc:
        store.quotas()
    assert "'eve'" in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(sqlite3.IntegrityError):
        with sqlite3.connect(path) as raw:
            raw.execute("INSERT INTO quotas (subject, vms, set_at) VALUES ('x', -1, 't')")


# -- tokens ------------------------------------------------------------------------------------------------------
def test_tokens_round_trip_without_showing_the_hash(store):
    a = store.add_token("alice", salt=b"s" * 16, hash=b"h" * 32, created_at=T0, expires_at=T0 + timedelta(days=90),
                        note="laptop")
    b = store.add_token("root", salt=b"t" * 16, hash=b"i" * 32, created_at=T0, admin=True)
    assert (a.id, b.id) == (1, 2)
    assert store.token(1) == a and a.user == "alice" and not a.admin and a.note == "laptop"
    assert a.salt == b"s" * 16 and a.hash == b"h" * 32
    assert a.expires_at == T0 + timedelta(days=90) and a.created_at.tzinfo is UTC
    assert b.admin and b.expires_at is None and b.revoked_at is None and b.last_used_at is None
    assert store.tokens() == [a, b] and store.tokens(user="root") == [b] and store.tokens(user="nobody") == []
    assert store.token(3) is None
    shown = repr(a) + str(a.public())
    assert "hhhh" not in shown and "ssss" not in shown
    assert a.public() == {"id": 1, "user": "alice", "admin": False, "created_at": "2026-01-01T13:00:00Z",
                          "expires_at": "2026-04-01T13:00:00Z", "revoked_at": None, "last_used_at": None,
                          "note": "laptop"}


def test_revoking_keeps_the_first_time_and_touching_records_use(store):
    token = store.add_token("alice", salt=b"s", hash=b"h", created_at=T0)
    store.touch_token(token.id, T0 + timedelta(minutes=1))
    store.touch_token(token.id, T0 + timedelta(minutes=2))
    assert store.token(token.id).last_used_at == T0 + timedelta(minutes=2)
    assert store.revoke_token(token.id, T0 + timedelta(hours=1)).revoked_at == T0 + timedelta(hours=1)
    assert store.revoke_token(token.id, T0 + timedelta(hours=2)).revoked_at == T0 + timedelta(hours=1)
    for call in (store.revoke_token, store.touch_token):
        with pytest.raises(StoreError, match="no token with id 9"):
            call(9, T0)


def test_a_token_with_a_naive_time_or_no_user_is_refused_and_nothing_written(store):
    with pytest.raises(Exception):
        store.add_token("alice", salt=b"s", hash=b"h", created_at=datetime(2026, 1, 1))   # naive: refused
    with pytest.raises(StoreError):
        store.add_token("", salt=b"s", hash=b"h", created_at=T0)
    assert store.tokens() == []


# -- migration ---------------------------------------------------------------------------------------------------
def test_a_version_5_database_gains_quotas_and_tokens_with_its_data_kept(path):
    raw = sqlite3.connect(path, isolation_level=None)
    apply_migrations(raw, upto=5)
    tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "quotas" not in tables and "tokens" not in tables   # really the old schema
    raw.execute("INSERT INTO hosts (name, uri, domain_type, state_dir, shared_storage, vcpus, memory_mib, "
                "available, added_at) VALUES ('h1', 'test:///default', 'kvm', '/var/save', '[]', 4, 8192, 1, "
                "'2026-01-01T12:00:00.000000Z')")
    raw.close()
    with Store.open(path) as s:
        assert s.schema_version() == SCHEMA_VERSION >= 6
        assert [h.name for h in s.hosts()] == ["h1"]
        assert s.quotas() == {} and s.tokens() == []
        s.set_quota("@lab", Quota(vms=3), at=T0)
        token = s.add_token("alice", salt=b"s", hash=b"h", created_at=T0)
    with Store.open(path) as s:   # opened again: nothing migrated twice
        assert s.quota("@lab") == Quota(vms=3) and s.token(token.id) == token
