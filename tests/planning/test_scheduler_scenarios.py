"""Scheduler scenarios with exact expected times, each run with the invariant checker after every step."""

from __future__ import annotations

import pytest

from orchestrator.runtime.simulator import check_invariants
from tests.support.scenario import ar, at, be, im, lease, plan, simulate, site

H1, H2, H3, H4 = "host1", "host2", "host3", "host4"


def test_reference_preemption_scenario():
    """The scenario of record: a running best-effort lease is suspended for an AR and resumed after it."""
    result = simulate(site(4), [be("13:00", 60), ar("13:15", "13:30", 30, nodes=4)])
    assert plan(result, 1) == [
        ("vm", "13:00:00", "13:29:28", [H1]),
        ("suspend", "13:29:28", "13:30:00", [H1]),
        ("resume", "14:00:00", "14:00:32", [H1]),
        ("vm", "14:00:32", "14:31:04", [H1]),
        ("shutdown", "14:31:04", "14:31:04", [H1]),
    ]
    assert plan(result, 2) == [
        ("vm", "13:30:00", "14:00:00", [H1, H2, H3, H4]),
        ("shutdown", "14:00:00", "14:00:00", [H1, H2, H3, H4]),
    ]
    assert lease(result, 1)["end"] == "2026-01-01T14:31:04Z"
    assert lease(result, 1)["state"] == "done"
    assert result.metrics["suspensions"] == 1
    assert result.metrics["ar_accepted"] == 1


def test_requeue_when_suspension_is_off():
    """With suspension 'none' the preempted lease is killed and requeued: its first 15 minutes are lost."""
    result = simulate(site(4), [be("13:00", 60), ar("13:15", "13:30", 30, nodes=4)], suspension="none")
    assert plan(result, 1) == [
        ("vm", "13:00:00", "13:15:00", [H1]),
        ("vm", "14:00:00", "15:00:00", [H1]),
        ("shutdown", "15:00:00", "15:00:00", [H1]),
    ]
    assert result.metrics["requeues"] == 1
    assert result.metrics["suspensions"] == 0


def test_premature_end_replans_future_lease_earlier():
    """Lease 1 asks 1 h but ends after 30 min; lease 2, planned for 14:00, is moved to 13:30."""
    result = simulate(site(1), [be("13:00", 60, real_minutes=30), be("13:00", 60)])
    assert plan(result, 1) == [("vm", "13:00:00", "13:30:00", [H1])]
    assert lease(result, 1)["end"] == "2026-01-01T13:30:00Z"
    assert plan(result, 2) == [("vm", "13:30:00", "14:30:00", [H1]), ("shutdown", "14:30:00", "14:30:00", [H1])]
    assert result.metrics["premature_ends"] == 1


def test_best_effort_runs_before_future_reservation_then_suspends():
    """A future AR leaves a 30 min gap: a 2 h best-effort lease runs in it, is suspended, resumes after."""
    result = simulate(site(2), [ar("13:00", "14:00", 60, nodes=2), be("13:00", 30, nodes=2),
                                be("13:00", 120, nodes=2)])
    assert plan(result, 2) == [("vm", "13:00:00", "13:30:00", [H1, H2]),
                               ("shutdown", "13:30:00", "13:30:00", [H1, H2])]
    # local exclusion: each host saves its own VM, both at once
    assert plan(result, 3) == [
        ("vm", "13:30:00", "13:59:28", [H1, H2]),
        ("suspend", "13:59:28", "14:00:00", [H1, H2]),
        ("resume", "15:00:00", "15:00:32", [H1, H2]),
        ("vm", "15:00:32", "16:31:04", [H1, H2]),
        ("shutdown", "16:31:04", "16:31:04", [H1, H2]),
    ]


def test_global_exclusion_serialises_suspend_and_resume_across_the_lease():
    result = simulate(site(2), [ar("13:00", "14:00", 60, nodes=2), be("13:00", 30, nodes=2),
                                be("13:00", 120, nodes=2)], suspendresume_exclusion="global")
    assert plan(result, 3) == [
        ("vm", "13:30:00", "13:58:56", [H1, H2]),
        ("suspend", "13:58:56", "13:59:28", [H2]),
        ("suspend", "13:59:28", "14:00:00", [H1]),
        ("resume", "15:00:00", "15:00:32", [H1]),
        ("resume", "15:00:32", "15:01:04", [H2]),
        ("vm", "15:01:04", "16:32:08", [H1, H2]),
        ("shutdown", "16:32:08", "16:32:08", [H1, H2]),
    ]


def test_local_exclusion_serialises_vms_on_the_same_host():
    """Two VMs on one host are saved one after the other (local exclusion), then restored in order."""
    result = simulate(site(1, cpus=2, memory=2048), [ar("13:00", "14:00", 60, nodes=1, memory=2048),
                                                     be("13:00", 120, nodes=2)])
    assert plan(result, 2) == [
        ("vm", "13:00:00", "13:58:56", [H1]),
        ("suspend", "13:58:56", "13:59:28", [H1]),
        ("suspend", "13:59:28", "14:00:00", [H1]),
        ("resume", "15:00:00", "15:00:32", [H1]),
        ("resume", "15:00:32", "15:01:04", [H1]),
        ("vm", "15:01:04", "16:02:08", [H1]),
        ("shutdown", "16:02:08", "16:02:08", [H1]),
    ]


def test_slot_shorter_than_threshold_is_not_used():
    """A gap of 60 s before an AR is under the threshold (32 s suspend x 2): the lease waits for the AR."""
    result = simulate(site(1), [ar("13:00", "13:01", 60), be("13:00", 30)])
    assert plan(result, 2) == [("vm", "14:01:00", "14:31:00", [H1]), ("shutdown", "14:31:00", "14:31:00", [H1])]


@pytest.mark.parametrize("preemption_mode", ["suspend-only", "migrate-first"])
def test_best_effort_starts_on_hosts_free_long_enough_then_suspends(preemption_mode):
    """The reference scheduler's own case. AR 1 needs two hosts from 13:01:30, AR 2 two others from
    13:30. Lease 3 (2 nodes, 1 h) cannot run on AR 1's hosts (90 s is under its threshold) but can on AR
    2's until 13:30: it starts at once, is suspended for AR 2, its images move to AR 1's hosts and it
    resumes there when AR 1 ends. (It once waited until 14:01:30: the mapper offered only AR 1's hosts,
    first in its order, and the start was refused as too short.) With migrate-first nothing changes: at
    13:29 no host is free to live-migrate to."""
    result = simulate(site(4), [ar("13:00", "13:01:30", 60, nodes=2), ar("13:00", "13:30", 60, nodes=2),
                                be("13:00", 60, nodes=2)], preemption_mode=preemption_mode)
    assert plan(result, 1)[0] == ("vm", "13:01:30", "14:01:30", [H1, H2])
    assert plan(result, 2)[0] == ("vm", "13:30:00", "14:30:00", [H3, H4])
    assert plan(result, 3) == [
        ("vm", "13:00:00", "13:29:28", [H3, H4]),
        ("suspend", "13:29:28", "13:30:00", [H3, H4]),
        ("migrate", "13:30:00", "13:31:22", [H1, H2, H3, H4]),
        ("resume", "14:01:30", "14:02:02", [H1, H2]),
        ("vm", "14:02:02", "14:32:34", [H1, H2]),
        ("shutdown", "14:32:34", "14:32:34", [H1, H2]),
    ]
    assert lease(result, 3)["start"] == "2026-01-01T13:00:00Z"
    assert lease(result, 3)["end"] == "2026-01-01T14:32:34Z"
    assert result.metrics["suspensions"] == 1 and result.metrics["image_migrations"] == 1


def test_serial_suspension_requeues_multi_node_leases():
    result = simulate(site(2), [be("13:00", 60, nodes=2), ar("13:15", "13:30", 30, nodes=2)], suspension="serial")
    assert plan(result, 1) == [
        ("vm", "13:00:00", "13:15:00", [H1, H2]),
        ("vm", "14:00:00", "15:00:00", [H1, H2]),
        ("shutdown", "15:00:00", "15:00:00", [H1, H2]),
    ]


def test_immediate_lease_rejected_when_busy_accepted_when_free():
    result = simulate(site(1), [be("13:00", 60), im("13:10", 10), im("14:10", 10)])
    assert lease(result, 2)["state"] == "rejected"
    assert plan(result, 3) == [("vm", "14:10:00", "14:20:00", [H1]), ("shutdown", "14:20:00", "14:20:00", [H1])]
    assert result.metrics["im_rejected"] == 1 and result.metrics["im_accepted"] == 1


def test_advance_reservation_rejected_when_capacity_is_not_preemptible():
    result = simulate(site(1), [ar("13:00", "13:30", 60), ar("13:05", "14:30", 30), ar("13:06", "14:15", 60)])
    assert lease(result, 2)["state"] == "done"
    assert lease(result, 3)["state"] == "rejected"
    assert "not enough resources" in lease(result, 3)["reason"]
    assert result.metrics["ar_rejected"] == 1


def test_non_preemptible_best_effort_lease_blocks_an_ar():
    result = simulate(site(1), [be("13:00", 60, preemptible=False), ar("13:15", "13:30", 30)])
    assert lease(result, 2)["state"] == "rejected"
    assert plan(result, 1) == [("vm", "13:00:00", "14:00:00", [H1]), ("shutdown", "14:00:00", "14:00:00", [H1])]


def test_ar_preempts_the_most_recently_submitted_lease_first():
    """Two best-effort leases on two hosts; an AR for one host preempts the younger one."""
    result = simulate(site(2), [be("13:00", 60), be("13:01", 60), ar("13:10", "13:30", 30)])
    assert plan(result, 1)[0] == ("vm", "13:00:00", "14:00:00", [H1])
    assert plan(result, 2)[:2] == [("vm", "13:01:00", "13:29:28", [H2]), ("suspend", "13:29:28", "13:30:00", [H2])]
    assert plan(result, 3)[0] == ("vm", "13:30:00", "14:00:00", [H2])


@pytest.mark.parametrize("backfilling, third_start", [("off", "15:00:00"), ("aggressive", "13:02:00"),
                                                       ("conservative", "13:02:00"), (3, "13:02:00")])
def test_backfilling_lets_a_small_lease_run_ahead(backfilling, third_start):
    """Lease 2 (2 nodes) must wait for lease 1; lease 3 (1 node, 30 min) fits in the hole on host2 unless
    backfilling is off (strict first come, first served)."""
    result = simulate(site(2), [be("13:00", 60), be("13:01", 60, nodes=2), be("13:02", 30)],
                      backfilling=backfilling)
    assert plan(result, 2)[0] == ("vm", "14:00:00", "15:00:00", [H1, H2])
    assert plan(result, 3)[0][1] == third_start


def test_conservative_backfilling_reserves_every_queued_lease():
    """Off/aggressive leave the second blocked lease without a plan; conservative plans it right away."""
    reqs = [be("13:00", 60, nodes=2), be("13:01", 60, nodes=2), be("13:02", 60, nodes=2)]
    aggressive = simulate(site(2), reqs, backfilling="aggressive")
    conservative = simulate(site(2), reqs, backfilling="conservative")
    assert plan(aggressive, 3)[0] == plan(conservative, 3)[0] == ("vm", "15:00:00", "16:00:00", [H1, H2])
    state_at_1302 = lambda res: [s for t, s in res.scheduler.leases[3].history if t <= at("13:02")][-1]
    assert str(state_at_1302(aggressive)) == "queued"
    assert str(state_at_1302(conservative)) == "scheduled"


def test_suspended_lease_migrates_when_resumed_on_another_host():
    """Lease 1 is suspended on host1 for AR 2; AR 3 then holds host1 after 14:00, so lease 1 resumes on
    host2 and its memory image (1024 MB at 12.5 MB/s = 82 s) moves there first."""
    result = simulate(site(2), [be("13:00", 120), ar("13:05", "13:30", 30, nodes=2), ar("13:10", "14:00", 60)])
    assert plan(result, 1) == [
        ("vm", "13:00:00", "13:29:28", [H1]),
        ("suspend", "13:29:28", "13:30:00", [H1]),
        ("migrate", "13:30:00", "13:31:22", [H1, H2]),
        ("resume", "14:00:00", "14:00:32", [H2]),
        ("vm", "14:00:32", "15:31:04", [H2]),
        ("shutdown", "15:31:04", "15:31:04", [H2]),
    ]
    assert result.metrics["image_migrations"] == 1


def test_no_migration_keeps_a_suspended_lease_on_its_hosts():
    result = simulate(site(2), [be("13:00", 120), ar("13:05", "13:30", 30, nodes=2), ar("13:10", "14:00", 60)],
                      migration="no")
    assert plan(result, 1)[2:] == [
        ("resume", "15:00:00", "15:00:32", [H1]),
        ("vm", "15:00:32", "16:31:04", [H1]),
        ("shutdown", "16:31:04", "16:31:04", [H1]),
    ]


def test_migration_without_transfer_is_instant():
    result = simulate(site(2), [be("13:00", 120), ar("13:05", "13:30", 30, nodes=2), ar("13:10", "14:00", 60)],
                      migration="yes-notransfer")
    assert plan(result, 1)[2:4] == [("migrate", "13:30:00", "13:30:00", [H1, H2]),
                                    ("resume", "14:00:00", "14:00:32", [H2])]


def test_shutdown_time_and_enactment_overhead_are_reserved():
    """Shutdown 10 s + 5 s per node for 2 nodes: the VM stops 20 s before the AR's end."""
    result = simulate(site(2), [ar("13:00", "13:30", 30, nodes=2)], shutdown_time=10, enactment_overhead=5)
    assert plan(result, 1) == [("vm", "13:30:00", "13:59:40", [H1, H2]),
                               ("shutdown", "13:59:40", "14:00:00", [H1, H2])]


def test_enactment_overhead_is_added_to_each_suspension():
    result = simulate(site(4), [be("13:00", 60), ar("13:15", "13:30", 30, nodes=4)], enactment_overhead=3)
    assert plan(result, 1)[:2] == [("vm", "13:00:00", "13:29:25", [H1]), ("suspend", "13:29:25", "13:30:00", [H1])]


def test_override_suspend_and_resume_times():
    result = simulate(site(4), [be("13:00", 60), ar("13:15", "13:30", 30, nodes=4)],
                      override_suspend_time=10, override_resume_time=20)
    assert plan(result, 1)[:4] == [
        ("vm", "13:00:00", "13:29:50", [H1]),
        ("suspend", "13:29:50", "13:30:00", [H1]),
        ("resume", "14:00:00", "14:00:20", [H1]),
        ("vm", "14:00:20", "14:30:30", [H1]),
    ]


def test_ar_arriving_too_late_to_suspend_requeues_instead():
    """The AR arrives 10 s before its start: a 32 s suspension cannot end in time, so the lease is requeued."""
    result = simulate(site(1), [be("13:00", 60), ar("13:29:50", "13:30", 30)])
    assert plan(result, 1)[0] == ("vm", "13:00:00", "13:29:50", [H1])
    assert plan(result, 1)[1] == ("vm", "14:00:00", "15:00:00", [H1])


def test_admission_no_ars_rejects_reservations():
    result = simulate(site(1), [ar("13:00", "13:30", 30), be("13:00", 10)], policy_admission="no-ars")
    assert lease(result, 1)["state"] == "rejected"
    assert lease(result, 2)["state"] == "done"


def test_lease_larger_than_site_is_rejected_with_the_field_named():
    result = simulate(site(2), [be("13:00", 10, nodes=3), be("13:00", 10, memory=4096)])
    assert lease(result, 1)["state"] == "rejected" and "nodes" in lease(result, 1)["reason"]
    assert "nodes[0].memory" in lease(result, 2)["reason"]


def test_pack_and_spread_place_differently():
    reqs = [be("13:00", 60, nodes=2)]
    packed = simulate(site(2, cpus=2, memory=4096), reqs, policy_host_selection="pack")
    spread = simulate(site(2, cpus=2, memory=4096), reqs, policy_host_selection="spread")
    assert plan(packed, 1)[0][3] == [H1]
    assert plan(spread, 1)[0][3] == [H1, H2]


def test_a_short_lease_backfills_past_larger_ones_that_cannot_start():
    """The future slot is taken (lease 2 at 14:00); leases 3 and 4 cannot run to their end before it;
    lease 5 (4 nodes, 30 min) fits on host3/host4 until 14:00 and starts at once. (The queue's failure
    memo once recorded lease 4, ruled out for its length, as not fitting at all, which then ruled out
    lease 5 too: it started at 17:00.)"""
    result = simulate(site(4, cpus=2, memory=4096),
                      [be("13:00", 60, nodes=4), be("13:00", 60, nodes=8), be("13:00", 120, nodes=2),
                       be("13:00", 180, nodes=3), be("13:00", 30, nodes=4)], suspension="none")
    assert plan(result, 2)[0] == ("vm", "14:00:00", "15:00:00", ["host1", "host2", "host3", "host4"])
    assert plan(result, 5)[0] == ("vm", "13:00:00", "13:30:00", ["host3", "host4"])
    assert plan(result, 3)[0][1] == "15:00:00" and plan(result, 4)[0][1] == "15:00:00"


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("suspension", ["all", "serial", "none"])
def test_the_queue_failure_memo_changes_no_plan(seed, suspension, monkeypatch):
    """The memo only skips attempts that would fail: with it switched off, every lease gets the same
    plan (random mixed workloads, with early ends, suspension on, for one-node leases only, and off)."""
    from orchestrator.config import Config, SchedulingConfig, SimulationConfig
    from orchestrator.model.resources import Resources
    from orchestrator.planning import queue
    from orchestrator.runtime.simulator import Simulator
    from orchestrator.workloads.synthetic import synthetic_workload

    workload = synthetic_workload(300, 6, Resources.of(2, 4096), seed=seed, target_load=1.3, max_nodes=5)
    config = Config(scheduling=SchedulingConfig(suspension=suspension), simulation=SimulationConfig())

    def outcome():
        data = Simulator(workload, config, on_step=check_invariants).run().to_json()
        return [(l["id"], l["state"], l["start"], l["end"], l["reservations"]) for l in data["leases"]]

    with_memo = outcome()
    monkeypatch.setattr(queue.FailureMemo, "rules_out", lambda self, lease: False)
    assert outcome() == with_memo


def _scenario_a(on_step=None):
    """Issue 35's scenario A: three one-VM hosts, Haizea's test-trace settings (the defaults here)."""
    return simulate(site(3), [be("13:00", 10), be("13:00", 30, nodes=2), ar("13:01", "13:10", 10, nodes=3),
                              be("13:02", 60, nodes=2, real_minutes=10), be("13:05", 10, nodes=3)],
                    on_step=on_step)


def test_a_lease_whose_images_moved_stays_planned_in_the_future_and_is_replanned_early():
    """Lease 2 is suspended for AR 3; at 13:20 it is planned after lease 4 (14:20, the one future
    reservation aggressive backfilling allows) and its images move to host1/host2 at once. It keeps
    that future reservation while they move: lease 5 waits in the queue. Lease 4 really ends at 13:30:
    lease 2 is planned again from then, from where its images now are (host1, host2: nothing to move;
    it resumes after the estimate of a transfer, as a suspended lease always may), and lease 5 follows
    it. (Once, the transfers' start handed lease 2's future reservation to lease 5, which ran
    13:30-13:40, while lease 2 stayed planned at 14:20 and the site sat idle from 13:40 to 14:20.)
    Haizea 1.1 resumes lease 2 at 13:32:44, 82 s later: re-planning, it forgets the transfers done and
    moves the images again from host2/host3, where they no longer are."""
    result = _scenario_a()
    assert plan(result, 4) == [("vm", "13:20:00", "13:30:00", [H1, H2])]
    assert plan(result, 2) == [
        ("vm", "13:00:00", "13:09:28", [H2, H3]),
        ("suspend", "13:09:28", "13:10:00", [H2, H3]),
        ("migrate", "13:20:00", "13:21:22", [H1, H2]),   # (vnode 0: host2 -> host1)
        ("migrate", "13:21:22", "13:22:44", [H2, H3]),   # (vnode 1: host3 -> host2)
        ("resume", "13:31:22", "13:31:54", [H1, H2]),
        ("vm", "13:31:54", "13:52:26", [H1, H2]),
        ("shutdown", "13:52:26", "13:52:26", [H1, H2]),
    ]
    assert plan(result, 5) == [("vm", "13:52:26", "14:02:26", [H1, H2, H3]),
                               ("shutdown", "14:02:26", "14:02:26", [H1, H2, H3])]
    assert result.metrics["image_migrations"] == 2 and result.metrics["premature_ends"] == 1


def test_image_transfers_done_for_a_replanned_resumption_are_kept_in_the_stored_plan():
    """The transfers done before lease 2 was re-planned stay in its plan (after its suspension), so a
    scheduler rebuilt from the store knows where its images are."""
    from orchestrator.state.store import history_rows, lease_from_rows, lease_row, plan_rows

    seen = {}

    def at_1330(sched, now):
        if now == at("13:30"):
            lease = sched.leases[2]
            seen["stored"] = lease_from_rows(lease_row(lease), history_rows(lease), plan_rows(lease))

    _scenario_a(on_step=at_1330)
    stored = seen["stored"]
    suspended, planned = stored.reservations
    assert [p.kind.value for p in suspended.post] == ["suspend", "migrate", "migrate"]
    assert all(p.vm is suspended for p in suspended.post)
    assert [p.kind.value for p in planned.pre] == ["resume"]
    stored.reservations.pop()   # (as when its plan is dropped again: where are its images then?)
    assert stored.image_hosts() == {0: H1, 1: H2}


def test_a_retry_after_long_image_transfers_resumes_when_they_end():
    """Issue 35's scenario B. Lease 1 (host1, host2) is suspended for AR 3 and resumes at 13:20 on
    host2/host3 (lease 4 holds host1). Moving its two images takes two rounds (host2 is a source and
    a destination), 164 s where the estimate said 82 s: the scheduler looks again from the end of the
    transfers, 13:22:44, and resumes there (once, it added the estimate again: 13:24:06). Haizea: the
    same end, 13:43:48."""
    result = simulate(site(3), [be("13:00", 30, nodes=2), be("13:00", 10), ar("13:01", "13:10", 10, nodes=3),
                                be("13:02", 20)])
    assert plan(result, 1) == [
        ("vm", "13:00:00", "13:09:28", [H1, H2]),
        ("suspend", "13:09:28", "13:10:00", [H1, H2]),
        ("migrate", "13:20:00", "13:21:22", [H1, H2]),
        ("migrate", "13:21:22", "13:22:44", [H2, H3]),
        ("resume", "13:22:44", "13:23:16", [H2, H3]),
        ("vm", "13:23:16", "13:43:48", [H2, H3]),
        ("shutdown", "13:43:48", "13:43:48", [H2, H3]),
    ]
    assert lease(result, 1)["end"] == "2026-01-01T13:43:48Z"
    assert plan(result, 4) == [("vm", "13:20:00", "13:40:00", [H1]), ("shutdown", "13:40:00", "13:40:00", [H1])]


def test_leases_submitted_together_stay_in_id_order_when_one_is_requeued():
    """A deliberate difference from Haizea (docs/scheduling.md): lease 1, suspended for AR 4 and requeued,
    goes back before leases 2 and 3, submitted at the same instant, and resumes first. (Haizea puts it after
    them: it orders equal submit times by when they entered its queue.) Images stay put here, so the
    resumption needs no transfer estimate."""
    result = simulate(site(1), [be("13:00", 60), be("13:00", 60), be("13:00", 60), ar("13:10", "13:30", 30)],
                      backfilling="off", migration="no")
    assert plan(result, 1)[2:4] == [("resume", "14:00:00", "14:00:32", [H1]), ("vm", "14:00:32", "14:31:04", [H1])]
    assert plan(result, 2)[0] == ("vm", "14:31:04", "15:31:04", [H1])
    assert plan(result, 3)[0] == ("vm", "15:31:04", "16:31:04", [H1])


def test_an_immediate_lease_arriving_with_a_reservation_is_placed_first_and_never_suspended():
    """A deliberate difference from Haizea (docs/scheduling.md): submitted at the same instant (the AR
    first), the immediate lease is placed first and the AR, which cannot preempt it, is rejected. (Haizea
    lets the AR preempt it, and an immediate lease, never queued, is then never resumed.)"""
    result = simulate(site(1), [ar("13:00", "13:10", 30, preemptible=False), im("13:00", 60)])
    assert lease(result, 1)["state"] == "rejected"
    assert plan(result, 2) == [("vm", "13:00:00", "14:00:00", [H1]), ("shutdown", "14:00:00", "14:00:00", [H1])]
    assert lease(result, 2)["state"] == "done"
