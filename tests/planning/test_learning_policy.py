"""The online update of the model's rates (orchestrator.planning.learning): bounded, convergent, robust."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.planning.learning import (
    DEFAULT_POLICY,
    LearnedRates,
    LearningPolicy,
    RateEstimate,
    equivalent_rate,
    observe,
    pair_key,
)

rates = st.floats(min_value=1e-2, max_value=1e5, allow_nan=False, allow_infinity=False)
estimates = st.builds(RateEstimate, rates, st.integers(0, 1000), st.integers(0, 1))
policies = st.builds(LearningPolicy, st.floats(0.05, 1.0), st.floats(1.1, 10.0), st.floats(1.5, 50.0),
                     st.integers(0, 10))


@given(estimates, rates, policies)
def test_one_observation_never_moves_an_estimate_by_more_than_the_bound(estimate, observed, policy):
    after = observe(estimate, estimate.rate_mib_s, observed, policy)
    ratio = after.rate_mib_s / estimate.rate_mib_s
    assert 1 / policy.max_step * (1 - 1e-9) <= ratio <= policy.max_step * (1 + 1e-9)
    # and never past the observation
    low, high = sorted((estimate.rate_mib_s, observed))
    assert low * (1 - 1e-9) <= after.rate_mib_s <= high * (1 + 1e-9)


@given(rates, rates)
def test_it_converges_to_a_constant_true_rate(prior, truth):
    estimate = None
    for _ in range(60):
        estimate = observe(estimate, prior, truth)
    assert estimate.rate_mib_s == pytest.approx(truth, rel=1e-3)
    assert 1 <= estimate.samples <= 60


@given(rates, rates)
@settings(max_examples=200)
def test_a_single_outlier_is_ignored_once_the_estimate_is_established(truth, outlier):
    estimate = None
    for _ in range(40):
        estimate = observe(estimate, truth, truth)
    after = observe(estimate, truth, outlier)
    distance = abs(math.log(outlier / truth))
    if distance > math.log(DEFAULT_POLICY.outlier):
        assert after.rate_mib_s == estimate.rate_mib_s and after.rejected == 1
    else:   # within the outlier bound: a bounded step, the EWMA's weight of it
        step = abs(math.log(after.rate_mib_s / estimate.rate_mib_s))
        assert step <= min(DEFAULT_POLICY.weight * distance, math.log(DEFAULT_POLICY.max_step)) + 1e-6
    for _ in range(20):   # and the true rate takes it back
        after = observe(after, truth, truth)
    assert after.rate_mib_s == pytest.approx(truth, rel=1e-3)


def test_two_outliers_in_a_row_are_a_changed_link_and_are_followed():
    estimate = None
    for _ in range(10):
        estimate = observe(estimate, 100.0, 100.0)
    first = observe(estimate, 100.0, 5000.0)
    assert first.rate_mib_s == 100.0
    second = observe(first, 100.0, 5000.0)
    assert second.rate_mib_s == pytest.approx(100.0 * DEFAULT_POLICY.max_step)
    for _ in range(30):
        second = observe(second, 100.0, 5000.0)
    assert second.rate_mib_s == pytest.approx(5000.0, rel=1e-3)


def test_a_wrong_prior_is_left_within_a_few_operations():
    """The lab's case: 12.5 MB/s assumed, 400 MiB/s real: x2 per operation, there in five."""
    estimate = None
    seen = []
    for _ in range(6):
        estimate = observe(estimate, 12.5, 400.0)
        seen.append(estimate.rate_mib_s)
    assert seen[:5] == pytest.approx([25.0, 50.0, 100.0, 200.0, 400.0])
    assert seen[5] == pytest.approx(400.0)


def test_bad_values_are_refused():
    with pytest.raises(ValueError, match="observed rate"):
        observe(None, 10.0, 0.0)
    with pytest.raises(ValueError, match="prior rate"):
        observe(None, math.nan, 10.0)
    with pytest.raises(ValueError, match="max_step"):
        LearningPolicy(max_step=1.0)


def test_the_equivalent_rate_is_the_one_that_would_have_predicted_the_measurement():
    # 1024 MiB at 12.5 MiB/s plus 2 s predicted as 83.92 s; it took 4.56 s: the model needed 400 MiB/s
    assert equivalent_rate(12.5, 2 + 1024 / 12.5, 4.56, fixed_s=2.0) == pytest.approx(400.0)
    assert equivalent_rate(12.5, 10.0, 1.5, fixed_s=2.0) is None   # within the fixed cost: says nothing
    assert equivalent_rate(12.5, 10.0, math.inf) is None


def test_learned_rates_are_looked_up_per_pair_and_per_host():
    rates = LearnedRates({"live-migrate": {pair_key("a", "b"): 300.0}, "suspend": {"a": 90.0, "b": 50.0}})
    assert rates.live("a", "b", 12.5) == 300.0 and rates.live("b", "a", 12.5) == 12.5
    assert rates.host("suspend", "a", 32.0) == 90.0 and rates.host("suspend", "c", 32.0) == 32.0
    # a lease not placed yet: the slowest learned host, or the default if it is slower
    assert rates.host("suspend", None, 64.0) == 50.0 and rates.host("suspend", None, 32.0) == 32.0
    assert rates.knows("live-migrate") and not rates.knows("move")
