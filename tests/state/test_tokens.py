"""API tokens: shown once, kept as a salted hash, refused when expired (from the expiry instant on), revoked,
wrong or malformed, each in one line; a use is recorded."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.model.errors import InvalidRequest, LeasewiseError
from orchestrator.model.timeutil import UTC
from orchestrator.state.store import Store, StoreError
from orchestrator.state.tokens import InvalidToken, authenticate, create_token, list_tokens, revoke_token

T0 = datetime(2026, 1, 1, 13, 0, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path):
    with Store.open(tmp_path / "state.sqlite") as s:
        yield s


def refused(store, text, now=T0) -> str:
    with pytest.raises(InvalidToken) as exc:
        authenticate(store, text, now)
    assert isinstance(exc.value, LeasewiseError) and "\n" not in str(exc.value)
    return str(exc.value)


def test_a_token_is_text_once_and_only_a_salted_hash_in_the_store(store, tmp_path):
    text, record = create_token(store, "alice", expires=timedelta(days=90), now=T0, note="ci")
    prefix, number, secret = text.split("_", 2)
    assert (prefix, int(number)) == ("lw", record.id) and len(secret) == 43
    assert record.user == "alice" and not record.admin and record.expires_at == T0 + timedelta(days=90)
    assert record.note == "ci" and len(record.salt) == 16 and len(record.hash) == 32
    dump = "\n".join(sqlite3.connect(tmp_path / "state.sqlite").iterdump())
    assert secret not in dump and secret.encode().hex() not in dump
    other, other_record = create_token(store, "alice", expires=None, now=T0)
    assert other != text and other_record.salt != record.salt and other_record.hash != record.hash


def test_a_good_token_proves_its_user_and_its_use_is_recorded(store):
    text, record = create_token(store, "root", admin=True, expires=None, now=T0)
    seen = authenticate(store, text, T0 + timedelta(days=400))
    assert (seen.id, seen.user, seen.admin) == (record.id, "root", True)
    assert seen.last_used_at == T0 + timedelta(days=400) == store.token(record.id).last_used_at
    assert authenticate(store, f"  {text}\n", T0).id == record.id   # (as pasted)


def test_expiry_is_exact_to_the_instant(store):
    text, record = create_token(store, "alice", expires=timedelta(hours=1), now=T0)
    end = T0 + timedelta(hours=1)
    assert authenticate(store, text, end - timedelta(microseconds=1)).id == record.id
    assert refused(store, text, end) == f"token {record.id} has expired"
    assert refused(store, text, end + timedelta(days=1)) == f"token {record.id} has expired"
    assert store.token(record.id).last_used_at == end - timedelta(microseconds=1)   # a refusal is no use


def test_a_revoked_token_is_refused_at_once(store):
    text, record = create_token(store, "alice", expires=timedelta(days=1), now=T0)
    assert authenticate(store, text, T0).id == record.id
    answer = revoke_token(store, record.id, T0 + timedelta(minutes=5))
    assert answer["revoked_at"] == "2026-01-01T13:05:00Z" and answer["already"] is False
    assert refused(store, text, T0 + timedelta(minutes=6)) == f"token {record.id} was revoked"
    assert revoke_token(store, record.id, T0 + timedelta(hours=1))["already"] is True
    assert store.token(record.id).revoked_at == T0 + timedelta(minutes=5)
    with pytest.raises(StoreError, match="no token with id 99"):
        revoke_token(store, 99, T0)


def test_a_wrong_secret_with_a_right_id_is_unknown_even_when_revoked(store):
    text, record = create_token(store, "alice", expires=None, now=T0)
    good = text.split("_", 2)[2]
    wrong = ("A" if good[0] != "A" else "B") + good[1:]
    assert refused(store, f"lw_{record.id}_{wrong}") == "unknown token"
    other, other_record = create_token(store, "bob", expires=None, now=T0)
    assert refused(store, f"lw_{record.id}_{other.split('_', 2)[2]}") == "unknown token"   # bob's secret, alice's id
    revoke_token(store, record.id, T0)
    assert refused(store, f"lw_{record.id}_{wrong}") == "unknown token"   # says nothing about the token
    assert refused(store, f"lw_999_{good}") == "unknown token"
    assert store.token(record.id).last_used_at is None


@pytest.mark.parametrize("text", ["", "lw", "lw_1", "lw_1_", "lw_0_" + "a" * 43, "lw_01_" + "a" * 43,
                                  "lw_1_" + "a" * 42, "lw_1_" + "a" * 44, "xx_1_" + "a" * 43, "lw_1_" + "a" * 42 + "=",
                                  "lw_١_" + "a" * 43, "lw_" + "9" * 30 + "_" + "a" * 43,
                                  "lw_9223372036854775808_" + "a" * 43, "Bearer lw_1_" + "a" * 43])
def test_malformed_text_is_not_a_leasewise_token(store, text):
    create_token(store, "alice", expires=None, now=T0)
    assert refused(store, text) == "not a leasewise token"


def test_bad_arguments_are_refused_before_anything_is_written(store):
    for kwargs in (dict(user="@lab"), dict(user="al ice"), dict(user=""), dict(expires=timedelta(0)),
                   dict(expires=timedelta(days=4_000_000)), dict(note="two\nlines"), dict(note="x" * 201)):
        arguments = {"user": "alice", "expires": timedelta(days=1), **kwargs}
        with pytest.raises(InvalidRequest):
            create_token(store, arguments.pop("user"), now=T0, **arguments)
    assert store.tokens() == []


def test_listing_never_shows_a_hash(store):
    create_token(store, "alice", expires=None, now=T0)
    create_token(store, "bob", expires=timedelta(days=1), now=T0, admin=True)
    create_token(store, "bob", expires=None, now=T0)
    revoke_token(store, 3, T0)
    rows = list_tokens(store, now=T0 + timedelta(days=1))
    assert [(r["id"], r["user"], r["admin"], r["state"]) for r in rows] == [
        (1, "alice", False, "active"), (2, "bob", True, "expired"), (3, "bob", False, "revoked")]
    assert all("hash" not in r and "salt" not in r for r in rows)
    assert [r["id"] for r in list_tokens(store, "bob", now=T0)] == [2, 3]
    assert list_tokens(store, "bob", now=T0)[0]["state"] == "active"
