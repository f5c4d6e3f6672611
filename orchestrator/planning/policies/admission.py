"""Admission: is a lease considered at all? Answers None (accept) or the reason for rejecting it."""

from __future__ import annotations

from abc import ABC, abstractmethod

from orchestrator.model.lease import Lease, LeaseType
from orchestrator.planning.policies.registry import Registry


class AdmissionPolicy(ABC):
    name = "abstract"

    @abstractmethod
    def reject_reason(self, lease: Lease) -> str | None:
        """None to accept the lease, else a one-line reason."""


ADMISSION: Registry[AdmissionPolicy] = Registry("admission", "scheduling.policy_admission")


@ADMISSION.register("accept-all")
class AcceptAll(AdmissionPolicy):
    def reject_reason(self, lease: Lease) -> str | None:
        return None


@ADMISSION.register("no-ars")
class NoAdvanceReservations(AdmissionPolicy):
    """For sites that only run best-effort and immediate work."""

    def reject_reason(self, lease: Lease) -> str | None:
        if lease.type is LeaseType.ADVANCE_RESERVATION:
            return "advance reservations are not accepted (policy_admission = no-ars)"
        return None
