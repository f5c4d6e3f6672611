"""Configuration: defaults, every accepted form, every rejection (one line, naming the key)."""

from __future__ import annotations

import dataclasses
import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.config import (
    AuthConfig,
    ClientConfig,
    CommandConfig,
    Config,
    EmailConfig,
    NotifyConfig,
    SchedulingConfig,
    ServeConfig,
    SimulationConfig,
    SWFConfig,
    config_from_dict,
    load_config,
    parse_site,
)
from orchestrator.model.errors import ConfigError
from orchestrator.model.resources import Resources
from orchestrator.model.timeutil import UTC

ROOT = Path(__file__).resolve().parents[2]
BAD_CONFIGS = sorted((ROOT / "tests" / "data" / "bad_configs").glob("*.toml"))


def write(tmp_path: Path, text: str, name: str = "config.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(data: dict) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        config_from_dict(data)
    return info.value


# -- defaults ---------------------------------------------------------------------------------------------
def test_defaults_match_the_documented_values():
    config = load_config(None)
    s = config.scheduling
    assert (s.backfilling, s.suspension, s.suspend_rate, s.resume_rate) == ("aggressive", "all", 32.0, 32.0)
    assert (s.suspendresume_exclusion, s.migration, s.migration_bandwidth) == ("local", "yes", 12.5)
    assert s.shutdown_time == timedelta(0)
    assert s.enactment_overhead == timedelta(0)
    assert s.non_schedulable_interval == timedelta(0)
    assert s.scheduling_threshold_factor == 1.0
    assert (s.force_scheduling_threshold, s.override_suspend_time, s.override_resume_time) == (None, None, None)
    assert (s.policy_admission, s.policy_preemption, s.policy_host_selection) == ("accept-all", "ar-preempts-be", "greedy")
    assert s.on_enactment_error == "fail-lease"
    assert s.max_in_future == 1
    assert config.simulation.start == datetime(2026, 1, 1, tzinfo=UTC)
    assert config.simulation.site is None and config.simulation.hosts is None
    w = config.swf
    assert (w.processors_per_node, w.memory_per_vm, w.first, w.window_start, w.window_end, w.preemptible) == (
        1, 1024, None, None, None, True)


def test_empty_file_and_empty_dict_give_the_defaults(tmp_path):
    assert load_config(write(tmp_path, "")) == Config()
    assert config_from_dict({}) == Config()
    assert config_from_dict({"workload": {}}) == Config()


def test_config_objects_are_immutable():
    config = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.scheduling.backfilling = "off"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.scheduling = SchedulingConfig()  # type: ignore[misc]


def test_replace_revalidates():
    changed = dataclasses.replace(SchedulingConfig(), backfilling="off")
    assert changed.max_in_future == 0
    with pytest.raises(ConfigError, match=r"^scheduling\.backfilling: "):
        dataclasses.replace(SchedulingConfig(), backfilling="sometimes")


# -- backfilling -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value, expected", [("off", 0), ("aggressive", 1), ("conservative", -1), (0, 0), (5, 5), ("7", 7)])
def test_max_in_future(value, expected):
    config = config_from_dict({"scheduling": {"backfilling": value}})
    assert config.scheduling.max_in_future == expected


@given(st.integers(min_value=0, max_value=10**6))
def test_any_nonnegative_backfilling_depth_is_kept(n):
    scheduling = SchedulingConfig(backfilling=n)
    assert scheduling.backfilling == n and scheduling.max_in_future == n


@pytest.mark.parametrize("value", [-1, True, 1.5, "eager", None])
def test_bad_backfilling_names_the_key_and_the_choices(value):
    err = error_of({"scheduling": {"backfilling": value}})
    assert err.field == "scheduling.backfilling"
    assert '"off", "aggressive", "conservative" or an integer >= 0' in str(err)


# -- enumerations -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("key, good, allowed", [
    ("suspension", "serial", '"none", "serial", "all"'),
    ("suspendresume_exclusion", "global", '"local", "global"'),
    ("migration", "yes-notransfer", '"no", "yes", "yes-notransfer"'),
    ("on_enactment_error", "stop", '"fail-lease", "stop"'),
])
def test_enumerations_accept_their_values_and_list_them_on_error(key, good, allowed):
    assert getattr(config_from_dict({"scheduling": {key: good}}).scheduling, key) == good
    err = error_of({"scheduling": {key: "bogus"}})
    assert str(err) == f"scheduling.{key}: must be one of {allowed} (got 'bogus')"
    err = error_of({"scheduling": {key: 3}})
    assert str(err) == f"scheduling.{key}: must be one of {allowed} (got a number)"


def test_enumeration_typo_gets_a_suggestion():
    err = error_of({"scheduling": {"suspension": "serail"}})
    assert "did you mean 'serial'?" in str(err)


# -- numbers ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["suspend_rate", "resume_rate", "migration_bandwidth"])
def test_rates_must_be_positive_numbers(key):
    assert getattr(config_from_dict({"scheduling": {key: 100}}).scheduling, key) == 100.0
    for bad in (0, -1.5):
        assert error_of({"scheduling": {key: bad}}).field == f"scheduling.{key}"
    assert str(error_of({"scheduling": {key: True}})) == f"scheduling.{key}: must be a number greater than zero (got a boolean)"
    assert str(error_of({"scheduling": {key: float("nan")}})) == f"scheduling.{key}: must be a finite number (got nan)"


def test_threshold_factor_may_be_zero_but_not_negative():
    assert config_from_dict({"scheduling": {"scheduling_threshold_factor": 0}}).scheduling.scheduling_threshold_factor == 0.0
    err = error_of({"scheduling": {"scheduling_threshold_factor": -0.5}})
    assert str(err) == "scheduling.scheduling_threshold_factor: must not be negative (got -0.5)"


# -- durations -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value, expected", [
    (30, timedelta(seconds=30)),
    (1.5, timedelta(seconds=1.5)),
    ("30s", timedelta(seconds=30)),
    ("5m", timedelta(minutes=5)),
    ("1h30m", timedelta(hours=1, minutes=30)),
    ("01:00:00", timedelta(hours=1)),
    ("1:02:03:04", timedelta(days=1, hours=2, minutes=3, seconds=4)),
    ("0", timedelta(0)),
])
def test_duration_forms(value, expected):
    assert config_from_dict({"scheduling": {"shutdown_time": value}}).scheduling.shutdown_time == expected


def test_toml_local_time_is_a_duration(tmp_path):
    config = load_config(write(tmp_path, "[scheduling]\nenactment_overhead = 00:01:30\n"))
    assert config.scheduling.enactment_overhead == timedelta(minutes=1, seconds=30)


@pytest.mark.parametrize("key", ["force_scheduling_threshold", "override_suspend_time", "override_resume_time"])
def test_optional_durations(key):
    assert getattr(config_from_dict({}).scheduling, key) is None
    assert getattr(config_from_dict({"scheduling": {key: "2m"}}).scheduling, key) == timedelta(minutes=2)


@pytest.mark.parametrize("key", ["shutdown_time", "enactment_overhead", "non_schedulable_interval",
                                 "force_scheduling_threshold", "override_suspend_time", "override_resume_time"])
@pytest.mark.parametrize("value", [-1, "-5m", "-00:00:10"])
def test_negative_durations_are_refused(key, value):
    err = error_of({"scheduling": {key: value}})
    assert err.field == f"scheduling.{key}"
    assert "must not be negative" in str(err)


@pytest.mark.parametrize("value, problem", [
    ("soon", "'soon' is not a duration"),
    (True, "got a boolean"),
    ([1], "got an array"),
])
def test_bad_durations_name_the_key(value, problem):
    err = error_of({"scheduling": {"shutdown_time": value}})
    assert str(err).startswith("scheduling.shutdown_time: ")
    assert problem in str(err)


@given(st.integers(min_value=0, max_value=10 * 86400))
def test_duration_seconds_and_clock_forms_agree(seconds):
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    as_number = config_from_dict({"scheduling": {"shutdown_time": seconds}}).scheduling.shutdown_time
    as_clock = config_from_dict({"scheduling": {"shutdown_time": f"{h:02d}:{m:02d}:{s:02d}"}}).scheduling.shutdown_time
    as_unit = config_from_dict({"scheduling": {"shutdown_time": f"{seconds}s"}}).scheduling.shutdown_time
    assert as_number == as_clock == as_unit == timedelta(seconds=seconds)


# -- policies ---------------------------------------------------------------------------------------------
def test_policy_names_are_any_non_empty_string():
    config = config_from_dict({"scheduling": {"policy_admission": "my-own-policy", "policy_host_selection": " spread "}})
    assert config.scheduling.policy_admission == "my-own-policy"
    assert config.scheduling.policy_host_selection == "spread"
    assert str(error_of({"scheduling": {"policy_preemption": "  "}})) == \
        "scheduling.policy_preemption: must be a non-empty string (got the string '  ')"
    assert error_of({"scheduling": {"policy_preemption": 1}}).field == "scheduling.policy_preemption"


# -- [simulation] -----------------------------------------------------------------------------------------
def test_start_from_toml_datetime_is_converted_to_utc(tmp_path):
    config = load_config(write(tmp_path, "[simulation]\nstart = 2026-03-01T10:00:00+02:00\n"))
    assert config.simulation.start == datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
    assert config.simulation.start.tzinfo == UTC


def test_start_from_iso_string():
    config = config_from_dict({"simulation": {"start": "2026-02-01T12:30:00Z"}})
    assert config.simulation.start == datetime(2026, 2, 1, 12, 30, tzinfo=UTC)


def test_naive_start_is_refused_in_every_form(tmp_path):
    with pytest.raises(ConfigError, match=r"simulation\.start: 2026-01-01T00:00:00 has no time zone"):
        load_config(write(tmp_path, "[simulation]\nstart = 2026-01-01T00:00:00\n"))
    assert error_of({"simulation": {"start": "2026-01-01T00:00:00"}}).field == "simulation.start"
    with pytest.raises(ConfigError, match=r"^simulation\.start: "):
        SimulationConfig(start=datetime(2026, 1, 1))
    with pytest.raises(ConfigError, match=r"simulation\.start: must be a date-time .* \(got a date\)"):
        load_config(write(tmp_path, "[simulation]\nstart = 2026-01-01\n", "date.toml"))


@pytest.mark.parametrize("text", ["4 CPU:100,Memory:1024", "4  CPU:100 Memory:1024", " 4 cpu:100, memory:1024 "])
def test_site_notation(text):
    hosts = config_from_dict({"simulation": {"site": text}}).simulation.hosts
    assert hosts == [(f"host{i}", Resources(100, 1024)) for i in range(1, 5)]


def test_site_with_every_resource():
    hosts = parse_site("2 CPU:400,Memory:8192,Disk:100000,Net-in:125,Net-out:125")
    assert hosts == [("host1", Resources(400, 8192, 100000, 125, 125)), ("host2", Resources(400, 8192, 100000, 125, 125))]


def test_hosts_is_a_fresh_list():
    sim = SimulationConfig(site="2 CPU:100,Memory:512")
    sim.hosts.clear()  # type: ignore[union-attr]
    assert len(sim.hosts) == 2  # type: ignore[arg-type]


@pytest.mark.parametrize("text, field, fragment", [
    ("CPU:100,Memory:1024", "simulation.site", "is not \"NUMHOSTS CPU:amount"),
    ("0 CPU:100,Memory:1024", "simulation.site", "needs at least one host (got 0)"),
    ("2 CPU:100", "simulation.site", "must give at least CPU and Memory"),
    ("2 CPU:100,Memory:lots", "simulation.site.memory", "'lots' is not a number"),
    ("2 CPU:0,Memory:1024", "simulation.site.cpu", "must be greater than zero"),
    ("2 CPU:100,Memory:1024,GPU:1", "simulation.site", "'GPU:1' is not RESOURCE:AMOUNT"),
])
def test_bad_site(text, field, fragment):
    err = error_of({"simulation": {"site": text}})
    assert err.field == field
    assert fragment in str(err)


# -- [workload.swf] ---------------------------------------------------------------------------------------
def test_swf_options(tmp_path):
    config = load_config(write(tmp_path, """
[workload.swf]
processors_per_node = 4
memory_per_vm = 2048
first = 100
window_start = "1d"
window_end = 172800
preemptible = false
"""))
    assert config.swf == SWFConfig(processors_per_node=4, memory_per_vm=2048, first=100,
                                   window_start=86400.0, window_end=172800.0, preemptible=False)


@pytest.mark.parametrize("key, value, problem", [
    ("processors_per_node", 0, "must be an integer >= 1 (got 0)"),
    ("processors_per_node", 1.5, "must be an integer >= 1 (got a number 1.5)"),
    ("memory_per_vm", -1, "must be an integer >= 1 (got -1)"),
    ("first", 0, "must be an integer >= 1 (got 0)"),
    ("preemptible", "yes", "must be true or false (got the string 'yes')"),
    ("window_start", -5, "must not be negative (got -5)"),
])
def test_bad_swf_options(key, value, problem):
    assert str(error_of({"workload": {"swf": {key: value}}})) == f"workload.swf.{key}: {problem}"


def test_swf_window_must_be_ordered():
    err = error_of({"workload": {"swf": {"window_start": 100, "window_end": 100}}})
    assert str(err) == "workload.swf.window_end: must be after window_start (100 s <= 100 s)"


# -- unknown tables and keys ------------------------------------------------------------------------------
@pytest.mark.parametrize("data, message", [
    ({"scheduling": {"backfiling": "off"}}, "scheduling.backfiling: unknown key (did you mean backfilling?)"),
    ({"scheduling": {"suspend-rate": 1}}, "scheduling.suspend-rate: unknown key (did you mean suspend_rate?)"),
    ({"scheduling": {"zzz": 1}}, "scheduling.zzz: unknown key"),
    ({"simulaton": {}}, "simulaton: unknown table (did you mean simulation?)"),
    ({"workload": {"swff": {}}}, "workload.swff: unknown table (did you mean workload.swf?)"),
    ({"workload": {"first": 3}}, "workload.first: unknown key (it belongs in [workload.swf])"),
    ({"workload": {"zzz": 3}}, "workload.zzz: unknown key"),
    ({"workload": {"swf": {"frist": 3}}}, "workload.swf.frist: unknown key (did you mean first?)"),
    ({"suspension": "none"}, "suspension: unknown key at the top level (it belongs in [scheduling])"),
    ({"scheduling": 3}, "scheduling: must be a table, written [scheduling] (got a number)"),
    ({"simulation": {"_hosts": []}}, "simulation._hosts: unknown key"),
])
def test_unknown_names_are_refused_with_a_suggestion(data, message):
    assert str(error_of(data)) == message


def test_errors_from_a_file_are_prefixed_with_its_name(tmp_path):
    path = write(tmp_path, "[scheduling]\nbackfiling = 'off'\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: scheduling.backfiling: unknown key (did you mean backfilling?)"
    assert info.value.field == "scheduling.backfiling"


def test_toml_syntax_error_gives_file_and_line(tmp_path):
    path = write(tmp_path, "[scheduling]\nbackfilling = 'off'\n\nsuspension = \n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert re.fullmatch(re.escape(f"{path}:4: not valid TOML (") + r".+\)", str(info.value)), str(info.value)


def test_missing_file_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.toml: cannot read the configuration file \(no such file\)$"):
        load_config(tmp_path / "nope.toml")


# -- the example and the documentation ---------------------------------------------------------------------
def test_example_config_loads_and_sets_what_it_says():
    config = load_config(ROOT / "examples" / "config.toml")
    assert config.simulation.hosts == [(f"host{i}", Resources(100, 1024)) for i in range(1, 5)]
    # apart from the site, the example spells out the defaults
    assert config.scheduling == SchedulingConfig()
    assert config.swf == SWFConfig()
    assert config.simulation.start == Config().simulation.start
    assert config.notify == NotifyConfig()
    assert (config.auth, config.serve, config.client) == (AuthConfig(), ServeConfig(), ClientConfig())
    assert config.daemon == type(config.daemon)()


@pytest.mark.parametrize("table, cls", [("scheduling", SchedulingConfig), ("simulation", SimulationConfig),
                                        ("workload.swf", SWFConfig), ("daemon", type(Config().daemon)),
                                        ("notify", NotifyConfig),
                                        ("notify.email", EmailConfig), ("notify.command", CommandConfig),
                                        ("auth", AuthConfig), ("serve", ServeConfig), ("client", ClientConfig)])
def test_every_key_is_documented_and_in_the_example(table, cls):
    doc = (ROOT / "docs" / "configuration.md").read_text()
    example = (ROOT / "examples" / "config.toml").read_text()
    assert f"## `[{table}]`" in doc
    assert f"[{table}]" in example
    for f in dataclasses.fields(cls):
        if not f.init or dataclasses.is_dataclass(f.default_factory):   # (a table of its own: [notify.email])
            continue
        assert f"| `{f.name}` |" in doc, f"{table}.{f.name} missing from docs/configuration.md"
        assert re.search(rf"^#? ?{f.name} = ", example, re.M), f"{table}.{f.name} missing from examples/config.toml"


# -- the malformed-config corpus ----------------------------------------------------------------------------
@pytest.mark.parametrize("path", BAD_CONFIGS, ids=[p.name for p in BAD_CONFIGS])
def test_bad_config_corpus(path):
    first = path.read_text().splitlines()[0]
    assert first.startswith("# error: "), f"{path.name} must start with '# error: <expected message>'"
    expected = first[len("# error: "):].replace("{file}", str(path))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message == expected
    assert "\n" not in message
    assert info.value.field and info.value.field in message


def test_corpus_is_not_empty():
    assert len(BAD_CONFIGS) >= 15
