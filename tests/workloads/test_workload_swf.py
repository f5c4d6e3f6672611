"""SWF workloads: field mapping, options, skips, errors, and the two Parallel Workloads Archive samples."""

from __future__ import annotations

import gzip
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.config import Config, config_from_dict
from orchestrator.model.errors import WorkloadError
from orchestrator.model.lease import LeaseType
from orchestrator.model.resources import Resources
from orchestrator.model.timeutil import UTC
from orchestrator.workloads import load_workload, resolve_site
from orchestrator.workloads.swf import (
    SKIP_CANCELLED,
    SKIP_NO_PROCS,
    SKIP_NO_RUNTIME,
    SKIP_TOO_LARGE,
    parse_swf,
)
from tests.support.times import EPOCH as T0

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
KTH = DATA / "KTH-SP2-1996-2.1-cln.swf.gz"
NASA = DATA / "NASA-iPSC-1993-3.1-cln.swf.gz"

HEADER = "; Version: 2.2\n; Computer: test\n; MaxNodes: 8\n; MaxProcs: 8\n;\n"


def job(number, submit, run, procs, req_procs=None, req_time=-1, status=1, user=3, alloc=None) -> str:
    """One SWF data line; unset fields are -1 as in the archive."""
    alloc = procs if alloc is None else alloc
    req_procs = procs if req_procs is None else req_procs
    fields = [number, submit, 0, run, alloc, -1, -1, req_procs, req_time, -1, status, user, 1, -1, 1, -1, -1, -1]
    return " ".join(f"{f:>6}" for f in fields)


def swf(*lines: str, header: str = HEADER) -> str:
    return header + "\n".join(lines) + "\n"


def config(**swf_opts) -> Config:
    return config_from_dict({"workload": {"swf": swf_opts}}) if swf_opts else Config()


# -- mapping ----------------------------------------------------------------------------------------------
def test_fields_map_to_an_exact_request():
    w = parse_swf(swf(job(42, 120, 3600, 4, req_time=7200, user=17)), source="t.swf")
    assert w.source == "t.swf"
    assert [lid for lid, _ in w.requests] == ["42"]
    r = w.requests[0][1]
    assert r.type is LeaseType.BEST_EFFORT
    assert r.submit_time == T0 + timedelta(seconds=120)
    assert r.start is None
    assert r.nodes == (Resources(100, 1024),) * 4
    assert r.duration == timedelta(hours=2)
    assert r.real_duration == timedelta(hours=1)
    assert r.preemptible is True
    assert r.user == "17"
    assert r.image is None


def test_requested_time_missing_uses_run_time():
    r = parse_swf(swf(job(1, 0, 900, 1, req_time=-1))).requests[0][1]
    assert r.duration == r.real_duration == timedelta(seconds=900)


def test_requested_time_shorter_than_run_time_is_raised_to_the_run_time():
    r = parse_swf(swf(job(1, 0, 900, 1, req_time=600))).requests[0][1]
    assert r.duration == timedelta(seconds=900)
    assert r.real_duration == timedelta(seconds=900)


def test_requested_processors_missing_uses_allocated():
    r = parse_swf(swf(job(1, 0, 60, 0, req_procs=-1, alloc=3))).requests[0][1]
    assert r.numnodes == 3


def test_requested_processors_win_over_allocated():
    r = parse_swf(swf(job(1, 0, 60, 0, req_procs=2, alloc=6))).requests[0][1]
    assert r.numnodes == 2


def test_unknown_user_is_empty():
    assert parse_swf(swf(job(1, 0, 60, 1, user=-1))).requests[0][1].user == ""


def test_decimal_fields_are_accepted():
    r = parse_swf(swf(job(1, "10.5", "60.25", 1))).requests[0][1]
    assert r.submit_time == T0 + timedelta(seconds=10.5)
    assert r.real_duration == timedelta(seconds=60.25)


def test_start_follows_the_configuration():
    start = datetime(1996, 9, 23, 12, 0, 31, tzinfo=UTC)
    cfg = config_from_dict({"simulation": {"start": start}})
    assert parse_swf(swf(job(1, 30, 60, 1)), cfg).requests[0][1].submit_time == start + timedelta(seconds=30)


def test_requests_sorted_by_submit_time_stably():
    w = parse_swf(swf(job(1, 50, 60, 1), job(2, 10, 60, 1), job(3, 50, 60, 1), job(4, 10, 60, 1)))
    assert [lid for lid, _ in w.requests] == ["2", "4", "1", "3"]


# -- options ----------------------------------------------------------------------------------------------
def test_processors_per_node_groups_processors_into_vms():
    w = parse_swf(swf(job(1, 0, 60, 10), job(2, 0, 60, 4), job(3, 0, 60, 1), job(4, 0, 60, 13),
                      header="; MaxNodes: 14\n; MaxProcs: 14\n"), config(processors_per_node=4))
    assert [r.numnodes for _, r in w.requests] == [3, 1, 1, 4]
    assert {node for _, r in w.requests for node in r.nodes} == {Resources(400, 1024)}
    # the header site is MaxProcs (14) processors in hosts of 4: ceil(14 / 4) = 4 hosts; 13 processors need 4 VMs
    assert w.site == [(f"host{i}", Resources(400, 1024)) for i in range(1, 5)]
    assert w.skipped == {}
    w = parse_swf(swf(job(1, 0, 60, 10), header="; MaxProcs: 8\n"), config(processors_per_node=4))
    assert w.requests == [] and w.skipped == {SKIP_TOO_LARGE: 1}  # 3 VMs, 2 hosts


def test_memory_per_vm():
    w = parse_swf(swf(job(1, 0, 60, 2)), config(memory_per_vm=3072))
    assert w.requests[0][1].nodes == (Resources(100, 3072),) * 2
    assert w.site[0] == ("host1", Resources(100, 3072))


def test_preemptible_option():
    assert parse_swf(swf(job(1, 0, 60, 1)), config(preemptible=False)).requests[0][1].preemptible is False


def test_first_n_counts_leases_not_lines():
    lines = [job(1, 0, 60, 1, status=5), job(2, 1, 0, 1)] + [job(n, n, 60, 1) for n in range(3, 10)]
    w = parse_swf(swf(*lines), config(first=3))
    assert [lid for lid, _ in w.requests] == ["3", "4", "5"]
    assert w.skipped == {SKIP_CANCELLED: 1, SKIP_NO_RUNTIME: 1}


def test_window_keeps_half_open_interval_and_shifts_to_the_start():
    lines = [job(n, n * 100, 60, 1) for n in range(1, 8)]  # submits 100..700
    w = parse_swf(swf(*lines), config(window_start=200, window_end=500))
    assert [lid for lid, _ in w.requests] == ["2", "3", "4"]
    assert [r.submit_time for _, r in w.requests] == [T0, T0 + timedelta(seconds=100), T0 + timedelta(seconds=200)]


def test_window_start_only():
    w = parse_swf(swf(job(1, 100, 60, 1), job(2, 7200, 60, 1)), config(window_start="1h"))
    assert [(lid, r.submit_time) for lid, r in w.requests] == [("2", T0 + timedelta(hours=1))]


# -- skips ------------------------------------------------------------------------------------------------
def test_cancelled_jobs_are_skipped_and_counted():
    w = parse_swf(swf(job(1, 0, 60, 1, status=5), job(2, 0, 60, 1, status=0), job(3, 0, 60, 1, status=5)))
    assert [lid for lid, _ in w.requests] == ["2"]
    assert w.skipped == {SKIP_CANCELLED: 2}


def test_jobs_without_run_time_or_processors_are_skipped_and_counted():
    w = parse_swf(swf(job(1, 0, 0, 1), job(2, 0, -1, 1), job(3, 0, 60, 0, req_procs=-1, alloc=-1),
                      job(4, 0, 60, 0, req_procs=0, alloc=0), job(5, 0, 60, 1)))
    assert [lid for lid, _ in w.requests] == ["5"]
    assert w.skipped == {SKIP_NO_RUNTIME: 2, SKIP_NO_PROCS: 2}


def test_jobs_larger_than_the_site_are_skipped():
    w = parse_swf(swf(job(1, 0, 60, 9), job(2, 0, 60, 8)))
    assert [lid for lid, _ in w.requests] == ["2"]
    assert w.skipped == {SKIP_TOO_LARGE: 1}


def test_configured_site_wins_over_the_header():
    cfg = config_from_dict({"simulation": {"site": "2 CPU:100,Memory:1024"}})
    w = parse_swf(swf(job(1, 0, 60, 2), job(2, 0, 60, 3)), cfg)
    assert [lid for lid, _ in w.requests] == ["1"]
    assert w.skipped == {SKIP_TOO_LARGE: 1}
    assert len(w.site) == 8  # the header's site is still reported
    assert resolve_site(w, cfg) == [("host1", Resources(100, 1024)), ("host2", Resources(100, 1024))]


def test_configured_hosts_too_small_for_a_vm_count_as_no_room():
    cfg = config_from_dict({"simulation": {"site": "4 CPU:100,Memory:512"}})
    w = parse_swf(swf(job(1, 0, 60, 1)), cfg)  # a VM needs 1024 MiB
    assert w.requests == [] and w.skipped == {SKIP_TOO_LARGE: 1}


def test_site_from_maxprocs_or_maxnodes():
    assert len(parse_swf(swf(job(1, 0, 60, 1), header="; MaxNodes: 16\n; MaxProcs: 64\n")).site) == 64
    assert len(parse_swf(swf(job(1, 0, 60, 1), header="; MaxNodes: 16\n")).site) == 16
    w = parse_swf(swf(job(1, 0, 60, 500), header="; Computer: none\n"))
    assert w.site is None and w.requests[0][1].numnodes == 500  # no site: nothing to check against


# -- errors ---------------------------------------------------------------------------------------------
def test_malformed_line_names_file_and_line():
    text = swf(job(1, 0, 60, 1), "", "  2 0 0 60 1")
    with pytest.raises(WorkloadError) as info:
        parse_swf(text, source="t.swf")
    assert str(info.value) == "t.swf:8: fields: expected 18 whitespace-separated fields, got 5"
    assert info.value.where == "t.swf:8"


def test_non_numeric_field_is_named():
    bad = job(7, 0, 60, 1).replace("    60", "  6O  ", 1)
    with pytest.raises(WorkloadError) as info:
        parse_swf(swf(job(1, 0, 60, 1), bad), source="t.swf")
    assert str(info.value) == "t.swf:7: run_time (field 4): '6O' is not a number"


def test_duplicate_job_number():
    with pytest.raises(WorkloadError, match=r"^t\.swf:7: job_number \(field 1\): job 1 appears twice \(first on line 6\)$"):
        parse_swf(swf(job(1, 0, 60, 1), job(1, 5, 60, 1)), source="t.swf")


def test_empty_file():
    w = parse_swf("", source="t.swf")
    assert w.requests == [] and w.site is None and w.skipped == {}


# -- property: whatever the trace, leases satisfy the mapping ----------------------------------------------
job_strategy = st.tuples(
    st.integers(0, 10**6),            # submit
    st.integers(-1, 10**5),           # run time
    st.integers(-1, 20),              # requested processors
    st.integers(-1, 10**5),           # requested time
    st.sampled_from([0, 1, 5, -1]),   # status
)


@settings(max_examples=60, deadline=None)
@given(st.lists(job_strategy, max_size=30), st.integers(1, 4))
def test_mapping_property(jobs, ppn):
    lines = [job(n, s, run, max(p, 0), req_procs=p, alloc=max(p, 0), req_time=rt, status=status)
             for n, (s, run, p, rt, status) in enumerate(jobs, start=1)]
    w = parse_swf(swf(*lines, header="; MaxProcs: 16\n"), config(processors_per_node=ppn))
    kept = {str(n): spec for n, spec in enumerate(jobs, start=1)}
    assert len(w.requests) + sum(w.skipped.values()) == len(jobs)
    for lid, r in w.requests:
        s, run, p, rt, status = kept[lid]
        assert status != 5 and run > 0 and p > 0
        assert r.numnodes == -(-p // ppn) <= -(-16 // ppn)
        assert r.nodes[0] == Resources(ppn * 100, 1024)
        assert r.real_duration == timedelta(seconds=run)
        assert r.duration == timedelta(seconds=max(run, rt if rt > 0 else run)) >= r.real_duration
        assert r.submit_time == T0 + timedelta(seconds=s)
    times = [r.submit_time for _, r in w.requests]
    assert times == sorted(times)


# -- the Parallel Workloads Archive samples ------------------------------------------------------------------


def test_kth_sp2_loads_with_the_expected_counts():
    w = load_workload(KTH)
    # 28,476 data lines: 8 with run time 0, 1 with no processors, no status-5 jobs.
    assert len(w.requests) == 28467
    assert w.skipped == {SKIP_NO_RUNTIME: 8, SKIP_NO_PROCS: 1}
    assert len(w.requests) + sum(w.skipped.values()) == 28476
    assert w.site == [(f"host{i}", Resources(100, 1024)) for i in range(1, 101)]  # MaxNodes = MaxProcs = 100
    first_id, first = w.requests[0]
    assert first_id == "15"
    assert first.submit_time == T0 + timedelta(seconds=599850)
    assert first.numnodes == 4 and first.duration == timedelta(seconds=53940)
    assert first.real_duration == timedelta(seconds=3477)
    assert max(r.numnodes for _, r in w.requests) == 100
    assert sum(r.duration < r.real_duration for _, r in w.requests) == 0


def test_nasa_ipsc_loads_with_the_expected_counts():
    w = load_workload(NASA)
    assert len(w.requests) == 18066
    assert w.skipped == {SKIP_NO_RUNTIME: 173}
    assert len(w.site) == 128
    lid, first = w.requests[0]
    assert (lid, first.numnodes, first.duration, first.submit_time) == ("1", 128, timedelta(seconds=1451), T0)


def test_kth_first_and_window_options():
    w = load_workload(KTH, config(first=100))
    assert len(w.requests) == 100 and w.requests[0][0] == "15"
    day = 86400
    w = load_workload(KTH, config(window_start=7 * day, window_end=8 * day))
    assert w.requests and all(T0 <= r.submit_time < T0 + timedelta(days=1) for _, r in w.requests)


def test_plain_and_gzip_swf_give_the_same_workload(tmp_path):
    text = swf(job(1, 0, 60, 2), job(2, 30, 120, 1, status=5))
    plain = tmp_path / "t.swf"
    plain.write_text(text)
    packed = tmp_path / "t.swf.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    a, b = load_workload(plain), load_workload(packed)
    assert a.requests == b.requests and a.skipped == b.skipped == {SKIP_CANCELLED: 1}
    assert [lid for lid, _ in a.requests] == ["1"]
