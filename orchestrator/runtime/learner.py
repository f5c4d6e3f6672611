"""The daemon learning from what it enacts: each enacted live migration, save, restore and memory-image move
becomes one observation of the model's rate for its host pair or host (`orchestrator.planning.learning` has
the policy, `orchestrator.state.learned` keeps the result), which the next plan uses.

What one operation says, in the planner's own terms (rates of guest memory, fixed costs left out):

* a live migration: the rate at which the pre-copy model would have predicted its measured time
  (`equivalent_rate` of the bandwidth it was predicted at, `live_migration_overhead` left out);
* a save or a restore: the VM's memory over its time less `enactment_overhead`;
* a memory-image move between two hosts: the VM's memory over its time.

Failed, aborted and forced migrations, and operations that took no measurable time, teach nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from orchestrator.config import SchedulingConfig
from orchestrator.planning.learning import LIVE_MIGRATE, MOVE, RESUME, SUSPEND, equivalent_rate, pair_key
from orchestrator.planning.overheads import Overheads
from orchestrator.state.learned import record_observations
from orchestrator.state.store import Store

log = logging.getLogger(__name__)


def _number(detail: Mapping[str, Any], key: str) -> float | None:
    value = detail.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def observation(detail: Mapping[str, Any], memory_mib: float | None, scheduling: SchedulingConfig,
                overheads: Overheads) -> tuple[str, str, float, float] | None:
    """(kind, key, prior, observed rate) that an "enacted" event's detail teaches, or None. `memory_mib`:
    the VM's memory (None: unknown); `overheads`: the planner's, for the rates planned with so far."""
    operation = detail.get("operation")
    if operation == "migrate":
        src, dst = detail.get("src"), detail.get("dst")
        measured, predicted = _number(detail, "total_seconds"), _number(detail, "predicted_seconds")
        if (detail.get("outcome") != "completed" or not isinstance(src, str) or not isinstance(dst, str)
                or measured is None or predicted is None):
            return None
        used = _number(detail, "model_bandwidth_mib_s") or scheduling.live_bandwidth
        rate = equivalent_rate(used, predicted, measured, scheduling.live_migration_overhead.total_seconds())
        return None if rate is None else (LIVE_MIGRATE, pair_key(src, dst), overheads.live_bandwidth(src, dst), rate)
    wall = _number(detail, "wall_seconds")
    if memory_mib is None or wall is None:
        return None
    if operation in ("suspend", "resume"):
        host = detail.get("host")
        seconds = wall - scheduling.enactment_overhead.total_seconds()
        if not isinstance(host, str) or seconds <= 0:
            return None
        kind = SUSPEND if operation == "suspend" else RESUME
        prior = scheduling.suspend_rate if kind == SUSPEND else scheduling.resume_rate
        return kind, host, overheads.rates.host(kind, host, prior), memory_mib / seconds
    if operation == "move_state":
        src, dst = detail.get("src"), detail.get("dst")
        if not isinstance(src, str) or not isinstance(dst, str) or src == dst or wall <= 0:
            return None
        prior = overheads.rates.move(src, dst, scheduling.migration_bandwidth)
        return MOVE, pair_key(src, dst), prior, memory_mib / wall
    return None


def learn(store: Store, scheduling: SchedulingConfig, overheads: Overheads,
          enacted: Iterable[tuple[Mapping[str, Any], float | None, datetime]]) -> int:
    """Fold what "enacted" events teach into the stored rates, in one write however many they are. Each
    event is (its detail, the VM's memory in MiB or None when unknown, when); returns how many taught
    something."""
    found = [(*lesson, at) for detail, memory_mib, at in enacted
             if (lesson := observation(detail, memory_mib, scheduling, overheads)) is not None]
    for (kind, key, _, observed, _), estimate in zip(found, record_observations(store, found), strict=True):
        log.info("learned %s %s: observed %.1f MiB/s, estimate %.1f MiB/s (%d observations)", kind, key, observed,
                 estimate.rate_mib_s, estimate.samples)
    return len(found)
