"""The notices table: claimed once per (lease, key, notifier) whoever claims it, outcomes kept, migrated in."""

from __future__ import annotations

import sqlite3
from datetime import timedelta

import pytest

from orchestrator.model.lease import Lease, LeaseRequest, LeaseType
from orchestrator.model.resources import Resources
from orchestrator.state.store import MIGRATIONS, SCHEMA_VERSION, Store, apply_migrations
from tests.support.times import T0


@pytest.fixture
def path(tmp_path):
    return tmp_path / "state.sqlite"


def add_lease(store: Store, lease_id: int) -> None:
    req = LeaseRequest(type=LeaseType.BEST_EFFORT, nodes=(Resources.of(1, 1024),), duration=timedelta(hours=1),
                       submit_time=T0, user="alice")
    store.save_lease(Lease(id=lease_id, request=req))


def test_a_notice_is_claimed_once_even_by_two_processes(path):
    with Store.open(path) as one, Store.open(path) as two:
        add_lease(one, 7)
        wanted = [(7, "before_end:1h", "email"), (7, "before_end:1h", "command")]
        assert one.claim_notices(wanted, T0) == wanted
        assert two.claim_notices(wanted + [(7, "ended", "email")], T0 + timedelta(hours=1)) == [(7, "ended", "email")]
        assert one.claimed_notices([7, 8]) == set(wanted) | {(7, "ended", "email")}
        assert two.claimed_notices([8]) == set()


def test_outcomes_are_recorded_after_the_claim(path):
    with Store.open(path) as store:
        add_lease(store, 7)
        store.claim_notices([(7, "ended", "email"), (7, "ended", "command")], T0)
        assert {n.outcome for n in store.notices(7)} == {"claimed"}
        store.record_notice_outcomes({(7, "ended", "email"): "sent",
                                      (7, "ended", "command"): "failed: exit code 3"})
        got = {(n.notifier, n.outcome, n.sent_at) for n in store.notices()}
        assert got == {("email", "sent", T0), ("command", "failed: exit code 3", T0)}


def test_a_notice_names_a_stored_lease(path):
    with Store.open(path) as store, pytest.raises(sqlite3.IntegrityError):
        store.claim_notices([(99, "ended", "email")], T0)


def test_an_older_database_gets_the_table_and_keeps_its_leases(path):
    # the version just before the migration that makes the table (wherever it stands in the list)
    before = next(i for i, m in enumerate(MIGRATIONS)
                  if not callable(m) and any("CREATE TABLE notices" in statement for statement in m))
    raw = sqlite3.connect(path, isolation_level=None)
    apply_migrations(raw, upto=before)
    assert "notices" not in {r[0] for r in raw.execute("SELECT name FROM sqlite_master")}
    raw.close()
    with Store.open(path) as store:
        assert store.schema_version() == SCHEMA_VERSION
        add_lease(store, 1)
        assert store.claim_notices([(1, "ended", "email")], T0) == [(1, "ended", "email")]
