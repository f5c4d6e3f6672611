"""The fidelity summary (orchestrator/analysis/fidelity.py) against plain arithmetic."""

import pytest

from orchestrator.analysis.fidelity import Comparison, fidelity


def test_errors_are_absolute_and_relative_to_the_measurement():
    runs = [Comparison(11.0, 10.0, 150.0, 200.0, 300.0),    # +10%, -50 ms
            Comparison(9.0, 10.0, 250.0, 230.0, 300.0),     # -10%, +20 ms
            Comparison(4.0, 5.0, 100.0, 400.0, 300.0)]      # -20%, -300 ms, over the maximum
    summary = fidelity(runs)
    assert summary.runs == 3
    assert summary.total_error_pct_median == pytest.approx(10.0)
    assert summary.total_error_pct_p90 == pytest.approx(18.0)          # linear between 10% and 20%
    assert summary.downtime_error_ms_median == pytest.approx(50.0)
    assert summary.downtime_error_ms_p90 == pytest.approx(250.0)
    assert summary.within_max_downtime == 2 and summary.within_share == pytest.approx(2 / 3)
    text = summary.sentence()
    assert "median 10.0%" in text and "within 300 ms in 2/3 (67%)" in text
    assert summary.to_json()["within_share"] == pytest.approx(2 / 3)


def test_each_run_is_held_to_its_own_maximum():
    summary = fidelity([Comparison(1.0, 1.0, 200.0, 250.0, 300.0), Comparison(1.0, 1.0, 200.0, 250.0, 200.0)])
    assert summary.within_max_downtime == 1 and summary.max_downtime_ms == 300.0
    assert "within the maximum in 1/2" in summary.sentence()


def test_nothing_measured_is_no_summary():
    assert fidelity([]) is None
    assert fidelity([Comparison(1.0, 0.0, 0.0, 0.0, 300.0)]) is None
