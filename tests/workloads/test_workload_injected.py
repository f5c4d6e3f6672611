"""Injected leases (the reference's older one-lease-a-line format): exact parsed values, how `load_workload`
tells it from LWF XML, and the merge into a trace. (Malformed files are in tests/data/bad_workloads/.)"""

from __future__ import annotations

import gzip
from datetime import timedelta
from pathlib import Path

import pytest

from orchestrator.config import config_from_dict
from orchestrator.model.errors import WorkloadError
from orchestrator.model.lease import LeaseType, VMImage
from orchestrator.model.resources import Resources
from orchestrator.workloads import load_workload
from orchestrator.workloads.injected import inject, parse_injected
from orchestrator.workloads.swf import parse_swf
from tests.support.times import EPOCH

ROOT = Path(__file__).resolve().parents[2]
BLUE = ROOT / "examples" / "sweeps" / "data" / "blue"

TWO_LEASES = """\
# submit start duration realduration numnodes cpu memory disk image image_size
0 3600 7200 5400 4 1 1024 0 'NONE.img' 600

120 -1 600 300 2 0.5 512 10 "base.img" 100
"""


def test_a_line_with_a_start_is_an_advance_reservation_not_preemptible():
    workload = parse_injected(TWO_LEASES, source="ars.lwf")
    lease_id, ar = workload.requests[0]
    assert lease_id == "1"
    assert ar.type is LeaseType.ADVANCE_RESERVATION and ar.preemptible is False
    assert ar.submit_time == EPOCH and ar.start == EPOCH + timedelta(hours=1)
    assert ar.duration == timedelta(hours=2) and ar.real_duration == timedelta(minutes=90)
    assert ar.nodes == (Resources(cpu=100, memory=1024),) * 4
    assert ar.image == VMImage(disk="NONE.img", size_mib=600)


def test_start_minus_one_is_a_preemptible_best_effort_lease_and_cpu_counts_whole_cpus():
    lease_id, be = parse_injected(TWO_LEASES, source="ars.lwf").requests[1]
    assert lease_id == "2"
    assert be.type is LeaseType.BEST_EFFORT and be.preemptible is True and be.start is None
    assert be.submit_time == EPOCH + timedelta(seconds=120)
    assert be.nodes == (Resources(cpu=50, memory=512, disk=10),) * 2
    assert be.image == VMImage(disk="base.img", size_mib=100)


def test_times_count_from_the_configured_start():
    config = config_from_dict({"simulation": {"start": "2026-03-01T12:00:00Z"}})
    _, ar = parse_injected(TWO_LEASES, config, source="ars.lwf").requests[0]
    assert ar.start.isoformat() == "2026-03-01T13:00:00+00:00"


def test_a_lease_larger_than_the_configured_site_names_its_line():
    config = config_from_dict({"simulation": {"site": "3 CPU:100,Memory:1024"}})
    with pytest.raises(WorkloadError) as info:
        parse_injected(TWO_LEASES, config, source="ars.lwf")
    assert str(info.value) == "ars.lwf:2: nodes: asks for 4 nodes but the site has 3 hosts"


def test_load_workload_reads_a_non_xml_lwf_as_injected_leases_gzipped_or_not(tmp_path):
    plain = tmp_path / "ars.lwf"
    plain.write_text(TWO_LEASES)
    packed = tmp_path / "ars.lwf.gz"
    packed.write_bytes(gzip.compress(TWO_LEASES.encode()))
    assert load_workload(plain).requests == load_workload(packed).requests == parse_injected(TWO_LEASES).requests


def test_the_content_decides_when_the_name_does_not(tmp_path):
    path = tmp_path / "ars.txt"
    path.write_text(TWO_LEASES)
    assert [r.type for _, r in load_workload(path).requests] == [LeaseType.ADVANCE_RESERVATION, LeaseType.BEST_EFFORT]


def test_every_shipped_blue_injected_file_reads_on_the_blue_site():
    config = config_from_dict({"simulation": {"site": "144 CPU:100,Memory:1024"}})
    files = sorted((BLUE / "injected").glob("*.lwf.gz"))
    assert len(files) == 72
    for path in files:
        workload = load_workload(path, config)
        assert workload.requests and all(r.type is LeaseType.ADVANCE_RESERVATION for _, r in workload.requests)


def test_inject_merges_by_submit_time_trace_first_and_renames_the_injected_ids():
    trace = parse_swf("1 0 0 600 1 -1 -1 1 600 -1 1 1 -1 -1 -1 -1 -1 -1\n"
                      "2 120 0 600 1 -1 -1 1 600 -1 1 1 -1 -1 -1 -1 -1 -1\n"
                      "3 500 0 600 1 -1 -1 1 600 -1 1 1 -1 -1 -1 -1 -1 -1\n", source="t.swf")
    injected = parse_injected(TWO_LEASES, source="ars.lwf")
    merged = inject(trace, injected)
    assert [lease_id for lease_id, _ in merged.requests] == ["1", "injected-1", "2", "injected-2", "3"]
    assert merged.source == "t.swf + ars.lwf"
    assert dict(merged.requests)["injected-1"] is injected.requests[0][1]


def test_a_reservation_starting_before_its_submission_is_read_and_rejected_by_the_scheduler():
    """As the reference's scheduler did with the four such lines of the shipped Blue files."""
    from orchestrator.runtime.simulator import Simulator

    config = config_from_dict({"simulation": {"site": "4 CPU:100,Memory:1024"}})
    workload = parse_injected("0 -1769 3190 3190 3 1 1024 0 'NONE.img' 600\n"
                              "0 600 600 600 2 1 1024 0 'NONE.img' 600\n", config, source="ars.lwf")
    assert workload.requests[0][1].start == EPOCH - timedelta(seconds=1769)
    metrics = Simulator(workload, config).run().metrics
    assert (metrics["ar_accepted"], metrics["ar_rejected"]) == (1, 1)
