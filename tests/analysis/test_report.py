"""`leasewise report`: planned vs enacted times from the event log. The pure part (`build_report`) on
hand-built events with exact deltas, means and worsts; then a real event log written by the daemon on the
simulated driver, reported through the CLI (table, --lease, --json, --png, bad input)."""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from orchestrator.analysis.report import (
    ALL,
    Stats,
    build_report,
    render_png,
)
from orchestrator.cli import app
from orchestrator.cli.report import print_report
from orchestrator.model.timeutil import iso
from orchestrator.state.store import Event, Store

# the daemon test's helpers: a store of simulated hosts, submissions, the daemon on a simulated clock
from tests.runtime.test_daemon import (
    LeaseType,
    config,
    driver_for,
    make_store,
    request,
    run,
    submit,
)
from tests.support.times import T0

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Log:
    """Builds an event log as the daemon writes it."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, kind: str, lease: int | None, t: float, **detail) -> "Log":
        self.events.append(Event(id=len(self.events) + 1, time=at(t), kind=kind, lease_id=lease, detail=detail))
        return self

    def enacted(self, lease: int, rr: int | None, kind: str | None, op: str, planned: tuple[float, float],
                ran: tuple[float, float], host: str = "h1", vm: str | None = None, **extra) -> "Log":
        detail = {"operation": op, "vm": vm or f"lw-{lease}-0", "vnode": 0, "host": host,
                  "wall_seconds": ran[1] - ran[0], "bytes": 0,
                  "enacted_start": iso(at(ran[0])), "enacted_end": iso(at(ran[1])), **extra}
        if rr is not None:
            detail.update(reservation=rr, reservation_kind=kind, planned_start=iso(at(planned[0])),
                          planned_end=iso(at(planned[1])))
        return self.add("enacted", lease, ran[0], **detail)


def mixed_log() -> Log:
    log = Log()
    log.add("submitted", 1, 0, type="best-effort", nodes=2, duration_s=3600.0)
    log.add("state", 1, 0, state="scheduled")
    # lease 1: a VM reservation of two VMs started 1 s and 2 s late (its end is not measured by a start)
    log.enacted(1, 1, "vm", "start", (0, 1800), (2, 7), vm="lw-1-0")
    log.enacted(1, 1, "vm", "start", (0, 1800), (1, 6), host="h2", vm="lw-1-1")
    # ... suspended: planned 1768 -> 1800, ran 1770 -> 1776.5
    log.enacted(1, 3, "suspend", "suspend", (1768, 1800), (1770, 1776.5))
    # lease 2: shutdown of two VMs planned at 3600 (0 s), the second VM took 5 s
    log.enacted(2, 5, "shutdown", "stop", (3600, 3600), (3600, 3602))
    log.enacted(2, 5, "shutdown", "stop", (3600, 3600), (3600, 3605), host="h2", vm="lw-2-1")
    # lease 3: a live migration predicted 45 s / 30 ms, measured 50 s / 42 ms; planned 2400 -> 2460
    log.enacted(3, 7, "live-migrate", "migrate", (2400, 2460), (2400, 2450), src="h1", dst="h2",
                predicted_seconds=45.0, predicted_downtime_ms=30.0, total_seconds=50.0, downtime_ms=42.0,
                max_downtime_ms=300.0, iterations=4, outcome="completed")
    # lease 4: its VM reservation cut at 1200 (cancelled): the VMs killed 1 s late
    log.enacted(4, 9, "vm", "stop", (0, 1200), (1200, 1201), killed=True)
    # lease 5: a resumption that failed (logged with its reservation)
    log.add("enactment-failed", 5, 3000, operation="resume", vm="lw-5-0", vnode=0, host="h3",
            error="resume lw-5-0 on h3: boom", reservation=11, reservation_kind="resume",
            planned_start=iso(at(3000)), planned_end=iso(at(3030)))
    # noise the report ignores or only counts
    log.add("enactment-skipped", 2, 3600, operation="stop", vm="lw-2-0", host="h1", reason="no such VM")
    log.add("enacted", 6, 10, operation="stop", vm="lw-6-0", vnode=0, host="h1", wall_seconds=0.5, bytes=0,
            rollback=True)
    log.add("reconciled", None, 0, outcome="unknown-domain", host="h1", vm="lw-99-0")
    return log


# -- the pure part ---------------------------------------------------------------------------------------------
def test_rows_group_the_operations_of_a_reservation_with_exact_deltas():
    report = build_report(mixed_log().events)
    rows = {(r.lease_id, r.reservation_id, r.operation): r for r in report.rows}
    assert len(report.rows) == 6

    vm = rows[(1, 1, "start")]
    assert (vm.kind, vm.hosts, vm.vms) == ("vm", ("h1", "h2"), ("lw-1-0", "lw-1-1"))
    assert vm.planned_start == at(0) and vm.enacted_start == at(1)          # the earliest start
    assert vm.delta_start == 1.0 and vm.delta_end is None                   # the start only
    assert (vm.compares_start, vm.compares_end) == (True, False)

    suspend = rows[(1, 3, "suspend")]
    assert (suspend.delta_start, suspend.delta_end) == (2.0, -23.5)

    shutdown = rows[(2, 5, "stop")]
    assert shutdown.enacted_end == at(3605)                                 # the latest end
    assert (shutdown.delta_start, shutdown.delta_end) == (0.0, 5.0)

    live = rows[(3, 7, "migrate")]
    assert live.kind == "live-migrate" and live.hosts == ("h1", "h2")
    assert (live.delta_start, live.delta_end) == (0.0, -10.0)
    assert (live.duration_error, live.downtime_error, live.outcome) == (5.0, 12.0, "completed")

    cut = rows[(4, 9, "kill")]
    assert cut.kind == "vm" and cut.what == "vm kill"
    assert (cut.compares_start, cut.compares_end) == (False, True)
    assert (cut.delta_start, cut.delta_end) == (None, 1.0)

    failed = rows[(5, 11, "resume")]
    assert failed.failed and failed.errors == ("resume lw-5-0 on h3: boom",) and failed.failed_at == at(3000)
    assert failed.enacted_start is None and failed.delta_start is None

    assert (report.unattributed, report.skipped) == (1, 1)
    # in planned order: the kill row is about its (cut) end
    assert [r.reservation_id for r in report.rows] == [1, 9, 3, 7, 11, 5]


def test_summary_per_kind_and_overall_mean_and_worst():
    report = build_report(mixed_log().events)
    assert [s.kind for s in report.summary] == ["vm", "suspend", "resume", "live-migrate", "shutdown", ALL]
    vm = report.kind("vm")
    assert (vm.rows, vm.failed) == (2, 0)
    assert vm.start == Stats(1, 1.0, 1.0, 1.0) and vm.end == Stats(1, 1.0, 1.0, 1.0)
    resume = report.kind("resume")
    assert (resume.rows, resume.failed, resume.start.count, resume.end.count) == (1, 1, 0, 0)
    live = report.kind("live-migrate")
    assert live.duration_error == Stats(1, 5.0, 5.0, 5.0) and live.downtime_error == Stats(1, 12.0, 12.0, 12.0)

    overall = report.overall
    assert (overall.rows, overall.failed) == (6, 1)
    # start deltas: vm +1, suspend +2, shutdown 0, live 0 (the failed resumption is left out)
    assert overall.start == Stats(4, 0.75, 0.75, 2.0)
    # end deltas: suspend -23.5, shutdown +5, live -10, the kill +1
    assert overall.end.count == 4
    assert overall.end.mean == pytest.approx(-6.875) and overall.end.mean_abs == pytest.approx(9.875)
    assert overall.end.worst == -23.5
    assert overall.duration_error == Stats(1, 5.0, 5.0, 5.0)


def test_worst_is_the_largest_absolute_value_with_its_sign():
    assert Stats.of([1.0, -3.0, 2.0]).worst == -3.0
    assert Stats.of([2.0, -2.0]).worst == 2.0
    assert Stats.of([None, float("nan")]) == Stats()
    assert Stats.of([4.0, -2.0]) == Stats(2, 1.0, 3.0, 4.0)


def test_one_lease_only():
    report = build_report(mixed_log().events, lease_id=1)
    assert [(r.lease_id, r.reservation_id) for r in report.rows] == [(1, 1), (1, 3)]
    assert report.lease_id == 1 and report.unattributed == 0
    assert build_report(mixed_log().events, lease_id=42).empty


def test_nothing_enacted_is_an_empty_report():
    log = Log().add("submitted", 1, 0, type="best-effort").add("state", 1, 0, state="queued")
    report = build_report(log.events)
    assert report.empty and report.summary == [] and report.overall is None
    assert json.loads(json.dumps(report.to_json())) == {"lease": None, "rows": [], "summary": {},
                                                        "unattributed": 0, "skipped": 0,
                                                        "live_migration_fidelity": None, "error_trend": [],
                                                        "host_losses": [],
                                                        "placements": {}}


def test_the_report_names_each_lease_s_placement_as_submitted():
    log = (Log().add("submitted", 1, 0, type="best-effort", placement="gpu=a100; spread")
           .add("submitted", 2, 0, type="best-effort"))
    assert build_report(log.events).placements == {1: "gpu=a100; spread"}
    assert build_report(log.events, lease_id=2).placements == {}
    assert build_report(log.events).to_json()["placements"] == {"1": "gpu=a100; spread"}


def test_a_failure_logged_without_its_reservation_is_matched_to_the_plan():
    log = Log()
    log.add("planned", 1, 0, reservations=[
        {"id": 1, "kind": "vm", "start": iso(at(0)), "end": iso(at(600)), "resources": {"h1": {}},
         "nodes": {"0": "h1"}},
        {"id": 2, "kind": "shutdown", "start": iso(at(600)), "end": iso(at(600)), "resources": {"h1": {}}}])
    log.add("enactment-failed", 1, 0.5, operation="start", vm="lw-1-0", vnode=0, host="h1", error="host h1 is down")
    log.add("enactment-failed", 2, 0, operation="suspend", vm="lw-2-0", vnode=0, host="h9", error="nope")
    rows = build_report(log.events).rows
    assert [(r.lease_id, r.reservation_id, r.kind, r.failed) for r in rows] == [(1, 1, "vm", True),
                                                                                (2, None, "suspend", True)]
    assert rows[0].planned_start == at(0) and rows[0].failed_at == at(0.5)


def test_a_partly_failed_start_is_one_failed_row():
    log = Log()
    log.enacted(1, 1, "vm", "start", (0, 600), (0, 5))
    log.add("enactment-failed", 1, 5, operation="start", vm="lw-1-1", vnode=1, host="h2", error="boom",
            reservation=1, reservation_kind="vm", planned_start=iso(at(0)), planned_end=iso(at(600)))
    log.add("enacted", 1, 5, operation="stop", vm="lw-1-0", vnode=0, host="h1", wall_seconds=1.0, bytes=0,
            rollback=True)
    report = build_report(log.events)
    (row,) = report.rows
    assert row.failed and row.enacted_start == at(0) and row.hosts == ("h1", "h2")
    assert report.overall.failed == 1 and report.overall.start.count == 0 and report.unattributed == 1


def test_logs_without_plans_in_their_events_are_counted_not_compared():
    log = Log().enacted(1, None, None, "start", (0, 0), (0, 5))
    report = build_report(log.events)
    assert report.empty and report.unattributed == 1


def test_terminal_and_json_show_every_part():
    report = build_report(mixed_log().events)
    out = io.StringIO()
    print_report(report, Console(file=out, width=220, highlight=False, color_system=None))
    text = out.getvalue()
    assert "plan vs enacted: 6 reservations of 5 leases (times UTC on 2026-01-01, Δ in s)" in text
    assert "live migrations: predicted vs measured" in text and "completed" in text
    assert "failed lease 5 rr 11 (resume) at 13:50:00: resume lw-5-0 on h3: boom" in text
    assert ("live migrations (predicted vs measured): duration error mean +5.00 s, worst +5.00 s; downtime error "
            "mean +12.00 ms, worst +12.00 ms") in text
    assert "1 enacted operation names no reservation" in text
    assert ("live migrations, model fidelity: 1 run: total time error median 10.0%, 90th percentile 10.0%; "
            "downtime error median 12 ms, 90th percentile 12 ms; downtime within 300 ms in 1/1 (100%)") in text
    data = json.loads(json.dumps(report.to_json()))
    assert data["live_migration_fidelity"]["runs"] == 1
    assert data["live_migration_fidelity"]["total_error_pct_median"] == pytest.approx(10.0)
    assert data["summary"]["all"]["delta_start_s"] == {"count": 4, "mean": 0.75, "mean_abs": 0.75, "worst": 2.0}
    assert data["summary"]["live-migrate"]["downtime_error_ms"]["worst"] == 12.0
    vm_row = data["rows"][0]
    assert vm_row["planned_start"] == "2026-01-01T13:00:00Z" and vm_row["delta_start_s"] == 1.0
    assert vm_row["planned_end"] is None and vm_row["delta_end_s"] is None


def test_png_of_hand_built_rows(tmp_path):
    pytest.importorskip("matplotlib")
    out = render_png(build_report(mixed_log().events), tmp_path / "r.png")
    assert out.read_bytes()[:8] == PNG_MAGIC and not (tmp_path / "r.png.tmp").exists()


# -- end to end: the daemon's event log, reported by the CLI -------------------------------------------------
@pytest.fixture(scope="module")
def enacted_store(tmp_path_factory) -> tuple[Path, dict[str, int]]:
    """A best-effort lease preempted (suspended, resumed) by a 4-VM advance reservation, enacted by the
    daemon on the simulated driver; plus a lease whose start fails (its host is down)."""
    tmp = tmp_path_factory.mktemp("report")
    path, cfg = make_store(tmp, n=4), config()
    be = submit(path, cfg, request(LeaseType.BEST_EFFORT, 60))
    ar = submit(path, cfg, request(LeaseType.ADVANCE_RESERVATION, 30, nodes=4, start=T0 + timedelta(minutes=30)))
    run(path, cfg, driver_for(path, tmp / "sim.json"))
    later = T0 + timedelta(hours=2)
    doomed = submit(path, cfg, request(LeaseType.BEST_EFFORT, 10, submit=later), now=later)
    down = {h: T0 - timedelta(hours=1) for h in ("host1", "host2", "host3", "host4")}
    run(path, cfg, driver_for(path, None, host_down_at=down), start=later)
    return path, {"be": be, "ar": ar, "doomed": doomed}


def cli(path: Path, *args: str):
    return CliRunner().invoke(app, ["report", *args, "--state", str(path)], env={"COLUMNS": "250"})


def planned_first_start(path: Path, lease_id: int) -> datetime:
    with Store.open(path) as store:
        lease = store.lease(lease_id)
    return lease.reservations[0].first_start


def test_report_of_a_real_event_log(enacted_store, tmp_path):
    path, ids = enacted_store
    result = cli(path, "--json", str(tmp_path / "r.json"))
    assert result.exit_code == 0, result.output
    assert "plan vs enacted:" in result.output and "summary" in result.output
    data = json.loads((tmp_path / "r.json").read_text())
    kinds = {}
    for row in data["rows"]:
        kinds.setdefault(row["lease"], []).append(row["kind"])
    assert kinds[ids["be"]] == ["vm", "suspend", "resume", "shutdown"]
    assert kinds[ids["ar"]] == ["vm", "shutdown"]
    assert kinds[ids["doomed"]] == ["vm"]
    first = {row["lease"]: row for row in reversed(data["rows"])}   # each lease's first row
    for name in ("be", "ar"):
        assert first[ids[name]]["planned_start"] == iso(planned_first_start(path, ids[name]))
        assert first[ids[name]]["status"] == "ok"
    assert first[ids["ar"]]["planned_start"] == "2026-01-01T13:30:00Z"
    assert first[ids["ar"]]["hosts"] == ["host1", "host2", "host3", "host4"]
    # on the fast-forwarded clock operations start on time and take the simulated driver's time
    assert all(row["delta_start_s"] == 0.0 for row in data["rows"] if row["status"] == "ok")
    assert first[ids["doomed"]]["status"] == "failed" and "is down" in first[ids["doomed"]]["errors"][0]
    assert data["summary"]["all"]["rows"] == 7 and data["summary"]["all"]["failed"] == 1
    assert data["summary"]["shutdown"]["delta_end_s"]["worst"] > 0          # a stop takes its time


def test_report_of_one_lease_and_its_png(enacted_store, tmp_path):
    pytest.importorskip("matplotlib")
    path, ids = enacted_store
    out = tmp_path / "be.png"
    result = cli(path, "--lease", str(ids["be"]), "--png", str(out))
    assert result.exit_code == 0, result.output
    assert f"of lease {ids['be']} " in result.output and "suspend" in result.output and "resume" in result.output
    table = result.output.split("summary")[0]
    leases = {line.split("│")[1].strip() for line in table.splitlines() if line.startswith("│")}
    assert leases == {str(ids["be"])}
    assert f"wrote {out}" in result.output
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_report_bad_lease_is_one_line_exit_2(enacted_store):
    path, _ = enacted_store
    for arg, message in (("999", "--lease: no lease with id 999"), ("x", "--lease: 'x' is not a lease id"),
                         ("0", "--lease: '0' is not a lease id")):
        result = cli(path, "--lease", arg)
        assert result.exit_code == 2, result.output
        assert message in result.output and len(result.output.strip().splitlines()) == 1


def test_report_with_nothing_enacted(tmp_path):
    path = make_store(tmp_path, n=1)
    submit(path, config(), request(LeaseType.BEST_EFFORT, 10))
    result = cli(path, "--png", str(tmp_path / "x.png"))
    assert result.exit_code == 0, result.output
    assert "Nothing enacted yet" in result.output and not (tmp_path / "x.png").exists()
    result = cli(path, "--lease", "1")
    assert result.exit_code == 0 and "Nothing enacted yet for lease 1" in result.output
    missing = CliRunner().invoke(app, ["report", "--state", str(tmp_path / "none.sqlite")])
    assert missing.exit_code == 2 and "--state:" in missing.output


def test_png_without_matplotlib_names_the_extra(enacted_store, tmp_path, no_matplotlib):
    path, _ = enacted_store
    result = cli(path, "--png", str(tmp_path / "x.png"))
    assert result.exit_code == 2
    assert "pip install 'leasewise[plot]'" in result.output and len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("width", [80, 60])
def test_report_in_a_narrow_terminal_cuts_no_time_and_no_delta(enacted_store, tmp_path, width):
    """At 80 columns (a pipe) and narrower, columns are left out and named, never cut: every enacted start
    and start delta of the --json is whole in the table."""
    path, _ = enacted_store
    cli(path, "--json", str(tmp_path / "r.json"))
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    result = CliRunner().invoke(app, ["report", "--state", str(path)], env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    assert "…" not in result.output
    table = result.output.split("summary")[0]
    for row in rows:
        if row["enacted_start"] is not None:
            assert row["enacted_start"][11:19] in table, (row, table)   # HH:MM:SS, whole
        if row["delta_start_s"] is not None:
            assert f"{row['delta_start_s']:+.2f}" in table
    if width == 60:   # too narrow for every column: those left out are named
        assert "left out to fit 60 columns" in result.output


def test_an_operation_found_done_is_a_row_not_measured_rather_than_done_when_found():
    """A restarted daemon that finds a migration libvirt finished meanwhile logs it as skipped with its
    reservation: the report shows it (not as missing), its times not measured (never the moment it was
    found), and libvirt's measurements when it kept them; one whose job the daemon saw end has its times."""
    log = Log()
    log.add("enactment-skipped", 3, 2470, operation="migrate", vm="lw-3-0", vnode=0, host="h2",
            reason="already on h2", reservation=7, reservation_kind="live-migrate",
            planned_start=iso(at(2400)), planned_end=iso(at(2460)))
    log.add("enactment-skipped", 4, 2470, operation="migrate", vm="lw-4-0", vnode=0, host="h2",
            reason="already on h2", reservation=9, reservation_kind="live-migrate", measured=True,
            planned_start=iso(at(2400)), planned_end=iso(at(2460)), predicted_seconds=60.0, total_seconds=12.5,
            predicted_downtime_ms=100.0, downtime_ms=80.0, max_downtime_ms=300.0,
            enacted_start=iso(at(2447.5)), enacted_end=iso(at(2460)))
    log.add("enactment-skipped", 2, 3600, operation="stop", vm="lw-2-0", host="h1", reason="no such VM")
    report = build_report(log.events)
    unseen, = [r for r in report.rows if r.lease_id == 3]
    assert unseen.kind == "live-migrate" and unseen.outcome == "found done" and unseen.found_done
    assert unseen.enacted_start is None and unseen.enacted_end is None and unseen.delta_end is None
    assert unseen.measured_seconds is None
    watched, = [r for r in report.rows if r.lease_id == 4]
    assert watched.measured_seconds == 12.5 and watched.downtime_ms == 80.0 and watched.delta_end == 0.0
    assert report.live_fidelity is not None and report.live_fidelity.runs == 1
    assert report.skipped == 3
    out = io.StringIO()
    print_report(report, Console(file=out, width=220, highlight=False, color_system=None))
    assert "not measured" in out.getvalue()
