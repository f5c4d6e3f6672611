"""The allowed-downtime schedule (drivers/downtime.py) the libvirt driver sets and the planner's model uses."""

import pytest

from drivers.downtime import DowntimeSchedule, allowed_at


def test_steps_follow_nova():
    # Nova's documented example: 10 steps, 30 s/GiB, 3 GiB, 400 ms.
    schedule = DowntimeSchedule(steps=10, delay_s_per_gib=30)
    points = schedule.points(400, 3 * 2**30)
    assert [round(t) for t, _ in points] == list(range(0, 901, 90))
    assert [round(d) for _, d in points] == [40, 76, 112, 148, 184, 220, 256, 292, 328, 364, 400]
    assert schedule.allowed_at(400, 3 * 2**30, 0) == 40
    assert schedule.allowed_at(400, 3 * 2**30, 89.9) == 40
    assert schedule.allowed_at(400, 3 * 2**30, 90) == pytest.approx(76)
    assert schedule.allowed_at(400, 3 * 2**30, 10_000) == 400


def test_one_step_is_the_limit_from_the_start():
    [(start, first), (later, last)] = DowntimeSchedule(steps=1, delay_s_per_gib=10).points(300, 2**30)
    assert (start, first, later, last) == (0.0, 300.0, 10.0, 300.0)
    assert DowntimeSchedule().allowed_at(300, 2**30, 0.0) == 300


@pytest.mark.parametrize("steps", [0, -1, 1.5, True])
def test_steps_must_be_a_positive_integer(steps):
    with pytest.raises(ValueError, match="at least 1"):
        DowntimeSchedule(steps=steps)


def test_negative_delay_is_refused():
    with pytest.raises(ValueError, match="delay"):
        DowntimeSchedule(steps=2, delay_s_per_gib=-1)


def test_points_must_start_at_zero():
    with pytest.raises(ValueError, match="start at 0"):
        allowed_at([(5.0, 100.0)], 1.0)
