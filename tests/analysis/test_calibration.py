"""Calibration: the fits recover the parameters that generated the data (pre-copy model, suspend/resume
rates), `leasewise calibrate migration|suspend` on the simulated driver gives back the configured values,
prints the predicted-vs-measured table and stores the fit, bad options are one line with exit code 2, and
`apply_calibration` puts the stored values into a SchedulingConfig."""

import dataclasses
import json
import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from orchestrator.analysis.calibration import (
    MAX_DIRTY_FACTOR,
    MigrationSample,
    RateSample,
    fit_migration,
    fit_rates,
    migration_record,
    pages_to_mib_s,
    predict_sample,
)
from orchestrator.cli import app
from orchestrator.config import SchedulingConfig
from orchestrator.model.timeutil import UTC
from orchestrator.runtime.calibration.guests import GUEST_SYSTEM_MIB, MIN_GUEST_MIB, guest_spec
from orchestrator.state.calibrated import (
    CALIBRATION_KEY,
    CalibrationError,
    apply_calibration,
    load_calibration,
    store_calibration,
)
from orchestrator.state.store import Store

SIZES = (128, 256, 512)
DIRTY_PPS = (0, 1000, 5000)


def model_samples(bandwidth, overhead, factor, sizes=SIZES, pps=DIRTY_PPS, max_downtime=300.0, timeout=600.0,
                  switchover=0.0):
    """What the pre-copy model says each grid point measures (aborted migrations are not measurements)."""
    out = []
    for memory in sizes:
        for p in pps:
            probe = MigrationSample(memory, pages_to_mib_s(p), max_downtime, 1.0, 0.0,
                                    working_set_mib=memory / 2, timeout_s=timeout)
            r = predict_sample(probe, bandwidth, overhead, factor, switchover)
            if r.outcome != "aborted":
                out.append(dataclasses.replace(probe, total_s=r.total_seconds, downtime_ms=r.downtime_ms,
                                               iterations=r.passes))
    return out


def assert_recovered(fit, bandwidth, overhead, factor):
    assert fit.bandwidth_mib_s == pytest.approx(bandwidth, rel=0.05)
    assert fit.overhead_s == pytest.approx(overhead, rel=0.05, abs=0.05)
    assert fit.dirty_factor == pytest.approx(factor, rel=0.05)
    assert fit.dirty_factor_determined
    lo, hi = fit.dirty_factor_interval
    # the interval of factors that fit about as well holds the fit and the true value, and is bounded
    # (how narrow depends on how much dirtying the grid shows: a fast link makes it wider)
    assert lo <= fit.dirty_factor <= hi and lo <= factor * 1.0000001 and factor <= hi * 1.0000001


# -- the fits --------------------------------------------------------------------------------------------
def test_a_disk_copied_first_is_fitted_at_the_memory_s_bandwidth_and_predicted_before_it():
    """Idle guests with and without a disk: the fit over memory plus disk gives the model's bandwidth back,
    and a sample's prediction counts its disk first (its copy time, then the same passes over memory)."""
    samples = []
    for memory in SIZES:
        for disk in (0.0, 64.0, 512.0):
            probe = MigrationSample(memory, 0.0, 300.0, 1.0, 0.0, disk_mib=disk)
            r = predict_sample(probe, 90.0, 1.2, 1.0, 40.0)
            samples.append(dataclasses.replace(probe, total_s=r.total_seconds, downtime_ms=r.downtime_ms))
    fit = fit_migration(samples)
    assert fit.bandwidth_mib_s == pytest.approx(90.0, rel=1e-6)
    assert fit.overhead_s == pytest.approx(1.2, abs=1e-6) and fit.switchover_ms == pytest.approx(40.0, abs=1e-6)
    bare, disk = fit.predict(samples[0]), fit.predict(samples[2])
    assert disk.disk_seconds == pytest.approx(512.0 / 90.0)
    assert disk.total_seconds - bare.total_seconds == pytest.approx(512.0 / 90.0)
    assert disk.rounds == bare.rounds
    with pytest.raises(CalibrationError, match="disk_mib must not be negative"):
        fit_migration([dataclasses.replace(samples[0], disk_mib=-1.0), *samples[1:]])


@pytest.mark.parametrize(
    ("bandwidth", "overhead", "factor"),
    [(100.0, 0.0, 1.0), (12.5, 2.0, 1.5), (500.0, 0.5, 0.6), (50.0, 1.0, 2.5), (1000.0, 3.0, 4.0), (30.0, 0.2, 0.3)],
)
def test_fit_migration_recovers_the_parameters_of_the_model(bandwidth, overhead, factor):
    samples = model_samples(bandwidth, overhead, factor)
    assert any(s.dirty_rate_mib_s > 0 for s in samples)
    fit = fit_migration(samples)
    assert_recovered(fit, bandwidth, overhead, factor)
    assert fit.rms_total_s < 1e-3 and fit.rms_downtime_ms < 1.0
    assert fit.samples == len(samples)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(bandwidth=1587.0, overhead=10.0, factor=0.125, max_downtime=30.0)   # a wide (10.4%) interval, once
@given(
    bandwidth=st.floats(5.0, 2000.0),
    overhead=st.one_of(st.just(0.0), st.floats(0.0, 10.0)),
    factor=st.floats(0.1, 5.0),
    max_downtime=st.sampled_from([30.0, 100.0, 300.0, 1000.0]),
)
def test_fit_migration_recovers_any_parameters_within_5_percent(bandwidth, overhead, factor, max_downtime):
    samples = model_samples(bandwidth, overhead, factor, max_downtime=max_downtime)
    if not any(s.dirty_rate_mib_s > 0 for s in samples):
        return  # every dirtying guest outruns the bandwidth: nothing to fit the factor to
    fit = fit_migration(samples)
    assert_recovered(fit, bandwidth, overhead, factor)


def test_fit_migration_with_noise_stays_close_and_reports_its_error():
    samples = model_samples(80.0, 1.0, 1.2)
    wobble = [1.01, 0.99, 1.02, 0.98, 1.0, 1.01, 0.99, 1.0, 1.02]
    noisy = [dataclasses.replace(s, total_s=s.total_s * w) for s, w in zip(samples, wobble)]
    fit = fit_migration(noisy)
    assert fit.bandwidth_mib_s == pytest.approx(80.0, rel=0.1)
    assert fit.dirty_factor == pytest.approx(1.2, rel=0.35)
    assert 0 < fit.rms_total_s < 0.5
    assert fit.max_rel_total_error < 0.05


@pytest.mark.parametrize(("bandwidth", "overhead", "factor", "switchover"),
                         [(114.0, 0.8, 1.3, 170.0), (50.0, 0.0, 2.0, 40.0), (800.0, 1.5, 0.7, 300.0)])
def test_fit_migration_recovers_the_switch_over_cost_and_the_overhead_beside_it(bandwidth, overhead, factor,
                                                                                switchover):
    samples = model_samples(bandwidth, overhead, factor, switchover=switchover, max_downtime=250.0)
    fit = fit_migration(samples)
    assert fit.switchover_ms == pytest.approx(switchover, rel=0.02, abs=1.0)
    assert fit.overhead_s == pytest.approx(overhead, rel=0.05, abs=0.05)
    assert fit.bandwidth_mib_s == pytest.approx(bandwidth, rel=0.05)
    assert fit.rms_downtime_ms < 1.0
    record = migration_record(fit, ["a", "b"], datetime(2026, 12, 1, tzinfo=UTC), "simulated", 300.0)
    assert record["switchover_ms"] == pytest.approx(fit.switchover_ms)


def test_a_few_outlying_downtimes_do_not_move_the_switch_over_cost():
    samples = model_samples(114.0, 0.8, 1.3, switchover=170.0)
    spoiled = [dataclasses.replace(s, downtime_ms=s.downtime_ms + 450.0) if i in (2, 5) else s
               for i, s in enumerate(samples)]
    assert fit_migration(spoiled).switchover_ms == pytest.approx(170.0, abs=15.0)


def test_without_a_switch_over_cost_none_is_fitted():
    assert fit_migration(model_samples(114.0, 0.8, 1.3)).switchover_ms == pytest.approx(0.0, abs=1.0)


# Measured on the lab (QEMU 7.2 TCG, loopback): ~0.5 s of setup, a fast link, and dirty rates too low
# against it for the dirtying to show through the noise.
LAB_RUN = [(64, 0, 0.77, 35), (64, 1000, 0.39, 43), (64, 4000, 0.79, 52), (128, 0, 0.70, 274),
           (128, 1000, 0.77, 334), (128, 4000, 0.73, 297), (256, 0, 0.93, 204), (256, 1000, 0.97, 169),
           (256, 4000, 0.97, 173)]


def test_a_factor_the_measurements_do_not_bound_is_reported_but_not_stored():
    samples = [MigrationSample(m, pages_to_mib_s(p), 300, t, d, 3, m / 2, 300) for m, p, t, d in LAB_RUN]
    fit = fit_migration(samples)
    assert fit.bandwidth_mib_s > 100 and 0.3 < fit.overhead_s < 0.8
    assert fit.dirty_factor is not None and not fit.dirty_factor_determined
    lo, hi = fit.dirty_factor_interval
    assert lo == 0.0 or hi == MAX_DIRTY_FACTOR
    record = migration_record(fit, ["lab1", "lab2"], datetime(2027, 1, 1, tzinfo=UTC), "libvirt", 300)
    assert record["dirty_factor"] is None and record["dirty_factor_fit"] == fit.dirty_factor
    applied = apply_calibration(SchedulingConfig(live_migration_dirty_factor=1.3), {"migration": record})
    assert applied.live_migration_dirty_factor == 1.3
    assert applied.live_migration_bandwidth == pytest.approx(fit.bandwidth_mib_s)


def test_a_bounded_factor_is_stored():
    fit = fit_migration(model_samples(100.0, 0.5, 1.4))
    record = migration_record(fit, ["a", "b"], datetime(2027, 1, 1, tzinfo=UTC), "simulated", 300)
    assert record["dirty_factor"] == pytest.approx(1.4, rel=1e-3)
    assert record["dirty_factor_interval"][0] <= record["dirty_factor"] <= record["dirty_factor_interval"][1]
    assert record["at"] == "2027-01-01T00:00:00Z"


def test_fit_migration_without_dirtying_guests_leaves_the_factor_unfitted():
    fit = fit_migration(model_samples(64.0, 0.5, 1.0, pps=(0,)))
    assert fit.dirty_factor is None
    assert fit.bandwidth_mib_s == pytest.approx(64.0)
    assert fit.overhead_s == pytest.approx(0.5)


def test_fit_migration_max_downtime_argument_overrides_the_samples():
    samples = model_samples(100.0, 0.0, 2.0, max_downtime=50.0)
    as_if_300 = [dataclasses.replace(s, max_downtime_ms=300.0) for s in samples]
    assert_recovered(fit_migration(as_if_300, max_downtime_ms=50.0), 100.0, 0.0, 2.0)


@pytest.mark.parametrize(
    ("samples", "message"),
    [
        ([], "at least two different memory sizes"),
        ([MigrationSample(128, 0.0, 300, 2.0, 0.0), MigrationSample(128, 0.0, 300, 2.1, 0.0)],
         "at least two different memory sizes"),
        ([MigrationSample(128, 0.0, 300, 3.0, 0.0), MigrationSample(256, 0.0, 300, 2.0, 0.0)],
         "do not grow with memory"),
        ([MigrationSample(128, 3.9, 300, 3.0, 10.0), MigrationSample(256, 3.9, 300, 4.0, 10.0)],
         "idle guests"),
    ],
)
def test_fit_migration_says_what_is_missing(samples, message):
    with pytest.raises(CalibrationError, match=message):
        fit_migration(samples)


def test_overhead_is_never_negative():
    # times that extrapolate to a negative overhead: the fit goes through the origin instead
    samples = [MigrationSample(128, 0.0, 300, 0.9, 0.0), MigrationSample(256, 0.0, 300, 2.1, 0.0)]
    fit = fit_migration(samples)
    assert fit.overhead_s == 0.0
    assert fit.bandwidth_mib_s == pytest.approx((128 ** 2 + 256 ** 2) / (128 * 0.9 + 256 * 2.1))


@pytest.mark.parametrize(("rate", "overhead"), [(32.0, 0.0), (200.0, 1.0), (1234.5, 0.25), (5.0, 7.0)])
def test_fit_rates_recovers_rate_and_overhead(rate, overhead):
    samples = [RateSample(m, overhead + m / rate) for m in (128, 256, 512, 1024)]
    fit = fit_rates(samples)
    assert fit.rate_mib_s == pytest.approx(rate, rel=1e-9)
    assert fit.overhead_s == pytest.approx(overhead, abs=1e-9)
    fitted_rate, fitted_overhead = fit
    assert (fitted_rate, fitted_overhead) == (fit.rate_mib_s, fit.overhead_s)
    assert fit.predict(2048) == pytest.approx(overhead + 2048 / rate)


def test_fit_rates_needs_two_sizes():
    with pytest.raises(CalibrationError, match="two different memory sizes"):
        fit_rates([RateSample(256, 2.0), RateSample(256, 2.2)], "suspend")


# -- storing and applying --------------------------------------------------------------------------------
def test_store_calibration_replaces_one_section_and_keeps_the_other(tmp_path):
    with Store.open(tmp_path / "s.sqlite") as store:
        assert load_calibration(store) == {}
        store_calibration(store, "migration", {"bandwidth_mib_s": 1.0, "overhead_s": 0.0, "dirty_factor": None})
        store_calibration(store, "suspend", {"suspend_rate_mib_s": 2.0, "resume_rate_mib_s": 3.0})
        store_calibration(store, "migration", {"bandwidth_mib_s": 4.0, "overhead_s": 1.0, "dirty_factor": 2.0})
        stored = store.get_meta(CALIBRATION_KEY)
    assert stored == {"migration": {"bandwidth_mib_s": 4.0, "overhead_s": 1.0, "dirty_factor": 2.0},
                      "suspend": {"suspend_rate_mib_s": 2.0, "resume_rate_mib_s": 3.0}}


def test_apply_calibration_replaces_the_configured_values():
    config = SchedulingConfig(live_migration_bandwidth=10.0, live_migration_dirty_factor=1.0, suspend_rate=32.0,
                              resume_rate=32.0, enactment_overhead=timedelta(seconds=3))
    stored = {"migration": {"bandwidth_mib_s": 87.5, "overhead_s": 1.25, "dirty_factor": 1.6},
              "suspend": {"suspend_rate_mib_s": 150.0, "suspend_overhead_s": 2.0, "resume_rate_mib_s": 210.0,
                          "resume_overhead_s": 1.0}}
    applied = apply_calibration(config, stored)
    assert applied.live_migration_bandwidth == 87.5
    assert applied.live_bandwidth == 87.5
    assert applied.live_migration_overhead == timedelta(seconds=1.25)
    assert applied.live_migration_dirty_factor == 1.6
    assert (applied.suspend_rate, applied.resume_rate) == (150.0, 210.0)
    assert applied.enactment_overhead == timedelta(seconds=3)   # left alone
    assert applied.migration_bandwidth == config.migration_bandwidth
    assert config.live_migration_bandwidth == 10.0              # the original is untouched (frozen)


def test_apply_calibration_with_nothing_or_one_section():
    config = SchedulingConfig(live_migration_dirty_factor=2.0)
    assert apply_calibration(config, None) is config
    assert apply_calibration(config, {}) is config
    only_migration = apply_calibration(config, {"migration": {"bandwidth_mib_s": 40.0, "overhead_s": 0.0,
                                                              "dirty_factor": None}})
    assert only_migration.live_migration_bandwidth == 40.0
    assert only_migration.live_migration_dirty_factor == 2.0    # not fitted: the configured value stays
    assert only_migration.suspend_rate == config.suspend_rate


@pytest.mark.parametrize(
    "stored",
    [{"migration": {"bandwidth_mib_s": 0, "overhead_s": 0}}, {"migration": {"bandwidth_mib_s": "fast"}},
     {"suspend": {"suspend_rate_mib_s": 10.0, "resume_rate_mib_s": -1}}, {"migration": [1, 2]}],
)
def test_apply_calibration_refuses_unusable_stored_values(stored):
    with pytest.raises(CalibrationError, match="calibration"):
        apply_calibration(SchedulingConfig(), stored)


# -- the command on the simulated driver ------------------------------------------------------------------
@pytest.fixture
def true_config(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(
        "[scheduling]\n"
        "live_migration_bandwidth = 80.0\n"
        "live_migration_overhead = 1.5\n"
        "live_migration_dirty_factor = 1.7\n"
        "suspend_rate = 150.0\n"
        "resume_rate = 220.0\n"
        "enactment_overhead = 2\n"
    )
    return path


@pytest.fixture
def cli(store_path, true_config):
    def invoke(*args: str, config: Path | None = true_config):
        argv = [*args, "--state", str(store_path)] + (["--config", str(config)] if config else [])
        return CliRunner().invoke(app, argv, env={"COLUMNS": "250"})

    return invoke


@pytest.fixture
def site(cli):
    for name in ("sim1", "sim2"):
        result = cli("host", "add", name, "--uri", f"sim://{name}", "--cpus", "8", "--memory", "16384")
        assert result.exit_code == 0, result.output
    return cli


def stored(store_path) -> dict:
    with Store.open(store_path) as store:
        return store.get_meta(CALIBRATION_KEY) or {}


def table_rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("│").split("│")] for line in text.splitlines()
            if line.startswith("│") and line.count("│") > 5]


def test_calibrate_migration_recovers_the_configured_model_prints_the_table_and_stores_it(site, store_path):
    result = site("calibrate", "migration", "--host", "sim1", "--host", "sim2")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "predicted vs measured" in out and "Fitted pre-copy model" in out
    rows = table_rows(out)
    assert [(r[0], r[1]) for r in rows] == [(str(m), str(p)) for m in SIZES for p in DIRTY_PPS]
    for row in rows:
        assert row[6] == "0.0%", row           # the model against itself: no error
    record = stored(store_path)["migration"]
    assert record["bandwidth_mib_s"] == pytest.approx(80.0, rel=0.05)
    assert record["overhead_s"] == pytest.approx(1.5, rel=0.05)
    assert record["dirty_factor"] == pytest.approx(1.7, rel=0.05)
    assert record["hosts"] == ["sim1", "sim2"]
    assert record["samples"] == 9 and record["driver"] == "simulated"
    assert record["max_downtime_ms"] == 300.0
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", record["at"])
    assert re.search(r"bandwidth MiB/s\s*│\s*80\.000\s*│\s*80\s*│", out)
    assert "stored in" in out


def test_calibrate_migration_with_repeats_custom_grid_and_downtime(site, store_path):
    result = site("calibrate", "migration", "--host", "sim2", "--host", "sim1", "--sizes", "256,1024",
                  "--dirty", "2000,0", "--repeat", "3", "--max-downtime", "50")
    assert result.exit_code == 0, result.output
    assert "sim2 -> sim1" in result.stdout and "sim1 -> sim2" in result.stdout   # alternating
    assert [r[3] for r in table_rows(result.stdout)] == ["3/3"] * 4
    record = stored(store_path)["migration"]
    assert record["samples"] == 12 and record["max_downtime_ms"] == 50.0
    assert record["bandwidth_mib_s"] == pytest.approx(80.0, rel=0.05)
    assert record["dirty_factor"] == pytest.approx(1.7, rel=0.05)


def test_calibrate_migration_shows_guests_that_never_converge(site, store_path, tmp_path):
    slow = tmp_path / "slow.toml"
    slow.write_text("[scheduling]\nlive_migration_bandwidth = 12.5\n")
    result = site("calibrate", "migration", "--host", "sim1", "--host", "sim2", "--timeout", "120", config=slow)
    assert result.exit_code == 0, result.output
    # 5000 pages/s = 19.5 MiB/s: faster than 12.5 MiB/s, so those migrations abort at the timeout
    aborted = [r for r in table_rows(result.stdout) if r[1] == "5000"]
    assert [r[3] for r in aborted] == ["0/1"] * 3 and all("aborted" in r[-1] for r in aborted)
    record = stored(store_path)["migration"]
    assert record["bandwidth_mib_s"] == pytest.approx(12.5, rel=0.05)
    assert record["dirty_factor"] == pytest.approx(1.0, rel=0.05)
    assert record["samples"] == 6


def test_calibrate_migration_without_dirty_rates_fits_no_factor(site, store_path):
    result = site("calibrate", "migration", "--host", "sim1", "--host", "sim2", "--dirty", "0")
    assert result.exit_code == 0, result.output
    assert "not fitted" in result.stdout
    assert stored(store_path)["migration"]["dirty_factor"] is None


def test_calibrate_suspend_recovers_the_configured_rates_and_keeps_the_migration_fit(site, store_path):
    assert site("calibrate", "migration", "--host", "sim1", "--host", "sim2").exit_code == 0
    result = site("calibrate", "suspend", "--host", "sim1", "--host", "sim2", "--sizes", "128,512,2048",
                  "--repeat", "2")
    assert result.exit_code == 0, result.output
    rows = table_rows(result.stdout)
    assert [(r[0], r[1], r[2]) for r in rows] == [(h, str(m), "2") for h in ("sim1", "sim2") for m in (128, 512, 2048)]
    assert all(r[5] == "0.0%" and r[8] == "0.0%" for r in rows)
    calibration = stored(store_path)
    record = calibration["suspend"]
    assert record["suspend_rate_mib_s"] == pytest.approx(150.0, rel=0.05)
    assert record["resume_rate_mib_s"] == pytest.approx(220.0, rel=0.05)
    assert record["suspend_overhead_s"] == pytest.approx(2.0, rel=0.05)
    assert record["hosts"] == ["sim1", "sim2"] and record["samples"] == 24
    assert "migration" in calibration                     # the other section is kept
    applied = apply_calibration(SchedulingConfig(), calibration)
    assert applied.suspend_rate == pytest.approx(150.0, rel=0.05)
    assert applied.live_bandwidth == pytest.approx(80.0, rel=0.05)


def test_dry_run_and_no_store_store_nothing(site, store_path, tmp_path):
    result = site("calibrate", "migration", "--host", "sim1", "--host", "sim2", "--no-store")
    assert result.exit_code == 0, result.output
    assert "not stored (--no-store)" in result.stdout
    assert stored(store_path) == {}
    # a dry run needs no store at all: hosts it does not know are simulated
    fresh = tmp_path / "none.sqlite"
    result = CliRunner().invoke(app, ["calibrate", "suspend", "--host", "x", "--dry-run", "--state", str(fresh)])
    assert result.exit_code == 0, result.output
    assert "not stored (--dry-run)" in result.stdout
    assert not fresh.exists()


def _drivers_of_calibrate(monkeypatch) -> list:
    """The drivers `calibrate` runs on, as it makes them."""
    from orchestrator.cli import calibrate as calibrate_cli

    drivers = []
    real_setup = calibrate_cli._setup

    def spy(*args, **kwargs):
        setup = real_setup(*args, **kwargs)
        drivers.append(setup.driver)
        return setup

    monkeypatch.setattr(calibrate_cli, "_setup", spy)
    return drivers


def _before_the_fourth_migration(monkeypatch, act) -> dict:
    """`act()` runs before the simulated driver's fourth migration; returns the count of migrations asked."""
    from drivers.simulated import SimulatedDriver

    calls = {"n": 0}
    real_migrate = SimulatedDriver.migrate

    def migrate(self, vm, dst, *a, **kw):
        calls["n"] += 1
        if calls["n"] == 4:
            act()
        return real_migrate(self, vm, dst, *a, **kw)

    monkeypatch.setattr(SimulatedDriver, "migrate", migrate)
    return calls


def test_the_simulated_hosts_are_left_empty(site, store_path, monkeypatch):
    drivers = _drivers_of_calibrate(monkeypatch)
    assert site("calibrate", "migration", "--host", "sim1", "--host", "sim2", "--repeat", "2").exit_code == 0
    assert site("calibrate", "suspend", "--host", "sim1").exit_code == 0
    assert len(drivers) == 2
    for driver in drivers:
        assert all(driver.list_vms(h) == [] for h in driver.hosts())


def test_a_failure_mid_way_removes_the_guests(site, store_path, monkeypatch):
    from drivers.errors import OperationFailed

    def fail():
        raise OperationFailed("the destination caught fire")

    drivers = _drivers_of_calibrate(monkeypatch)
    _before_the_fourth_migration(monkeypatch, fail)
    result = site("calibrate", "migration", "--host", "sim1", "--host", "sim2")
    assert result.exit_code == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "caught fire" in lines[0] and "removed" in lines[0]
    assert drivers[0].list_vms("sim1") == [] and drivers[0].list_vms("sim2") == []
    assert stored(store_path) == {}


def test_sigterm_mid_way_removes_the_guests_and_ends_as_ctrl_c_does(site, store_path, monkeypatch):
    """The CLI's SIGTERM handler (the campaign installs none) interrupts a run under way; the campaign still
    removes its guests, and the handler the process had before is back afterwards."""
    import os
    import signal

    before = signal.getsignal(signal.SIGTERM)
    drivers = _drivers_of_calibrate(monkeypatch)
    calls = _before_the_fourth_migration(monkeypatch, lambda: os.kill(os.getpid(), signal.SIGTERM))
    result = site("calibrate", "migration", "--host", "sim1", "--host", "sim2")
    assert result.exit_code == 130
    assert [line for line in result.stderr.splitlines() if line.strip()] == [
        "error: interrupted; the calibration guests were removed"]
    assert calls["n"] == 4
    assert drivers[0].list_vms("sim1") == [] and drivers[0].list_vms("sim2") == []
    assert stored(store_path) == {}
    assert signal.getsignal(signal.SIGTERM) is before


def test_calibrate_migration_validates_on_a_grid_it_was_not_fitted_to(store_path, tmp_path):
    config = tmp_path / "switch.toml"
    config.write_text("[scheduling]\nlive_migration_bandwidth = 114.0\nlive_migration_overhead = 0.8\n"
                      "live_migration_switchover_ms = 150\nlive_migration_dirty_factor = 1.3\n")
    runner = CliRunner()
    for name in ("sim1", "sim2"):
        assert runner.invoke(app, ["host", "add", name, "--uri", f"sim://{name}", "--cpus", "8", "--memory",
                                   "16384", "--state", str(store_path)]).exit_code == 0
    result = runner.invoke(app, ["calibrate", "migration", "--host", "sim1", "--host", "sim2", "--dirty",
                                 "0,1000,2500", "--validate", "192,384x500,1500", "--json", "--state",
                                 str(store_path), "--config", str(config)])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["fit"]["switchover_ms"] == pytest.approx(150.0, abs=1.0)
    # the training grid ran with the whole 300 ms as the job's limit: the switch-over took some pauses over it
    assert answer["in_sample"]["within_max_downtime"] < answer["in_sample"]["runs"] == 9
    validation = answer["validation"]
    assert validation["downtime_limit_ms"] == pytest.approx(150.0, abs=1.0)
    assert [(p["memory_mib"], p["dirty_pages_s"]) for p in validation["points"]] == [
        (192, 500), (192, 1500), (384, 500), (384, 1500)]
    summary = validation["summary"]
    assert summary["runs"] == 4 and summary["within_share"] == 1.0   # the limit left room for the switch-over
    assert summary["total_error_pct_p90"] < 0.1 and summary["downtime_error_ms_p90"] < 1.0
    assert stored(store_path)["migration"]["switchover_ms"] == pytest.approx(150.0, abs=1.0)


@given(memory_mib=st.integers(min_value=MIN_GUEST_MIB, max_value=1 << 20), pps=st.integers(0, 100_000))
def test_a_calibration_guest_leaves_its_kernel_room_and_keeps_a_working_set(memory_mib, pps):
    """A 128 MiB guest whose dirtier took half its memory was killed by its own OOM killer (Debian 12's cloud
    kernel leaves about 66 MiB free): the working set is half the memory, less where the kernel needs it."""
    spec = guest_spec("lwcal-x", memory_mib, pps, "/guest")
    working_set = int(spec.working_set_mib)
    assert memory_mib - working_set >= GUEST_SYSTEM_MIB
    assert working_set == min(memory_mib // 2, memory_mib - GUEST_SYSTEM_MIB) >= 48
    assert f"dirtier.mib={working_set} " in spec.cmdline and f"dirtier.pps={pps} " in spec.cmdline
    assert spec.memory_mib == memory_mib


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["migration", "--host", "sim1"], "--host"),
        (["migration", "--host", "sim1", "--host", "sim1"], "--host"),
        (["migration", "--host", "sim1", "--host", "sim2", "--host", "sim3"], "--host"),
        (["migration", "--host", "sim1", "--host", "nope"], "--host"),
        (["migration", "--host", "sim1", "--host", "sim2", "--sizes", "128"], "--sizes"),
        (["migration", "--host", "sim1", "--host", "sim2", "--sizes", "128,abc"], "--sizes"),
        (["migration", "--host", "sim1", "--host", "sim2", "--sizes", "0,128"], "--sizes"),
        (["migration", "--host", "sim1", "--host", "sim2", "--sizes", "64,256"], "--sizes"),
        (["suspend", "--host", "sim1", "--sizes", "127,256"], "--sizes"),
        (["migration", "--host", "sim1", "--host", "sim2", "--validate", "96x500"], "--validate"),
        (["migration", "--host", "sim1", "--host", "sim2", "--sizes", "128,128"], "--sizes"),
        (["migration", "--host", "sim1", "--host", "sim2", "--sizes", "128,65536"], "--sizes"),
        (["migration", "--host", "sim1", "--host", "sim2", "--disk-mib", "0"], "--disk-mib"),
        (["migration", "--host", "sim1", "--host", "sim2", "--disk-mib", "64,64"], "--disk-mib"),
        (["migration", "--host", "sim1", "--host", "sim2", "--disk-mib", "-64"], "--disk-mib"),
        (["migration", "--host", "sim1", "--host", "sim2", "--disk-mib", "64,"], "--disk-mib"),
        (["migration", "--host", "sim1", "--host", "sim2", "--disk-mib", "1e3"], "--disk-mib"),
        (["migration", "--host", "sim1", "--host", "sim2", "--disk-mib", "65537"], "--disk-mib"),
        (["migration", "--host", "sim1", "--host", "sim2", "--dirty", "1000,5000"], "--dirty"),
        (["migration", "--host", "sim1", "--host", "sim2", "--dirty", "0,-5"], "--dirty"),
        (["migration", "--host", "sim1", "--host", "sim2", "--repeat", "0"], "--repeat"),
        (["migration", "--host", "sim1", "--host", "sim2", "--max-downtime", "0"], "--max-downtime"),
        (["migration", "--host", "sim1", "--host", "sim2", "--timeout", "soon"], "--timeout"),
        (["migration", "--host", "sim1", "--host", "sim2", "--settle", "-1"], "--settle"),
        (["migration", "--host", "sim1", "--host", "sim2", "--dry-run", "--inventory", "x.toml"], "--inventory"),
        (["migration", "--host", "sim1", "--host", "sim2", "--validate", "192,384"], "--validate"),
        (["migration", "--host", "sim1", "--host", "sim2", "--validate", "192x"], "--validate"),
        (["migration", "--host", "sim1", "--host", "sim2", "--validate", "ax500"], "--validate"),
        (["migration", "--host", "sim1", "--host", "sim2", "--validate", "192x500x1"], "--validate"),
        (["suspend"], "--host"),
        (["suspend", "--host", "sim1", "--sizes", ","], "--sizes"),
        (["suspend", "--host", "sim1", "--state-dir", "relative/dir"], "--state-dir"),
        (["suspend", "--host", "ghost"], "--host"),
    ],
)
def test_bad_options_give_one_line_naming_the_option_and_exit_2(site, store_path, args, option):
    result = site("calibrate", *args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error:") and option in lines[0]
    assert stored(store_path) == {}


def test_no_store_is_one_line(tmp_path):
    result = CliRunner().invoke(app, ["calibrate", "migration", "--host", "a", "--host", "b",
                                      "--state", str(tmp_path / "missing.sqlite")])
    assert result.exit_code == 2
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert "--state" in line and "no store" in line
    assert not (tmp_path / "missing.sqlite").exists()


def test_an_unknown_inventory_host_is_one_line(tmp_path):
    from drivers.inventory import HostConfig, dump_inventory

    inventory = tmp_path / "inventory.toml"
    inventory.write_text(dump_inventory([HostConfig("t1", "test:///default"), HostConfig("t2", "test:///default")]))
    result = CliRunner().invoke(app, ["calibrate", "migration", "--host", "t1", "--host", "t9",
                                      "--inventory", str(inventory), "--state", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 2
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert "--host" in line and "t9" in line


def test_stored_value_is_plain_json(site, store_path):
    assert site("calibrate", "migration", "--host", "sim1", "--host", "sim2", "--sizes", "128,256").exit_code == 0
    raw = Store.open(store_path)
    try:
        value = raw.get_meta(CALIBRATION_KEY)
    finally:
        raw.close()
    assert json.loads(json.dumps(value)) == value
    assert set(value["migration"]) >= {"bandwidth_mib_s", "overhead_s", "dirty_factor", "hosts", "at", "samples"}


def test_calibrate_migration_with_disks_copies_them_first_and_predicts_it(site, store_path):
    """On the simulated driver (hosts keeping VM disks on their own storage) a guest with a disk is migrated
    with its overlay copied first: the predicted and measured times grow by the disk's copy at the bandwidth,
    the JSON and the table show the disk, and the fit still gives the configured model back."""
    result = site("calibrate", "migration", "--host", "sim1", "--host", "sim2", "--sizes", "128,256",
                  "--dirty", "0,1000", "--disk-mib", "0,64,512", "--json")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    points = {(p["memory_mib"], p["dirty_pages_s"], p["disk_mib"]): p for p in answer["points"]}
    assert sorted(points) == sorted((m, d, k) for m in (128, 256) for d in (0, 1000) for k in (0, 64, 512))
    for (memory, dirty, disk), point in points.items():
        measured, predicted = point["measured"], point["predicted"]
        assert measured["disk_copied_mib"] == (pytest.approx(disk) if disk else None)
        assert predicted["disk_mib"] == disk and predicted["disk_s"] == pytest.approx(disk / 80.0, rel=0.05)
        assert abs(predicted["error_pct"]) < 0.1
        if disk:   # the same guest without a disk takes the disk's copy less, predicted and measured
            bare = points[(memory, dirty, 0)]
            for what in (measured, predicted):
                grown = what["total_s"] - (bare["measured"] if what is measured else bare["predicted"])["total_s"]
                assert grown == pytest.approx(disk / 80.0, rel=0.05), (memory, dirty, disk)
    assert answer["fit"]["bandwidth_mib_s"] == pytest.approx(80.0, rel=0.05)
    assert stored(store_path)["migration"]["samples"] == 12
    table = site("calibrate", "migration", "--host", "sim1", "--host", "sim2", "--sizes", "128,256",
                 "--dirty", "0", "--disk-mib", "64", "--no-store")
    assert table.exit_code == 0, table.output
    assert "disk MiB" in table.stdout and "x disk 64 MiB" in table.stdout
    assert [(r[0], r[1]) for r in table_rows(table.stdout)] == [("128", "64"), ("256", "64")]
    assert "disk MiB" not in site("calibrate", "migration", "--host", "sim1", "--host", "sim2", "--no-store").stdout


def test_disks_on_hosts_that_share_them_are_refused_in_one_line(tmp_path):
    """A block migration between hosts whose VM disks are on storage both share would copy the overlay
    onto itself (Nova refuses it too): one line naming --disk-mib, exit 2, nothing started."""
    from drivers.inventory import HostConfig, dump_inventory

    inventory = tmp_path / "inventory.toml"
    shared = ["/var/lib/libvirt/images"]
    inventory.write_text(dump_inventory([HostConfig("t1", "test:///default", shared_storage=shared),
                                         HostConfig("t2", "test:///default", shared_storage=shared)]))
    result = CliRunner().invoke(app, ["calibrate", "migration", "--host", "t1", "--host", "t2", "--disk-mib", "64",
                                      "--inventory", str(inventory), "--state", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 2, result.output
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith("error: --disk-mib:") and "share" in line and "t1" in line and "t2" in line


def test_a_grid_point_whose_guest_died_keeps_its_prediction_and_says_so():
    from orchestrator.cli.calibrate_view import migration_rows
    from orchestrator.runtime.calibration.campaign import GridPoint

    [sample] = model_samples(114.0, 0.8, 1.3, sizes=(256,), pps=(2500,), switchover=150.0)
    point = GridPoint(256, 2500, samples=[dataclasses.replace(sample, guest_survived=False)])
    fit = fit_migration(model_samples(114.0, 0.8, 1.3, switchover=150.0))
    [row] = migration_rows([point], fit)
    assert row[1] == "0" and row[4] == "1/1 died"     # (no disk)
    assert row[5] == f"{fit.predict(sample).total_seconds:.2f}" and row[7].endswith("%")
    assert row[11] == f"{fit.predict(sample).passes}/{sample.iterations}"
