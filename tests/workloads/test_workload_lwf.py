"""LWF workloads: exact parsed values, every accepted form, every rejection, and the malformed corpus."""

from __future__ import annotations

import gzip
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.config import Config, SimulationConfig, config_from_dict
from orchestrator.model.errors import ConfigError, InvalidRequest, WorkloadError
from orchestrator.model.lease import LeaseType, VMImage
from orchestrator.model.resources import Resources
from orchestrator.model.timeutil import UTC
from orchestrator.workloads import Workload, load_workload, resolve_site
from orchestrator.workloads.lwf import parse_lwf, parse_lwf_time
from tests.support.times import EPOCH as T0

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
BAD = sorted((ROOT / "tests" / "data" / "bad_workloads").glob("*.*"))

SITE = """
  <site>
    <resource-types names="CPU Memory Disk Net-in Net-out"/>
    <nodes>
      <node-set numnodes="2"><res type="CPU" amount="200"/><res type="Memory" amount="4096"/><res type="Disk" amount="10000"/><res type="Net-in" amount="100"/><res type="Net-out" amount="100"/></node-set>
      <node-set numnodes="1"><res type="CPU" amount="400"/><res type="Memory" amount="8192"/><res type="Disk" amount="10000"/><res type="Net-in" amount="100"/><res type="Net-out" amount="100"/></node-set>
    </nodes>
  </site>"""


def lease_xml(lid="1", arrival="00:00:00", start="<start/>", duration="01:00:00", nodes=None, preemptible="true",
              extra_request="", software="<software><none/></software>") -> str:
    nodes = nodes or '<node-set numnodes="1"><res type="CPU" amount="100"/><res type="Memory" amount="1024"/></node-set>'
    pre = f' preemptible="{preemptible}"' if preemptible is not None else ""
    return f"""
    <lease-request arrival="{arrival}">{extra_request}
      <lease id="{lid}"{pre}>
        <nodes>{nodes}</nodes>
        {start}
        <duration time="{duration}"/>
        {software}
      </lease>
    </lease-request>"""


def document(*leases: str, site: str = "", name: str = "t") -> str:
    return f'<lease-workload name="{name}">{site}\n  <lease-requests>{"".join(leases)}\n  </lease-requests>\n</lease-workload>\n'


def parse(text: str, config: Config | None = None) -> Workload:
    return parse_lwf(text, config, source="w.lwf")


def parse_error(text: str, config: Config | None = None) -> WorkloadError:
    with pytest.raises(WorkloadError) as info:
        parse(text, config)
    return info.value


# -- the examples ----------------------------------------------------------------------------------------
def test_preemption_example_exact_values():
    w = load_workload(EXAMPLES / "preemption.lwf")
    assert w.name == "preemption"
    assert w.description == "An AR lease preempts a best-effort lease that is already running."
    assert w.source == str(EXAMPLES / "preemption.lwf")
    assert w.site == [(f"host{i}", Resources(100, 1024)) for i in range(1, 5)]
    assert w.skipped == {}
    assert [lid for lid, _ in w.requests] == ["1", "2"]
    be, ar = (r for _, r in w.requests)
    assert be.type is LeaseType.BEST_EFFORT
    assert be.submit_time == T0
    assert be.start is None
    assert be.nodes == (Resources(100, 1024),)
    assert be.duration == timedelta(hours=1)
    assert be.preemptible is True
    assert be.real_duration is None
    assert be.image == VMImage(disk="foobar1.img", size_mib=1024)
    assert ar.type is LeaseType.ADVANCE_RESERVATION
    assert ar.submit_time == T0 + timedelta(minutes=15)
    assert ar.start == T0 + timedelta(minutes=30)
    assert ar.end == T0 + timedelta(hours=1)
    assert ar.nodes == (Resources(100, 1024),) * 4
    assert ar.duration == timedelta(minutes=30)
    assert ar.preemptible is False
    assert ar.image == VMImage(disk="foobar2.img", size_mib=1024)


def test_preemption_example_follows_the_configured_start():
    start = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)
    w = load_workload(EXAMPLES / "preemption.lwf", Config(simulation=SimulationConfig(start=start)))
    assert [r.submit_time for _, r in w.requests] == [start, start + timedelta(minutes=15)]
    assert w.requests[1][1].start == start + timedelta(minutes=30)


def test_mixed_example():
    w = load_workload(EXAMPLES / "mixed.lwf")
    assert len(w) == 12
    kinds = [r.type.short for _, r in w.requests]
    assert kinds == ["BE", "AR", "IM", "BE", "AR", "BE", "IM", "BE", "AR", "BE", "AR", "BE"]
    submits = [r.submit_time for _, r in w.requests]
    assert submits == sorted(submits)
    assert w.site == [(f"host{i}", Resources(200, 4096)) for i in range(1, 5)]
    by_id = dict(w.requests)
    assert by_id["1"].real_duration == timedelta(minutes=45)
    assert by_id["3"].type is LeaseType.IMMEDIATE and by_id["3"].image is None and by_id["3"].start is None
    assert by_id["5"].start == T0 + timedelta(hours=1) and by_id["5"].numnodes == 4
    assert by_id["8"].preemptible is False and by_id["8"].nodes == (Resources(100, 2048),)
    assert by_id["9"].nodes == (Resources(200, 4096),)
    for _, r in w.requests:  # every AR starts after it arrives
        if r.type is LeaseType.ADVANCE_RESERVATION:
            assert r.start >= r.submit_time


# -- times -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected, plus", [
    ("00:00:00", timedelta(0), False),
    ("01:02:03", timedelta(hours=1, minutes=2, seconds=3), False),
    ("2:01:02:03", timedelta(days=2, hours=1, minutes=2, seconds=3), False),
    ("00:00:30:00.00", timedelta(minutes=30), False),
    ("+00:30:00", timedelta(minutes=30), True),
    ("+01:00:00:00.5", timedelta(days=1, seconds=0.5), True),
    ("48:00:00", timedelta(hours=48), False),
])
def test_lwf_time_forms(text, expected, plus):
    assert parse_lwf_time(text, "t") == (expected, plus)


@pytest.mark.parametrize("text", ["", "1:30", "01:60:00", "00:00:60", "1:2:3:4:5", "aa:bb:cc", "-00:10:00", "01:00"])
def test_lwf_time_rejects(text):
    with pytest.raises(InvalidRequest) as info:
        parse_lwf_time(text, "arrival")
    assert str(info.value).startswith("arrival: ")


@given(st.integers(0, 99), st.integers(0, 23), st.integers(0, 59), st.integers(0, 59), st.integers(0, 99))
def test_lwf_time_property(d, h, m, s, cs):
    text = f"{d:02d}:{h:02d}:{m:02d}:{s:02d}.{cs:02d}"
    value, _ = parse_lwf_time(text, "t")
    assert value == timedelta(days=d, hours=h, minutes=m, seconds=s, milliseconds=cs * 10)


def test_exact_start_forms():
    w = parse(document(
        lease_xml("rel-plus", start='<start><exact time="+01:00:00"/></start>'),
        lease_xml("rel-haizea", start='<start><exact time="00:01:00:00.00"/></start>'),
        lease_xml("abs", start='<start><exact time="2026-01-01T03:00:00+01:00"/></start>'),
        lease_xml("abs-z", start='<start><exact time="2026-01-02T00:00:00Z"/></start>'),
    ))
    starts = {lid: r.start for lid, r in w.requests}
    assert starts == {
        "rel-plus": T0 + timedelta(hours=1),
        "rel-haizea": T0 + timedelta(hours=1),
        "abs": T0 + timedelta(hours=2),
        "abs-z": T0 + timedelta(days=1),
    }
    assert all(r.type is LeaseType.ADVANCE_RESERVATION for _, r in w.requests)


def test_ar_may_start_exactly_when_it_arrives():
    w = parse(document(lease_xml("1", arrival="00:10:00", start='<start><exact time="+00:10:00"/></start>')))
    assert w.requests[0][1].start == w.requests[0][1].submit_time == T0 + timedelta(minutes=10)


def test_immediate_and_best_effort():
    w = parse(document(lease_xml("im", start="<start><now/></start>"), lease_xml("be", start="<start></start>")))
    types = {lid: (r.type, r.start) for lid, r in w.requests}
    assert types == {"im": (LeaseType.IMMEDIATE, None), "be": (LeaseType.BEST_EFFORT, None)}


def test_fractional_seconds_are_kept():
    w = parse(document(lease_xml(arrival="00:00:01.50", duration="00:00:10.25")))
    r = w.requests[0][1]
    assert r.submit_time == T0 + timedelta(seconds=1.5)
    assert r.duration == timedelta(seconds=10.25)


# -- nodes, resources, site -----------------------------------------------------------------------------
def test_node_sets_are_concatenated_in_order_with_every_resource_type():
    nodes = ('<node-set numnodes="2"><res type="CPU" amount="100"/><res type="Memory" amount="1024"/></node-set>'
             '<node-set numnodes="1"><res type="CPU" amount="200"/><res type="Memory" amount="2048"/>'
             '<res type="Disk" amount="500"/><res type="Net-in" amount="10"/><res type="Net-out" amount="5.5"/></node-set>')
    w = parse(document(lease_xml(nodes=nodes), site=SITE))
    assert w.requests[0][1].nodes == (Resources(100, 1024), Resources(100, 1024), Resources(200, 2048, 500, 10, 5.5))


def test_site_with_several_node_sets():
    w = parse(document(site=SITE))
    assert w.requests == []
    assert w.site == [
        ("host1", Resources(200, 4096, 10000, 100, 100)),
        ("host2", Resources(200, 4096, 10000, 100, 100)),
        ("host3", Resources(400, 8192, 10000, 100, 100)),
    ]


def test_resource_type_names_are_case_insensitive():
    nodes = '<node-set numnodes="1"><res type="cpu" amount="100"/><res type="MEMORY" amount="512"/></node-set>'
    assert parse(document(lease_xml(nodes=nodes))).requests[0][1].nodes == (Resources(100, 512),)


def test_node_fitting_only_the_largest_host_is_accepted():
    nodes = '<node-set numnodes="1"><res type="CPU" amount="400"/><res type="Memory" amount="8192"/></node-set>'
    assert parse(document(lease_xml(nodes=nodes), site=SITE)).requests[0][1].nodes == (Resources(400, 8192),)


def test_node_that_fits_no_single_host_is_refused():
    # Each amount fits some host (400 CPU on host1, 8192 MiB on host2) but no host has both.
    site = """<site><nodes>
      <node-set numnodes="1"><res type="CPU" amount="400"/><res type="Memory" amount="1024"/></node-set>
      <node-set numnodes="1"><res type="CPU" amount="100"/><res type="Memory" amount="8192"/></node-set>
    </nodes></site>"""
    nodes = '<node-set numnodes="1"><res type="CPU" amount="400"/><res type="Memory" amount="8192"/></node-set>'
    err = parse_error(document(lease_xml("9", nodes=nodes), site=site))
    assert str(err) == "w.lwf: lease 9: nodes[0]: (4 vCPU, 8192 MiB) fits on no single host of the site"


def test_more_nodes_than_the_site():
    nodes = '<node-set numnodes="4"><res type="CPU" amount="100"/><res type="Memory" amount="1024"/></node-set>'
    err = parse_error(document(lease_xml("12", nodes=nodes), site=SITE))
    assert str(err) == "w.lwf: lease 12: nodes: asks for 4 nodes but the site has 3 hosts"
    assert err.field == "nodes"


def test_without_any_site_sizes_are_not_checked():
    nodes = '<node-set numnodes="500"><res type="CPU" amount="6400"/><res type="Memory" amount="1048576"/></node-set>'
    w = parse(document(lease_xml(nodes=nodes)))
    assert w.site is None and w.requests[0][1].numnodes == 500


def test_configured_site_takes_precedence_over_the_file():
    config = config_from_dict({"simulation": {"site": "2 CPU:100,Memory:1024"}})
    nodes = '<node-set numnodes="3"><res type="CPU" amount="100"/><res type="Memory" amount="1024"/></node-set>'
    err = parse_error(document(lease_xml("5", nodes=nodes), site=SITE), config)
    assert str(err) == "w.lwf: lease 5: nodes: asks for 3 nodes but the site has 2 hosts"
    w = parse(document(lease_xml("5"), site=SITE), config)
    assert len(w.site) == 3  # the file's own site is still reported
    assert resolve_site(w, config) == [("host1", Resources(100, 1024)), ("host2", Resources(100, 1024))]
    assert resolve_site(w, Config()) == w.site


def test_resolve_site_without_any_site():
    w = parse(document(lease_xml()))
    with pytest.raises(ConfigError, match=r"^simulation\.site: no site to simulate"):
        resolve_site(w, Config())


# -- preemptible, software, realduration ---------------------------------------------------------------
@pytest.mark.parametrize("attr, expected", [("true", True), ("false", False), ("True", True), ("FALSE", False), (None, True)])
def test_preemptible(attr, expected):
    assert parse(document(lease_xml(preemptible=attr))).requests[0][1].preemptible is expected


def test_software_forms():
    w = parse(document(
        lease_xml("a", software='<software><disk-image id="img.qcow2" size="2048.5"/></software>'),
        lease_xml("b", software="<software><none/></software>"),
        lease_xml("c", software=""),
    ))
    images = {lid: r.image for lid, r in w.requests}
    assert images == {"a": VMImage(disk="img.qcow2", size_mib=2048.5), "b": None, "c": None}


def test_realduration():
    w = parse(document(lease_xml(extra_request='<realduration time="00:20:00"/>', duration="01:00:00")))
    r = w.requests[0][1]
    assert (r.duration, r.real_duration) == (timedelta(hours=1), timedelta(minutes=20))


# -- ordering and ids ------------------------------------------------------------------------------------
def test_requests_are_sorted_by_arrival_stably():
    w = parse(document(
        lease_xml("late", arrival="00:30:00"),
        lease_xml("b", arrival="00:10:00"),
        lease_xml("a", arrival="00:10:00"),
        lease_xml("first", arrival="00:00:00"),
    ))
    assert [lid for lid, _ in w.requests] == ["first", "b", "a", "late"]


def test_ids_are_strings_as_written():
    w = parse(document(lease_xml("007"), lease_xml("web-1")))
    assert [lid for lid, _ in w.requests] == ["007", "web-1"]


# -- errors (in-line cases; the corpus below covers the rest) ----------------------------------------------
def test_bad_xml_gives_file_and_line():
    err = parse_error('<lease-workload name="x">\n  <lease-requests>\n  </lease-request>\n</lease-workload>\n')
    assert str(err) == "w.lwf:3: not well-formed XML (mismatched tag)"


def test_empty_document():
    assert str(parse_error("")) == "w.lwf:1: not well-formed XML (no element found)"


def test_zero_duration_names_the_lease():
    err = parse_error(document(lease_xml("7", duration="00:00:00")))
    assert str(err) == "w.lwf: lease 7: duration: must be positive (got 0:00:00)"
    assert (err.field, err.where) == ("duration", "w.lwf: lease 7")


def test_ar_in_the_past_names_the_lease():
    err = parse_error(document(lease_xml("3", arrival="01:00:00", start='<start><exact time="+00:59:59"/></start>')))
    assert str(err).startswith("w.lwf: lease 3: start: +00:59:59 (2026-01-01T00:59:59Z) is before the lease arrives")


def test_absolute_start_before_arrival_is_refused_too():
    err = parse_error(document(lease_xml("4", arrival="1:00:00:00", start='<start><exact time="2026-01-01T12:00:00Z"/></start>')))
    assert err.field == "start" and "lease 4" in str(err)


@pytest.mark.parametrize("fragment, field", [
    ('<lease-workload name="x" version="2"><lease-requests/></lease-workload>', "lease-workload.version"),
    ('<lease-workload><foo/><lease-requests/></lease-workload>', "lease-workload.foo"),
    ('<lease-workload><lease-requests><request/></lease-requests></lease-workload>', "lease-requests.request"),
    ('<lease-workload/>', "lease-workload.lease-requests"),
    ('<lease-workload><lease-requests>stray</lease-requests></lease-workload>', "lease-requests"),
])
def test_structural_errors_name_the_element(fragment, field):
    assert parse_error(fragment).field == field


def test_unknown_element_inside_a_lease_gets_a_suggestion():
    err = parse_error(document(lease_xml("2", start='<strat/>')))
    assert str(err) == "w.lwf: lease 2: strat: unknown element in <lease> (did you mean start?)"


def test_unknown_attribute_deep_inside_a_lease():
    nodes = '<node-set numnodes="1" count="2"><res type="CPU" amount="100"/><res type="Memory" amount="1024"/></node-set>'
    err = parse_error(document(lease_xml("2", nodes=nodes)))
    assert str(err) == "w.lwf: lease 2: nodes.node-set.count: unknown attribute on <node-set> (expected numnodes)"


def test_gzip_lwf(tmp_path):
    path = tmp_path / "p.lwf.gz"
    path.write_bytes(gzip.compress((EXAMPLES / "preemption.lwf").read_bytes()))
    w = load_workload(path)
    assert [lid for lid, _ in w.requests] == ["1", "2"]
    assert w.requests == load_workload(EXAMPLES / "preemption.lwf").requests


def test_format_is_sniffed_for_unknown_extensions(tmp_path):
    path = tmp_path / "workload.txt"
    path.write_bytes((EXAMPLES / "preemption.lwf").read_bytes())
    assert len(load_workload(path)) == 2
    other = tmp_path / "notes.txt"
    other.write_text("hello\n")
    with pytest.raises(WorkloadError, match=r"notes\.txt: unknown workload format"):
        load_workload(other)


def test_missing_file(tmp_path):
    with pytest.raises(WorkloadError, match=r"x\.lwf: cannot read the workload file \(no such file\)$"):
        load_workload(tmp_path / "x.lwf")


# -- round trip property ----------------------------------------------------------------------------------
lease_strategy = st.fixed_dictionaries({
    "arrival": st.integers(0, 3 * 86400),
    "kind": st.sampled_from(["be", "im", "ar"]),
    "ahead": st.integers(0, 86400),
    "duration": st.integers(1, 7 * 86400),
    "numnodes": st.integers(1, 8),
    "cpu": st.integers(1, 800),
    "memory": st.integers(1, 65536),
    "preemptible": st.booleans(),
})


def _clock(seconds: int) -> str:
    d, rem = divmod(seconds, 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    return f"{d:02d}:{h:02d}:{m:02d}:{s:02d}"


@settings(max_examples=60, deadline=None)
@given(st.lists(lease_strategy, min_size=1, max_size=8))
def test_round_trip(leases):
    parts = []
    for i, spec in enumerate(leases, start=1):
        start = {"be": "<start/>", "im": "<start><now/></start>",
                 "ar": f'<start><exact time="+{_clock(spec["arrival"] + spec["ahead"])}"/></start>'}[spec["kind"]]
        nodes = (f'<node-set numnodes="{spec["numnodes"]}"><res type="CPU" amount="{spec["cpu"]}"/>'
                 f'<res type="Memory" amount="{spec["memory"]}"/></node-set>')
        parts.append(lease_xml(str(i), arrival=_clock(spec["arrival"]), start=start, duration=_clock(spec["duration"]),
                               nodes=nodes, preemptible=str(spec["preemptible"]).lower()))
    w = parse(document(*parts))
    order = sorted(range(len(leases)), key=lambda k: leases[k]["arrival"])  # stable, like the loader
    assert [lid for lid, _ in w.requests] == [str(k + 1) for k in order]
    for (lid, r), k in zip(w.requests, order):
        spec = leases[k]
        assert r.submit_time == T0 + timedelta(seconds=spec["arrival"])
        assert r.duration == timedelta(seconds=spec["duration"])
        assert r.nodes == (Resources(spec["cpu"], spec["memory"]),) * spec["numnodes"]
        assert r.preemptible is spec["preemptible"]
        assert r.type is {"be": LeaseType.BEST_EFFORT, "im": LeaseType.IMMEDIATE, "ar": LeaseType.ADVANCE_RESERVATION}[spec["kind"]]
        if spec["kind"] == "ar":
            assert r.start == T0 + timedelta(seconds=spec["arrival"] + spec["ahead"])
        else:
            assert r.start is None


# -- the malformed-workload corpus (LWF and SWF) -----------------------------------------------------------
def _expected(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    if path.suffix == ".lwf" and first.startswith("# error: "):   # injected leases, the older LWF
        text = first[len("# error: "):]
    elif path.suffix == ".lwf":
        assert first.startswith("<!-- error: ") and first.endswith(" -->"), path.name
        text = first[len("<!-- error: "):-len(" -->")]
    else:
        assert first.startswith("; error: "), path.name
        text = first[len("; error: "):]
    return text.replace("{file}", str(path))


@pytest.mark.parametrize("path", BAD, ids=[p.name for p in BAD])
def test_bad_workload_corpus(path):
    expected = _expected(path)
    with pytest.raises(WorkloadError) as info:
        load_workload(path)
    message = str(info.value)
    assert message == expected
    assert "\n" not in message
    assert info.value.field and info.value.field in message


def test_corpus_covers_both_formats():
    suffixes = [p.suffix for p in BAD]
    assert suffixes.count(".lwf") >= 20 and suffixes.count(".swf") >= 5
