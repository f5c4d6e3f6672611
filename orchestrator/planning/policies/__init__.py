"""Scheduling policies as small named classes, found by name through one registry per extension point.

The extension points follow the Kubernetes scheduler framework: admission decides whether a lease is
considered at all; host selection *scores* hosts (after the mapper *filters* those that cannot hold a
node); preemption scores which running leases may give way, most preemptable first. A config names the
policy (`policy_host_selection = "pack"`) and `create_*` builds it; unknown names list the known ones.
"""

from __future__ import annotations

from orchestrator.planning.policies.admission import ADMISSION, AdmissionPolicy
from orchestrator.planning.policies.host_selection import (
    HOST_SELECTION,
    HostSelectionPolicy,
)
from orchestrator.planning.policies.preemption import PREEMPTION, PreemptionPolicy
from orchestrator.planning.policies.registry import Registry

__all__ = [
    "ADMISSION", "AdmissionPolicy", "HOST_SELECTION", "HostSelectionPolicy", "PREEMPTION",
    "PreemptionPolicy", "Registry",
]
