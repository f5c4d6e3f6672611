"""The rates the daemon learned from the operations it enacted, kept in the store beside the calibration.

Stored in the store's meta table under `LEARNED_KEY`, as `calibrate` stores its fits under
`CALIBRATION_KEY`: `{kind: {key: {"rate_mib_s", "samples", "rejected", "at", "source"}}}`, where kind is one
of `orchestrator.planning.learning.KINDS`, key an ordered pair (`a>b`) or a host, and source says what
measured it last ("operations", or "host check" for a seed). The cluster reads them into its planner at
every step (`learned_rates`).

A deliberate `calibrate` campaign takes precedence: storing its fit forgets what was learned of the kinds
it measured (`forget`), so the next plan uses the campaign's values, and learning goes on from them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from orchestrator.model.timeutil import iso
from orchestrator.planning.learning import (
    DEFAULT_POLICY,
    KINDS,
    LearnedRates,
    LearningPolicy,
    RateEstimate,
    observe,
)

if TYPE_CHECKING:  # pragma: no cover
    from orchestrator.state.store import Store

#: the store meta key holding every learned rate
LEARNED_KEY = "learned_rates"
FROM_OPERATIONS = "operations"
FROM_HOST_CHECK = "host check"


def _estimate(value: Any) -> RateEstimate | None:
    """A stored entry, or None when it is not one (a hand-edited or damaged store: it is learned again)."""
    if not isinstance(value, Mapping):
        return None
    rate, samples, rejected = value.get("rate_mib_s"), value.get("samples", 0), value.get("rejected", 0)
    if (isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0
            or not isinstance(samples, int) or not isinstance(rejected, int) or samples < 0 or rejected < 0):
        return None
    return RateEstimate(float(rate), samples, rejected)


def load_learned(store: "Store") -> dict[str, dict[str, dict[str, Any]]]:
    """Everything stored under `LEARNED_KEY`, entries as stored ({} when nothing was learned)."""
    value = store.get_meta(LEARNED_KEY)
    if not isinstance(value, Mapping):
        return {}
    return {kind: dict(value[kind]) for kind in KINDS if isinstance(value.get(kind), Mapping)}


def learned_estimates(store: "Store") -> dict[str, dict[str, RateEstimate]]:
    out: dict[str, dict[str, RateEstimate]] = {}
    for kind, entries in load_learned(store).items():
        usable = {key: e for key, e in ((k, _estimate(v)) for k, v in entries.items()) if e is not None}
        if usable:
            out[kind] = usable
    return out


def learned_rates(store: "Store") -> LearnedRates:
    """What the planner reads."""
    return LearnedRates.of(learned_estimates(store))


def record_observation(store: "Store", kind: str, key: str, prior_mib_s: float, observed_mib_s: float,
                       at: datetime, policy: LearningPolicy = DEFAULT_POLICY) -> RateEstimate:
    """Fold one observation into the stored estimate of `kind` for `key` (`prior_mib_s`: the rate planned
    with until now, where nothing is learned yet), in one transaction; returns the new estimate."""
    return record_observations(store, [(kind, key, prior_mib_s, observed_mib_s, at)], policy)[0]


def record_observations(store: "Store", observations: Iterable[tuple[str, str, float, float, datetime]],
                        policy: LearningPolicy = DEFAULT_POLICY) -> list[RateEstimate]:
    """Fold observations (kind, key, prior, observed rate, when), in their order, into the stored
    estimates, in one transaction that reads and writes the stored rates once: on a site of a thousand hosts
    they are a thousand entries, and a step that enacted fifty suspensions would otherwise rewrite them
    fifty times under the scheduler's lock. Returns the new estimates, in the same order."""
    observations = list(observations)
    for kind, *_ in observations:
        if kind not in KINDS:
            raise ValueError(f"unknown kind of learned rate {kind!r}")
    if not observations:
        return []
    estimates = []
    with store.transaction():
        stored = load_learned(store)
        for kind, key, prior_mib_s, observed_mib_s, at in observations:
            entries = stored.setdefault(kind, {})
            estimate = observe(_estimate(entries.get(key)), prior_mib_s, observed_mib_s, policy)
            entries[key] = {**estimate.to_json(), "at": iso(at), "source": FROM_OPERATIONS}
            estimates.append(estimate)
        store.set_meta(LEARNED_KEY, stored)
    return estimates


def seed(store: "Store", kind: str, key: str, rate_mib_s: float, at: datetime) -> bool:
    """A first value measured by `host check`, kept unless operations already taught one (a seed rests on
    no operation: the first one measured may move it by the policy's full step). True when stored."""
    estimate = RateEstimate(rate_mib_s)
    with store.transaction():
        stored = load_learned(store)
        entries = stored.setdefault(kind, {})
        current = entries.get(key)
        if isinstance(current, Mapping) and current.get("source") == FROM_OPERATIONS and _estimate(current):
            return False
        entries[key] = {**estimate.to_json(), "at": iso(at), "source": FROM_HOST_CHECK}
        store.set_meta(LEARNED_KEY, stored)
    return True


def forget(store: "Store", kinds: tuple[str, ...]) -> None:
    """Drop what was learned of `kinds` (a calibration of them was just stored and takes precedence)."""
    with store.transaction():
        stored = load_learned(store)
        for kind in kinds:
            stored.pop(kind, None)
        store.set_meta(LEARNED_KEY, stored)
