"""Placement (issue 32) as properties of whole simulations on small random sites and workloads: a lease's
`where` constraints hold on every host any of its VMs is planned on, a spread lease never has two VMs on one
host, and both stay true through preemption (suspension, resumption on other hosts with `migration =
yes`), live-migration evacuations, and a drain of a random host in the middle of the run. The invariant
checker of every simulation (no host over capacity) runs after every step too."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from orchestrator.config import Config, SchedulingConfig, SimulationConfig
from orchestrator.model.errors import InvalidRequest
from orchestrator.model.lease import Lease, LeaseRequest, LeaseType
from orchestrator.model.placement import Placement, parse_constraint, refusal
from orchestrator.model.reservations import ReservationKind
from orchestrator.model.resources import Resources
from orchestrator.model.states import LeaseState
from orchestrator.planning.lease_scheduler import LeaseScheduler
from orchestrator.runtime.simulator import Simulator, check_invariants
from orchestrator.workloads import Workload
from tests.support.times import T0

CONSTRAINTS = ("gpu=a", "gpu!=a", "gpu", "!gpu", "rack=r1", "rack!=r2")
CAPACITIES = (Resources.of(1, 1024), Resources.of(2, 2048), Resources.of(4, 4096))


@st.composite
def sites(draw):
    n = draw(st.integers(2, 6))
    hosts = [(f"h{i}", draw(st.sampled_from(CAPACITIES))) for i in range(n)]
    properties = {}
    for name, _ in hosts:
        props = {"rack": draw(st.sampled_from(("r1", "r2")))}
        gpu = draw(st.sampled_from((None, "a", "b")))
        if gpu is not None:
            props["gpu"] = gpu
        properties[name] = props
    return hosts, properties


def eligible(placement: Placement | None, properties: dict[str, dict[str, str]]) -> list[str]:
    return [h for h, p in properties.items() if placement is None or placement.admits(p)]


@st.composite
def workloads(draw, hosts, properties):
    requests = []
    for i in range(draw(st.integers(1, 14))):
        where = tuple(parse_constraint(c, "where") for c in draw(st.lists(st.sampled_from(CONSTRAINTS), max_size=2,
                                                                           unique=True)))
        affinity = draw(st.sampled_from((None, "spread", "pack", "exclusive")))
        exclusive = affinity == "exclusive"
        affinity = None if exclusive else affinity
        placement = (Placement(where=where, affinity=affinity, exclusive=exclusive)
                     if where or affinity or exclusive else None)
        allowed = eligible(placement, properties)
        if not allowed:
            continue
        cpus = draw(st.sampled_from((1, 2)))
        memory = draw(st.sampled_from((512, 1024)))
        fitting = [h for h, cap in hosts if h in allowed and cap.cpu >= cpus * 100 and cap.memory >= memory]
        if not fitting:
            continue
        nodes = draw(st.integers(1, min(3, len(fitting)) if placement is not None and placement.spread else 3))
        submit = T0 + timedelta(minutes=draw(st.integers(0, 120)))
        if draw(st.booleans()):
            kind, start, preemptible = LeaseType.BEST_EFFORT, None, True
        else:
            kind, preemptible = LeaseType.ADVANCE_RESERVATION, False
            start = submit + timedelta(minutes=draw(st.integers(1, 90)))
        try:
            requests.append((str(i), LeaseRequest(
                type=kind, nodes=(Resources.of(cpus, memory),) * nodes,
                duration=timedelta(minutes=draw(st.integers(5, 120))), submit_time=submit, start=start,
                preemptible=preemptible, placement=placement)))
        except InvalidRequest:
            continue
    return sorted(requests, key=lambda r: r[1].submit_time)


def check_placement(sched: LeaseScheduler, properties: dict[str, dict[str, str]], now: datetime) -> None:
    """Every VM of every lease with a placement, in every part of its plan, on hosts that keep to it; an
    exclusive lease's hosts shared with no other lease while it holds them."""
    for lease in sched.leases.values():
        placement = lease.request.placement
        if placement is None:
            continue
        for vm in lease.reservations:
            for part in vm.all_parts():
                hosts = list(part.nodes.values()) + [dst for _, dst in part.transfers.values()]
                for host in hosts:
                    assert placement.admits(properties[host]), (
                        f"{now}: lease {lease.id} ({placement.describe()}) on {host} {properties[host]} "
                        f"in its {part.kind.value} reservation")
                if placement.spread and part.kind in (ReservationKind.VM, ReservationKind.SUSPEND,
                                                      ReservationKind.RESUME, ReservationKind.SHUTDOWN):
                    where = list(part.nodes.values())
                    assert len(set(where)) == len(where), f"{now}: spread lease {lease.id} doubled up: {part.nodes}"
            # a continuation after a live migration: the whole lease again, spread across hosts
        if placement.exclusive:
            for vm in lease.reservations:
                for part in vm.all_parts():
                    if part not in sched.table or part.kind is ReservationKind.MIGRATE:
                        continue   # (done, or moving its memory images before it resumes)
                    for other in sched.table.reservations_overlapping(part.start, part.end, set(part.resources)):
                        if other.lease_id != lease.id and other.kind is not ReservationKind.UNAVAILABLE and \
                                other.start < part.end and part.start < other.end:
                            shared = set(other.resources) & set(part.resources)
                            assert not shared, (f"{now}: exclusive lease {lease.id} shares {shared} with lease "
                                                f"{other.lease_id} ({part.kind.value} {part.start}-{part.end}, "
                                                f"{other.kind.value} {other.start}-{other.end})")
        if placement.spread:
            for vm in lease.open_vms():
                where = list(vm.nodes.values())
                assert len(set(where)) == len(where), f"{now}: spread lease {lease.id} doubled up: {vm.nodes}"


@st.composite
def runs(draw):
    hosts, properties = draw(sites())
    requests = draw(workloads(hosts, properties))
    migration = draw(st.sampled_from(("yes", "no")))
    # (a drain only where memory images may move: with `no`, a lease suspended there could never resume)
    drain_at = draw(st.none() | st.integers(1, 8)) if migration == "yes" else None
    drained = draw(st.sampled_from([h for h, _ in hosts]))
    if drain_at is not None:   # (only leases the other hosts can hold: a drain must leave them somewhere to go)
        rest = {h: p for h, p in properties.items() if h != drained}
        capacity = dict(hosts)
        requests = [(i, r) for i, r in requests
                    if refusal(r.placement or Placement(), r.nodes, rest, capacity) is None]
    scheduling = dict(suspension="all", suspend_rate=32, resume_rate=32, suspendresume_exclusion="local",
                      migration=migration,
                      policy_host_selection=draw(st.sampled_from(("greedy", "pack", "spread"))),
                      preemption_mode=draw(st.sampled_from(("migrate-first", "suspend-only"))))
    return hosts, properties, requests, drain_at, drained, scheduling


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(run=runs())
def test_constraints_and_spread_hold_through_every_move(run):
    hosts, properties, requests, drain_at, drained, scheduling = run
    note(repr(run))
    config = Config(scheduling=SchedulingConfig(**scheduling), simulation=SimulationConfig(start=T0))
    workload = Workload(requests=requests, site=hosts, properties=properties)
    steps = [0]

    def step(sched: LeaseScheduler, now: datetime) -> None:
        check_invariants(sched, now)
        check_placement(sched, properties, now)
        steps[0] += 1
        if steps[0] == drain_at and drained not in sched.blocks:
            plan = sched.drain(drained, now + timedelta(minutes=10), now)
            if plan.leases:
                event("drain moved leases")
            # (a move the drain begins now is this instant's work: handled here, as the daemon's next step at
            # the same instant would; the simulator, which never drains, takes one step per instant)
            for _ in range(100):
                if not sched.process_events(now):
                    break
                sched.schedule(now)
            check_invariants(sched, now)
            check_placement(sched, properties, now)

    result = Simulator(workload, config, on_step=step).run()
    counters = result.scheduler.counters
    for name in ("suspensions", "migrations", "image_migrations"):
        if counters.get(name):
            event(name)
    for lease in result.leases:
        assert lease.state in (LeaseState.DONE, LeaseState.REJECTED, LeaseState.CANCELLED), lease


def test_a_spread_lease_is_placed_one_vm_per_host_and_a_pack_lease_on_the_fewest():
    hosts = [(f"h{i}", Resources.of(4, 4096)) for i in range(4)]
    spread = LeaseRequest(type=LeaseType.BEST_EFFORT, nodes=(Resources.of(1, 512),) * 3,
                          duration=timedelta(minutes=30), submit_time=T0, placement=Placement(affinity="spread"))
    pack = LeaseRequest(type=LeaseType.BEST_EFFORT, nodes=(Resources.of(1, 512),) * 4,
                        duration=timedelta(minutes=30), submit_time=T0, placement=Placement(affinity="pack"))
    config = Config(scheduling=SchedulingConfig(policy_host_selection="spread"), simulation=SimulationConfig(start=T0))
    result = Simulator(Workload(requests=[("1", spread), ("2", pack)], site=hosts), config).run()
    first, second = sorted(result.leases, key=lambda l: l.id)
    assert len(set(first.reservations[0].nodes.values())) == 3
    # the site's policy spreads; the lease's pack puts all four VMs on one host (one had a VM of lease 1 only)
    assert len(set(second.reservations[0].nodes.values())) == 1


def test_constraints_keep_a_lease_off_hosts_that_fail_them_even_when_those_are_free():
    hosts = [("big", Resources.of(8, 8192)), ("gpu", Resources.of(2, 2048))]
    properties = {"big": {}, "gpu": {"gpu": "a100"}}
    requests = [(str(i), LeaseRequest(type=LeaseType.BEST_EFFORT, nodes=(Resources.of(2, 2048),),
                                      duration=timedelta(minutes=30), submit_time=T0,
                                      placement=Placement(where=(parse_constraint("gpu=a100", "where"),))))
                for i in range(2)]
    config = Config(scheduling=SchedulingConfig(), simulation=SimulationConfig(start=T0))
    result = Simulator(Workload(requests=requests, site=hosts, properties=properties), config).run()
    leases: list[Lease] = sorted(result.leases, key=lambda l: l.id)
    assert [set(l.reservations[0].nodes.values()) for l in leases] == [{"gpu"}, {"gpu"}]
    # one after the other on the one host that has a GPU, while the big host stays empty
    assert leases[1].start_time == leases[0].end_time
