"""Quotas as the commands and the server manage them: set, remove, list and show, on a `Store`.

Plain functions that take a store and return JSON data, so `leasewise quota ...` and the HTTP API give the
same answers; the checks themselves are `orchestrator.model.quota`'s, and `Cluster` applies them to every
submission and extension. What a subject holds is read from the store's live leases at the time of asking.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from orchestrator.model.errors import InvalidRequest
from orchestrator.model.quota import (
    NOTHING,
    Holding,
    Quota,
    applicable,
    check_subject,
    check_user,
    group_holding,
    holdings_by_user,
    is_group,
)
from orchestrator.model.states import FINAL_STATES, LeaseState
from orchestrator.model.timeutil import as_utc, iso
from orchestrator.state.groups import unix_groups
from orchestrator.state.store import Store

#: the limits a quota has, in the order they are checked and shown
LIMITS = ("vcpus", "memory_mib", "vms", "max_duration", "max_ahead")
_AMOUNTS = ("vcpus", "memory_mib", "vms")
_LIVE = tuple(s for s in LeaseState if s not in FINAL_STATES)

GroupsOf = Callable[[str], frozenset[str]]


# -- JSON ------------------------------------------------------------------------------------------------------
def limits_json(quota: Quota) -> dict[str, Any]:
    """The limits as JSON data: counts as they are, durations in seconds; null is unlimited."""
    return {"vcpus": quota.vcpus, "memory_mib": quota.memory_mib, "vms": quota.vms,
            "max_duration_s": _seconds(quota.max_duration), "max_ahead_s": _seconds(quota.max_ahead)}


def holding_json(holding: Holding) -> dict[str, int]:
    return {"vcpus": holding.vcpus, "memory_mib": holding.memory_mib, "vms": holding.vms}


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


# -- changing ----------------------------------------------------------------------------------------------------
def set_quota(store: Store, subject: str, changes: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """Change the limits named in `changes` of `subject`'s quota (a value None removes that limit) and keep
    the others; a subject without a quota starts unlimited. Returns the quota as set."""
    check_subject(subject)
    unknown = sorted(set(changes) - set(LIMITS))
    if unknown:
        raise InvalidRequest(unknown[0], f"is not a quota limit (one of {', '.join(LIMITS)})")
    if not changes:
        raise InvalidRequest("quota", f"give at least one limit to set ({', '.join(LIMITS)})")
    at = as_utc(now, "now")
    with store.transaction():
        quota = replace(store.quota(subject) or Quota(), **changes)
        store.set_quota(subject, quota, at=at)
    return {"subject": subject, "limits": limits_json(quota), "set_at": iso(at)}


def remove_quota(store: Store, subject: str) -> None:
    """Forget `subject`'s quota (it is unlimited again); `StoreError` (no quota for 'alice') if it has none."""
    check_subject(subject)
    store.remove_quota(subject)


# -- reading -----------------------------------------------------------------------------------------------------
def current_holdings(store: Store) -> dict[str, Holding]:
    """user -> what their live leases in the store hold."""
    with store.snapshot():
        return holdings_by_user(store.leases(state=_LIVE))


def _held(subject: str, held: Mapping[str, Holding], groups_of: GroupsOf) -> Holding:
    return group_holding(subject[1:], held, groups_of) if is_group(subject) else held.get(subject, NOTHING)


def list_quotas(store: Store, groups_of: GroupsOf = unix_groups) -> list[dict[str, Any]]:
    """Every quota, by subject, with what its subject holds now (a group: all its users together)."""
    with store.snapshot():
        quotas = store.quotas()
        set_at = {s: store.quota_set_at(s) for s in quotas}
        held = current_holdings(store)
    return [{"subject": subject, "limits": limits_json(quota), "holding": holding_json(_held(subject, held, groups_of)),
             "set_at": iso(set_at[subject])} for subject, quota in quotas.items()]


def _left(quota: Quota, holding: Holding) -> dict[str, int | None]:
    """What may still be taken under each amount limit (0 when at or over it; null: unlimited)."""
    return {name: None if getattr(quota, name) is None else max(0, getattr(quota, name) - getattr(holding, name))
            for name in _AMOUNTS}


def _over(quota: Quota, holding: Holding) -> list[str]:
    """The amount limits already exceeded (a quota lowered below what is held)."""
    return [name for name in _AMOUNTS if getattr(quota, name) is not None and getattr(holding, name) > getattr(quota, name)]


def show_quota(store: Store, user: str, groups_of: GroupsOf = unix_groups) -> dict[str, Any]:
    """`user`'s own quota and each of its groups' that applies, each with what its subject holds and what is
    left; `quotas` is empty when nothing limits the user."""
    check_user(user)
    with store.snapshot():
        quotas = store.quotas()
        held = current_holdings(store)
    rows = []
    for subject, quota in applicable(user, quotas, groups_of):
        holding = _held(subject, held, groups_of)
        rows.append({"subject": subject, "limits": limits_json(quota), "holding": holding_json(holding),
                     "left": _left(quota, holding), "over": _over(quota, holding)})
    return {"user": user, "groups": sorted(groups_of(user)), "holding": holding_json(held.get(user, NOTHING)),
            "quotas": rows}

