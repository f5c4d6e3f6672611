"""The pre-copy model: exact cases that pin the arithmetic, and properties the scheduler relies on."""

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from drivers.downtime import DowntimeSchedule
from orchestrator.planning.precopy import Round, downtime_limit_ms, predict_precopy


def test_idle_guest_takes_memory_over_bandwidth_plus_overhead_with_no_extra_rounds():
    result = predict_precopy(1024, 128, 0.0, 300, overhead_s=1.5)
    assert result.total_seconds == 9.5              # 1.5 s setup + 1024 MiB / 128 MiB/s
    assert result.iterations == 0
    assert result.downtime_ms == 0.0
    assert result.transferred_mib == 1024
    assert result.converged and result.outcome == "completed"
    assert result.rounds == (Round(8.0, 1024.0), Round(0.0, 0.0))
    assert result.passes == 2


def test_dirtying_guest_resends_geometrically_shrinking_rounds():
    # 20 MiB/s dirtied while sending at 100 MiB/s: each pass is a fifth of the one before.
    result = predict_precopy(1024, 100, 20, 300)
    sizes = [r.mib for r in result.rounds]
    assert sizes == pytest.approx([1024, 204.8, 40.96, 8.192])
    assert result.iterations == 2
    assert result.downtime_ms == pytest.approx(81.92)
    assert result.total_seconds == pytest.approx(sum(r.seconds for r in result.rounds))
    assert result.transferred_mib == pytest.approx(sum(sizes))


def test_dirty_factor_scales_the_dirty_rate():
    assert predict_precopy(1024, 100, 40, 300) == predict_precopy(1024, 100, 20, 300, dirty_factor=2.0)


def test_dirty_rate_above_bandwidth_aborts_at_the_timeout_with_the_vm_left_behind():
    result = predict_precopy(1024, 100, 150, 300, timeout_s=60, on_timeout="abort")
    assert result.outcome == "aborted"
    assert not result.converged
    assert result.total_seconds == 60
    assert result.downtime_ms == 0
    assert sum(r.seconds for r in result.rounds) == pytest.approx(60)
    assert result.remaining_mib == pytest.approx(1024 * 0.9)  # stuck at the working set


def test_dirty_rate_above_bandwidth_forced_pauses_and_sends_the_rest():
    result = predict_precopy(1024, 100, 150, 300, timeout_s=60, on_timeout="force")
    assert result.outcome == "forced"
    assert not result.converged
    assert result.downtime_ms == pytest.approx(result.remaining_mib / 100 * 1000)
    assert result.downtime_ms > 300
    assert result.total_seconds == pytest.approx(60 + result.downtime_ms / 1000)
    assert result.rounds[-1] == pytest.approx((result.remaining_mib / 100, result.remaining_mib))


def test_never_converging_without_timeout_stops_at_max_iterations():
    result = predict_precopy(1024, 100, 150, 300, max_iterations=5)
    assert result.outcome == "aborted"
    assert result.iterations == 5
    assert len(result.rounds) == 6  # stage 1 + 5 stage-2 passes, no stop-and-copy


def test_timeout_during_stage_one_counts_what_was_sent():
    result = predict_precopy(1024, 100, 10, 300, timeout_s=5, on_timeout="abort")
    assert result.rounds == (Round(5.0, 500.0),)
    assert result.iterations == 0
    assert result.remaining_mib == pytest.approx(1024 - 500 + 50)


def test_working_set_caps_every_resend():
    result = predict_precopy(4096, 100, 1000, 100, working_set_mib=256, timeout_s=600, on_timeout="force")
    assert all(r.mib <= 256 + 1e-9 for r in result.rounds[1:])
    assert result.remaining_mib <= 256 + 1e-9
    assert result.downtime_ms == pytest.approx(256 / 100 * 1000)


def test_default_working_set_is_ninety_percent_of_memory():
    result = predict_precopy(1000, 100, 10_000, 100, max_iterations=3)
    assert [r.mib for r in result.rounds[1:]] == pytest.approx([900.0] * 3)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"memory_mib": 0}, "memory_mib"),
        ({"memory_mib": -1}, "memory_mib"),
        ({"bandwidth_mib_s": 0}, "bandwidth_mib_s"),
        ({"bandwidth_mib_s": -5}, "bandwidth_mib_s"),
        ({"dirty_rate_mib_s": -1}, "dirty_rate_mib_s"),
        ({"max_downtime_ms": 0}, "max_downtime_ms"),
        ({"working_set_mib": 2048}, "working_set_mib"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"on_timeout": "retry"}, "on_timeout"),
        ({"overhead_s": -0.1}, "overhead_s"),
        ({"dirty_factor": -1}, "dirty_factor"),
        ({"max_iterations": 0}, "max_iterations"),
        ({"bandwidth_mib_s": math.nan}, "bandwidth_mib_s"),
    ],
)
def test_bad_parameters_raise_value_error_naming_the_parameter(kwargs, name):
    args = {"memory_mib": 1024, "bandwidth_mib_s": 100, "dirty_rate_mib_s": 10, "max_downtime_ms": 300} | kwargs
    with pytest.raises(ValueError, match=name):
        predict_precopy(**args)


memory = st.floats(min_value=1, max_value=65536)
bandwidth = st.floats(min_value=1, max_value=10_000)
dirty = st.floats(min_value=0, max_value=20_000)
downtime = st.floats(min_value=1, max_value=5_000)
timeout = st.one_of(st.none(), st.floats(min_value=0.5, max_value=3_600))
action = st.sampled_from(["abort", "force"])


def precopy_rounds(result) -> int:
    """Passes made while the guest runs: all but the stop-and-copy, which an aborted migration never makes."""
    return len(result.rounds) - (0 if result.outcome == "aborted" else 1)


@settings(max_examples=300, deadline=None)
@given(memory, bandwidth, dirty, downtime, downtime, timeout, action)
@example(mem=1.0, bw=1.0, rate=1.0, d1=1.0, d2=900.0, limit=1.0, on_timeout="abort")  # stage 1 ends at the timeout
def test_larger_max_downtime_never_needs_more_rounds(mem, bw, rate, d1, d2, limit, on_timeout):
    small, large = sorted((d1, d2))
    a = predict_precopy(mem, bw, rate, small, timeout_s=limit, on_timeout=on_timeout, max_iterations=200)
    b = predict_precopy(mem, bw, rate, large, timeout_s=limit, on_timeout=on_timeout, max_iterations=200)
    assert b.iterations <= a.iterations
    assert precopy_rounds(b) <= precopy_rounds(a)


@settings(max_examples=300, deadline=None)
@given(memory, bandwidth, dirty, downtime, timeout, action, st.floats(min_value=0, max_value=30))
def test_converged_migrations_respect_the_max_downtime(mem, bw, rate, max_dt, limit, on_timeout, overhead):
    result = predict_precopy(mem, bw, rate, max_dt, timeout_s=limit, on_timeout=on_timeout, overhead_s=overhead,
                             max_iterations=200)
    if result.converged:
        assert result.outcome == "completed"
        assert result.downtime_ms <= max_dt
    else:
        assert result.outcome == on_timeout.replace("abort", "aborted").replace("force", "forced")
    assert result.transferred_mib == pytest.approx(math.fsum(r.mib for r in result.rounds))
    assert result.remaining_mib <= mem * (1 + 1e-9)


# -- the downtime model: switch-over cost and the limit's steps --------------------------------------------

def test_switch_over_cost_adds_to_the_downtime_and_the_total_not_to_the_rounds():
    plain = predict_precopy(1024, 100, 20, 300)
    with_switch = predict_precopy(1024, 100, 20, 300, switchover_ms=150)
    assert with_switch.rounds == plain.rounds                  # QEMU's convergence test counts the transfer only
    assert with_switch.downtime_ms == pytest.approx(plain.downtime_ms + 150)
    assert with_switch.total_seconds == pytest.approx(plain.total_seconds + 0.15)
    idle = predict_precopy(512, 100, 0.0, 300, switchover_ms=170)
    assert idle.downtime_ms == pytest.approx(170)               # an idle guest's pause is the switch-over


def test_the_limit_left_after_the_switch_over():
    assert downtime_limit_ms(300, 120) == 180
    assert downtime_limit_ms(300, 0) == 300
    assert downtime_limit_ms(300, 300) is None                  # nothing left for the transfer
    assert downtime_limit_ms(300, 450) is None


def test_a_smaller_limit_means_more_passes_and_a_downtime_within_the_maximum():
    # 20 MiB/s dirtied at 100 MiB/s: the 300 ms maximum less a 250 ms switch-over leaves a 50 ms limit.
    limit = downtime_limit_ms(300, 250)
    naive = predict_precopy(1024, 100, 20, 300, switchover_ms=250)
    planned = predict_precopy(1024, 100, 20, limit, switchover_ms=250)
    assert naive.downtime_ms > 300                               # what a model without the cost would promise
    assert planned.iterations > naive.iterations
    assert planned.downtime_ms <= 300


def test_stepped_limit_holds_a_dirtying_guest_until_the_step_that_lets_it_converge():
    # 1 GiB, 10 steps of 10 s: 30 ms allowed for the first 10 s, 57 ms from 10 s, 84 ms from 20 s. The guest
    # keeps an 8 MiB working set dirty (80 ms to send), so it passes over it until the limit reaches 84 ms.
    schedule = DowntimeSchedule(steps=10, delay_s_per_gib=10)
    stepped = predict_precopy(1024, 100, 200, 300, working_set_mib=8, downtime_schedule=schedule)
    one_step = predict_precopy(1024, 100, 200, 300, working_set_mib=8)
    assert stepped.total_seconds > 20 > 11 > one_step.total_seconds
    assert stepped.converged and stepped.downtime_ms == pytest.approx(80)
    transfer_ms = stepped.rounds[-1].seconds * 1000
    assert transfer_ms <= schedule.allowed_at(300, 2**30, stepped.total_seconds) + 1e-9
    assert predict_precopy(1024, 100, 200, 300, working_set_mib=8, downtime_schedule=DowntimeSchedule()) == one_step


def test_negative_switch_over_is_refused():
    with pytest.raises(ValueError, match="switchover_ms"):
        predict_precopy(1024, 100, 20, 300, switchover_ms=-1)


@settings(max_examples=200, deadline=None)
@given(memory, bandwidth, dirty, downtime, st.floats(min_value=0, max_value=2_000), timeout, action)
def test_with_the_limit_left_after_the_switch_over_a_converged_downtime_stays_within_the_maximum(
        mem, bw, rate, max_dt, switchover, limit, on_timeout):
    job_limit = downtime_limit_ms(max_dt, switchover)
    if job_limit is None:
        return
    result = predict_precopy(mem, bw, rate, job_limit, switchover_ms=switchover, timeout_s=limit,
                             on_timeout=on_timeout, max_iterations=200)
    if result.converged:
        assert result.downtime_ms <= max_dt * (1 + 1e-9)


def test_block_migration_copies_the_disk_first_then_memory():
    memory_only = predict_precopy(1024, 100, 20, 300)
    with_disk = predict_precopy(1024, 100, 20, 300, disk_mib=500)
    assert with_disk.disk_seconds == pytest.approx(5.0)
    # the memory passes are those of the memory alone, after the disk
    assert [r.mib for r in with_disk.rounds] == [r.mib for r in memory_only.rounds]
    assert with_disk.total_seconds == pytest.approx(memory_only.total_seconds + 5.0)
    assert with_disk.transferred_mib == pytest.approx(memory_only.transferred_mib)


def test_block_migration_disk_counts_against_the_timeout():
    # 500 MiB of disk at 100 MiB/s leaves 1 s of a 6 s timeout for 1 GiB of memory
    cut = predict_precopy(1024, 100, 0, 300, disk_mib=500, timeout_s=6, on_timeout="abort")
    assert cut.outcome == "aborted" and cut.total_seconds == pytest.approx(6.0)
    assert cut.rounds[0].mib == pytest.approx(100.0)
    with pytest.raises(ValueError, match="disk_mib must not be negative"):
        predict_precopy(1024, 100, 0, 300, disk_mib=-1)
