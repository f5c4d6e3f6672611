"""Preemption: how preemptable a lease is for a given preemptor; higher = preempted sooner, None = never.

A lease whose request says `preemptible = false` is never a victim, whatever the policy.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime

from orchestrator.model.lease import Lease, LeaseType
from orchestrator.model.states import LeaseState
from orchestrator.planning.policies.registry import Registry


class PreemptionPolicy(ABC):
    name = "abstract"

    def score(self, preemptor: Lease, preemptee: Lease, at: datetime) -> float | None:
        if not preemptee.preemptible or preemptee.id == preemptor.id:
            return None
        if preemptee.state is LeaseState.SUSPENDING:  # already giving way to another reservation
            return None
        return self._score(preemptor, preemptee, at)

    @abstractmethod
    def _score(self, preemptor: Lease, preemptee: Lease, at: datetime) -> float | None: ...


PREEMPTION: Registry[PreemptionPolicy] = Registry("preemption", "scheduling.policy_preemption")


@PREEMPTION.register("no-preemption")
class NoPreemption(PreemptionPolicy):
    def _score(self, preemptor: Lease, preemptee: Lease, at: datetime) -> float | None:
        return None


@PREEMPTION.register("ar-preempts-be")
class ARPreemptsBE(PreemptionPolicy):
    """An advance reservation may preempt best-effort leases; the most recently submitted goes first
    (it has waited least, so preempting it costs the least fairness) — Haizea's aging rule."""

    def _score(self, preemptor: Lease, preemptee: Lease, at: datetime) -> float | None:
        if preemptor.type is LeaseType.ADVANCE_RESERVATION and preemptee.type is LeaseType.BEST_EFFORT:
            return preemptee.submit_time.timestamp()
        return None
