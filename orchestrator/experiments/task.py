"""One run of a sweep, as a Ray task does it: the workload from the bytes the driver shipped (so a worker on
another machine needs no copy of the files), the simulation, and its metrics, plus on request the leases as
`leasewise simulate --json` writes them. Nothing here knows about Ray."""

from __future__ import annotations

from typing import Any, Mapping

from orchestrator.config import config_from_dict
from orchestrator.runtime.simulator import Simulator
from orchestrator.workloads import workload_from_bytes
from orchestrator.workloads.files import decompressed
from orchestrator.workloads.injected import inject


def simulate_run(workload_name: str, workload_raw: bytes, inject_name: str | None, inject_raw: bytes | None,
                 config_document: Mapping[str, Any], with_leases: bool) -> dict[str, Any]:
    """`{"metrics": {...}}`, and `"simulation"` (the `simulate --json` document) when `with_leases`."""
    config = config_from_dict(config_document)
    workload = workload_from_bytes(decompressed(workload_raw, workload_name), workload_name, config,
                                   source=workload_name)
    if inject_name is not None and inject_raw is not None:
        injected = workload_from_bytes(decompressed(inject_raw, inject_name), inject_name, config, source=inject_name)
        workload = inject(workload, injected)
    result = Simulator(workload, config).run()
    outcome: dict[str, Any] = {"metrics": result.metrics}
    if with_leases:
        outcome["simulation"] = result.to_json()
    return outcome
