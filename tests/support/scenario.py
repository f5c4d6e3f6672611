"""Builders for scheduler scenario tests: a site, lease requests by minute offsets, and a checked run."""

from __future__ import annotations

from datetime import datetime, timedelta

from orchestrator.config import Config, SchedulingConfig, SimulationConfig
from orchestrator.model.lease import LeaseRequest, LeaseType
from orchestrator.model.resources import Resources
from orchestrator.planning.lease_scheduler import LeaseScheduler
from orchestrator.runtime.simulator import SimulationResult, Simulator, StepHook, check_invariants
from orchestrator.workloads import Workload
from tests.support.times import T0


def at(hhmmss: str) -> datetime:
    """`"13:29:28"` on the scenario's day."""
    h, m, *s = (int(x) for x in hhmmss.split(":"))
    return T0.replace(hour=h, minute=m, second=s[0] if s else 0)


def site(n: int, cpus: float = 1, memory: float = 1024) -> list[tuple[str, Resources]]:
    return [(f"host{i}", Resources.of(cpus, memory)) for i in range(1, n + 1)]


def request(kind: LeaseType, submit: str, minutes: float, nodes: int = 1, cpus: float = 1, memory: float = 1024,
            start: str | None = None, real_minutes: float | None = None, preemptible: bool = True) -> LeaseRequest:
    return LeaseRequest(
        type=kind,
        nodes=tuple(Resources.of(cpus, memory) for _ in range(nodes)),
        duration=timedelta(minutes=minutes),
        submit_time=at(submit),
        start=at(start) if start else None,
        real_duration=timedelta(minutes=real_minutes) if real_minutes is not None else None,
        preemptible=preemptible,
    )


def be(submit: str, minutes: float, **kw) -> LeaseRequest:
    return request(LeaseType.BEST_EFFORT, submit, minutes, **kw)


def ar(submit: str, start: str, minutes: float, **kw) -> LeaseRequest:
    kw.setdefault("preemptible", False)
    return request(LeaseType.ADVANCE_RESERVATION, submit, minutes, start=start, **kw)


def im(submit: str, minutes: float, **kw) -> LeaseRequest:
    return request(LeaseType.IMMEDIATE, submit, minutes, **kw)


def simulate(hosts, requests: list[LeaseRequest], on_step: StepHook | None = None, **scheduling) -> SimulationResult:
    """Run with the invariant checker after every step (then `on_step`, if given); defaults: no
    overheads, 32 MB/s, local."""
    defaults = dict(suspension="all", suspend_rate=32, resume_rate=32, suspendresume_exclusion="local")
    defaults.update(scheduling)
    config = Config(scheduling=SchedulingConfig(**defaults), simulation=SimulationConfig(start=T0))
    workload = Workload(requests=[(str(i), r) for i, r in enumerate(requests, start=1)], site=hosts)

    def step(sched: LeaseScheduler, now: datetime) -> None:
        check_invariants(sched, now)
        if on_step is not None:
            on_step(sched, now)

    return Simulator(workload, config, on_step=step).run()


def plan(result: SimulationResult, lease_no: int) -> list[tuple[str, str, str, list[str]]]:
    """(kind, start HH:MM:SS, end HH:MM:SS, hosts) of every reservation of the lease, in order."""
    data = {l["id"]: l for l in result.to_json()["leases"]}[str(lease_no)]
    return [(r["kind"], r["start"][11:19], r["end"][11:19], r["hosts"]) for r in data["reservations"]]


def lease(result: SimulationResult, lease_no: int) -> dict:
    return {l["id"]: l for l in result.to_json()["leases"]}[str(lease_no)]
