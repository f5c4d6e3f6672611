"""The per-host timeline: the model (bars per host, migrations on both ends, window, stacking), the terminal
Gantt view, the PNG, and `leasewise plan` over a store."""

from __future__ import annotations

import io
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from drivers.inventory import HostConfig
from orchestrator.analysis.timeline import (
    KIND_CHARS,
    KIND_COLOURS,
    PLOT_INSTALL_HINT,
    PlotUnavailable,
    bars_from_plan,
    build_timeline,
    pick_window,
    render_png,
    render_terminal,
    timeline_from_result,
)
from orchestrator.cli import app
from orchestrator.config import Config, load_config
from orchestrator.model.lease import Lease, LeaseRequest, LeaseType
from orchestrator.model.reservations import (
    Reservation,
    ReservationKind,
    ReservationState,
)
from orchestrator.model.resources import Resources
from orchestrator.model.timeutil import UTC
from orchestrator.runtime.simulator import Simulator
from orchestrator.state.cluster import Cluster
from orchestrator.state.store import Store
from orchestrator.workloads import load_workload
from tests.support.times import T0

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
K = ReservationKind
ONE = Resources.of(1, 1024)
runner = CliRunner()


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def lease(lease_id: int, kind: LeaseType = LeaseType.BEST_EFFORT) -> Lease:
    request = LeaseRequest(type=kind, nodes=(ONE,), duration=timedelta(hours=1), submit_time=T0,
                           start=T0 if kind is LeaseType.ADVANCE_RESERVATION else None)
    return Lease(lease_id, request)


def rr(lease_id: int, kind: ReservationKind, start: float, end: float, *hosts: str, rid: int = 0,
       transfers: dict | None = None, state: ReservationState = ReservationState.SCHEDULED) -> Reservation:
    return Reservation(lease_id=lease_id, kind=kind, start=at(start), end=at(end), resources={h: ONE for h in hosts},
                       transfers=transfers or {}, id=rid, state=state)


def spans(timeline, host):
    return [(b.kind.value, b.lease_id, b.lane) for b in timeline.row(host).bars]


# -- the model -------------------------------------------------------------------------------------------
def test_bars_per_host_in_host_order_with_empty_rows_kept():
    l1, l2 = lease(1), lease(2, LeaseType.ADVANCE_RESERVATION)
    pairs = [(l1, rr(1, K.VM, 0, 30, "h1")), (l1, rr(1, K.SUSPEND, 30, 31, "h1")),
             (l2, rr(2, K.VM, 31, 60, "h1", "h2")), (l2, rr(2, K.SHUTDOWN, 60, 60, "h1", "h2"))]
    tl = build_timeline(pairs, ["h2", "h1", "h3"], labels={1: "web"})
    assert tl.hosts == ["h2", "h1", "h3"]
    assert spans(tl, "h1") == [("vm", 1, 0), ("suspend", 1, 0), ("vm", 2, 0), ("shutdown", 2, 0)]
    assert spans(tl, "h2") == [("vm", 2, 0), ("shutdown", 2, 0)]
    assert tl.row("h3").bars == [] and tl.row("h3").lanes == 1
    assert (tl.start, tl.end) == (at(0), at(60))
    assert {b.label for b in tl.row("h1").bars} == {"web", "2"}
    assert tl.leases[1].label == "web" and tl.leases[2].type == "AR"
    assert tl.kinds == [K.VM, K.SUSPEND, K.SHUTDOWN]


def test_a_host_only_the_plan_names_is_added_after_the_given_ones():
    tl = build_timeline([(lease(1), rr(1, K.VM, 0, 10, "zz"))], ["a"])
    assert tl.hosts == ["a", "zz"]


def test_migration_shows_on_source_and_destination():
    l1 = lease(1)
    cold = rr(1, K.MIGRATE, 10, 12, "h1", "h3", transfers={0: ("h1", "h3")})
    live = rr(1, K.LIVE_MIGRATE, 20, 21, "h3", "h2", transfers={0: ("h3", "h2")})
    shared = Reservation(lease_id=1, kind=K.MIGRATE, start=at(30), end=at(30), resources={},
                         transfers={0: ("h2", "h4")})   # shared storage: holds nothing, still on both ends
    bars = bars_from_plan([(l1, cold), (l1, live), (l1, shared)])
    assert {(b.kind.value, b.host, b.role) for b in bars} == {
        ("migrate", "h1", "from"), ("migrate", "h3", "to"),
        ("live-migrate", "h3", "from"), ("live-migrate", "h2", "to"),
        ("migrate", "h2", "from"), ("migrate", "h4", "to"),
    }
    tl = build_timeline([(l1, cold), (l1, live), (l1, shared)], ["h1", "h2", "h3", "h4"])
    assert [b.kind for b in tl.row("h3").bars] == [K.MIGRATE, K.LIVE_MIGRATE]


def test_overlapping_reservations_on_one_host_are_stacked_on_lanes():
    pairs = [(lease(1), rr(1, K.VM, 0, 30, "h1", rid=1)),
             (lease(2), rr(2, K.VM, 10, 40, "h1", rid=2)),
             (lease(3), rr(3, K.VM, 30, 50, "h1", rid=3)),     # starts when lease 1 ends: back on lane 0
             (lease(2), rr(2, K.SHUTDOWN, 40, 40, "h1", rid=4)),  # inside lease 3's bar: not on lane 0
             (lease(4), rr(4, K.VM, 12, 20, "h1", rid=5))]     # overlaps 1 and 2: a third lane
    tl = build_timeline(pairs, ["h1"])
    lanes = {(b.lease_id, b.kind.value): b.lane for b in tl.row("h1").bars}
    assert lanes == {(1, "vm"): 0, (2, "vm"): 1, (4, "vm"): 2, (3, "vm"): 0, (2, "shutdown"): 1}
    assert tl.row("h1").lanes == 3


def test_zero_length_at_the_end_of_a_bar_stays_on_its_lane():
    pairs = [(lease(1), rr(1, K.VM, 0, 30, "h1")), (lease(1), rr(1, K.SHUTDOWN, 30, 30, "h1")),
             (lease(2), rr(2, K.VM, 30, 40, "h1"))]
    tl = build_timeline(pairs, ["h1"])
    assert tl.row("h1").lanes == 1


def test_window_defaults_to_the_earliest_unfinished_reservation_and_the_last_end():
    pairs = [(lease(1), rr(1, K.VM, 0, 20, "h1", state=ReservationState.DONE)),
             (lease(2), rr(2, K.VM, 10, 30, "h1")),          # still running at minute 25
             (lease(3), rr(3, K.VM, 40, 90, "h2"))]
    bars = bars_from_plan(pairs)
    assert pick_window(bars) == (at(0), at(90))                     # no `now`: everything (a simulation)
    assert pick_window(bars, now=at(25)) == (at(10), at(90))
    assert pick_window(bars, now=at(35)) == (at(40), at(90))
    assert pick_window(bars, now=at(95)) is None                    # all finished: nothing to show
    assert pick_window(bars, now=at(25), end=at(50)) == (at(10), at(50))
    assert pick_window(bars, start=at(5), now=at(25)) == (at(5), at(90))
    assert pick_window(bars, now=at(25), end=at(5)) is None         # nothing unfinished before --to
    tl = build_timeline(pairs, ["h1", "h2"], now=at(35))
    assert [b.lease_id for b in tl.bars] == [3] and tl.start == at(40)
    # a window of one instant (a lone shutdown) still has a width
    only = bars_from_plan([(lease(1), rr(1, K.SHUTDOWN, 5, 5, "h1"))])
    assert pick_window(only) == (at(5), at(6))


def test_a_timeline_with_nothing_in_its_window_is_empty():
    tl = build_timeline([(lease(1), rr(1, K.VM, 0, 10, "h1"))], ["h1"], start=at(20), end=at(30))
    assert tl.empty and tl.hosts == ["h1"]


# -- terminal ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def preemption(tmp_path_factory):
    """examples/preemption.lwf from 13:00: lease 1 runs on host1, is suspended 13:29:28-13:30:00 for the AR
    (lease 2, all four hosts 13:30-14:00), resumed 14:00:00-14:00:32, then runs to 14:31:04."""
    config_path = tmp_path_factory.mktemp("cfg") / "c.toml"
    config_path.write_text('[simulation]\nstart = "2026-01-01T13:00:00Z"\n')
    config = load_config(config_path)
    return Simulator(load_workload(EXAMPLES / "preemption.lwf", config), config).run()


def render(timeline, width: int = 100) -> list[str]:
    console = Console(record=True, width=width, file=io.StringIO())
    render_terminal(timeline, width, console)
    return console.export_text().splitlines()


def test_terminal_view_of_the_preemption_scenario(preemption):
    tl = timeline_from_result(preemption)
    assert (tl.start, tl.end) == (T0, T0.replace(hour=14, minute=31, second=4))
    width = 100
    lines = render(tl, width)
    assert all(len(line) <= width for line in lines)
    assert "2026-01-01 13:00:00 → 14:31:04 UTC" in lines[0]
    assert "13:00" in lines[1] and "14:00" in lines[1]
    rows = {line.split()[0]: line for line in lines if line.startswith("host")}
    assert sorted(rows) == ["host1", "host2", "host3", "host4"]

    label_width = len("host1") + 1
    columns = width - label_width
    per_column = (tl.end - tl.start).total_seconds() / columns

    def column(hhmmss: str) -> float:
        h, m, s = map(int, hhmmss.split(":"))
        return (T0.replace(hour=h, minute=m, second=s) - tl.start).total_seconds() / per_column

    host1 = rows["host1"][label_width:]
    suspend = host1.index(KIND_CHARS[K.SUSPEND])
    assert host1.count(KIND_CHARS[K.SUSPEND]) == 1
    assert column("13:29:28") - 1 <= suspend <= column("13:30:00") + 1
    resume = host1.index(KIND_CHARS[K.RESUME])
    assert column("14:00:00") - 1 <= resume <= column("14:00:32") + 1
    # vm (lease 1), the suspension just before the AR's bar (labelled 2), the resumption, vm (lease 1)
    ar = host1.index("2")
    assert host1[:suspend].strip("█1") == ""
    assert host1[suspend + 1:ar].strip("█") == ""
    assert suspend < ar < resume
    assert host1[resume + 1:].rstrip("▕▏").strip("█1") == ""
    assert host1[suspend - 1] == host1[suspend + 1] == KIND_CHARS[K.VM]
    # the AR's shutdown (0 s at 14:00) is a tick between its bar and the resumption
    assert "▏" in host1[ar:resume + 1] or "▕" in host1[ar:resume + 1]
    # the other hosts hold only the AR, in the same columns as on host1
    host2 = rows["host2"][label_width:]
    first_ar_column = len(host2) - len(host2.lstrip(" ·"))
    assert first_ar_column == suspend + 1
    legend = next(line for line in lines if line.startswith("legend:"))
    for name in ("vm", "suspend", "resume", "shutdown"):
        assert name in legend
    assert "1 BE done" in lines[-1] and "2 AR done" in lines[-1]


def test_terminal_stacks_overlaps_instead_of_overwriting():
    pairs = [(lease(1), rr(1, K.VM, 0, 60, "h1", rid=1)), (lease(2), rr(2, K.SUSPEND, 20, 40, "h1", rid=2))]
    lines = render(build_timeline(pairs, ["h1", "h2"]), 70)
    body = [line for line in lines[3:] if not line.startswith(("legend", "leases"))]
    assert body[0].startswith("h1") and body[1].startswith("  ") and body[2].startswith("h2")
    assert "▓" not in body[0] and body[0].count("█") > 50
    assert body[1].count("▓") > 15


def test_terminal_zero_length_reservation_is_a_tick():
    pairs = [(lease(1), rr(1, K.VM, 0, 30, "h1")), (lease(1), rr(1, K.SHUTDOWN, 30, 30, "h1")),
             (lease(2), rr(2, K.MIGRATE, 45, 45, "h1"))]
    lines = render(build_timeline(pairs, ["h1"], start=at(0), end=at(60)), 66)
    row = next(line for line in lines if line.startswith("h1"))[5:]   # labels are at least 4 wide
    per_column = 60 / 61                                               # minutes
    assert row[round(30 / per_column)] == "▏" and row[round(30 / per_column) - 1] == "█"
    assert row[round(45 / per_column)] == "▏"
    assert "0 s" in next(line for line in lines if line.startswith("legend:"))


def test_terminal_shows_now_and_tick_labels_across_days():
    pairs = [(lease(1), rr(1, K.VM, 0, 3 * 24 * 60, "h1"))]
    lines = render(build_timeline(pairs, ["h1"], now=at(60)), 90)
    assert "▼" in lines[2] and "now" in next(line for line in lines if line.startswith("legend:"))
    assert "01-02" in lines[1]


# -- PNG -------------------------------------------------------------------------------------------------------
def _rgb(hex_colour: str):
    return tuple(int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5))


def test_png_is_written_and_shows_the_suspension(preemption, tmp_path):
    np = pytest.importorskip("numpy")
    image = pytest.importorskip("matplotlib.image")
    out = tmp_path / "plan.png"
    assert render_png(timeline_from_result(preemption), out, title="preemption") == out
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert not (tmp_path / "plan.png.tmp").exists()
    pixels = image.imread(out)[..., :3]
    for kind in (K.SUSPEND, K.VM, K.RESUME):
        close = np.all(np.abs(pixels - np.array(_rgb(KIND_COLOURS[kind]))) < 2 / 255, axis=-1)
        assert close.sum() >= 10, f"no {kind.value} pixels"


def test_png_uses_no_pyplot_and_leaves_the_backend_alone(tmp_path):
    code = (
        "import sys, matplotlib\n"
        "before = dict.__getitem__(matplotlib.rcParams, 'backend')\n"   # get_backend() would import pyplot
        "from datetime import datetime, timezone\n"
        "from orchestrator.analysis.timeline import Timeline, HostRow, render_png\n"
        "t = datetime(2026, 1, 1, tzinfo=timezone.utc)\n"
        f"render_png(Timeline([HostRow('h1')], t, t.replace(hour=1)), {str(tmp_path / 'x.png')!r})\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
        "assert dict.__getitem__(matplotlib.rcParams, 'backend') == before\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "x.png").stat().st_size > 0


def test_png_into_a_missing_directory_is_one_error(tmp_path):
    from orchestrator.analysis.timeline import TimelineError

    tl = build_timeline([(lease(1), rr(1, K.VM, 0, 10, "h1"))], ["h1"])
    with pytest.raises(TimelineError, match="cannot write"):
        render_png(tl, tmp_path / "no" / "such" / "dir.png")


def test_png_without_matplotlib_says_what_to_install(no_matplotlib, tmp_path):
    tl = build_timeline([(lease(1), rr(1, K.VM, 0, 10, "h1"))], ["h1"])
    with pytest.raises(PlotUnavailable) as info:
        render_png(tl, tmp_path / "x.png")
    assert PLOT_INSTALL_HINT in str(info.value) and PLOT_INSTALL_HINT == "pip install 'leasewise[plot]'"


# -- leasewise plan --------------------------------------------------------------------------------------------
def request(kind: LeaseType, submit: datetime, minutes: float, nodes: int = 1, start: datetime | None = None):
    return LeaseRequest(type=kind, nodes=(ONE,) * nodes, duration=timedelta(minutes=minutes), submit_time=submit,
                        start=start, preemptible=kind is LeaseType.BEST_EFFORT)


@pytest.fixture
def store_path(tmp_path):
    path = tmp_path / "state.sqlite"
    with Store.open(path) as store:
        for name in ("alpha", "beta"):
            store.add_host(HostConfig(name, uri="test:///default", domain_type="qemu"), 1, 1024)
    return path


def submit(path: Path, *requests, now: datetime, workload_ids=()) -> None:
    with Store.open(path) as store:
        with store.transaction():
            cluster = Cluster(store, Config())
            for i, req in enumerate(requests):
                cluster.submit(req, now, workload_id=workload_ids[i] if i < len(workload_ids) else None)
            cluster.save(now)


def plan(*args: str):
    return runner.invoke(app, ["plan", *args])


def error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


def test_plan_shows_the_stored_plan_per_host(store_path, tmp_path):
    now = datetime.now(UTC).replace(microsecond=0)
    past = now - timedelta(hours=3)
    submit(store_path, request(LeaseType.BEST_EFFORT, past, 30), now=past, workload_ids=["old"])
    submit(store_path, request(LeaseType.BEST_EFFORT, now, 60),
           request(LeaseType.ADVANCE_RESERVATION, now, 30, nodes=2, start=now + timedelta(minutes=20)),
           now=now, workload_ids=["web"])
    result = plan("--state", str(store_path))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert any(line.startswith("alpha") for line in lines) and any(line.startswith("beta") for line in lines)
    alpha = next(line for line in lines if line.startswith("alpha"))
    assert "web" in alpha and "▓" in alpha                         # suspended for the AR
    assert "old" not in result.stdout                              # finished before now: not by default
    assert "suspend" in result.stdout and "UTC" in lines[0]
    assert "web BE" in result.stdout and "3 AR" in result.stdout   # lease 3 has no workload id: its number

    # the past on request; a PNG too
    out = tmp_path / "plan.png"
    result = plan("--state", str(store_path), "--from", (past - timedelta(minutes=1)).isoformat(), "--png", str(out))
    assert result.exit_code == 0, result.output
    assert "old" in result.stdout and f"wrote {out}" in result.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    result = plan("--state", str(store_path), "--from", "now", "--to", (now + timedelta(minutes=5)).isoformat())
    assert result.exit_code == 0, result.output
    assert "▓" not in result.stdout and "web" in result.stdout


def test_plan_of_an_empty_store_is_a_friendly_line(store_path):
    result = plan("--state", str(store_path))
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().startswith("Nothing planned") and len(result.stdout.strip().splitlines()) == 1
    result = plan("--state", str(store_path), "--from", "2020-01-01T00:00:00Z", "--to", "2020-01-02T00:00:00Z")
    assert result.exit_code == 0
    assert result.stdout.strip() == "Nothing planned from 2020-01-01T00:00:00Z to 2020-01-02T00:00:00Z."


@pytest.mark.parametrize(("args", "option", "text"), [
    (["--from", "2026-01-02T00:00:00Z", "--to", "2026-01-01T00:00:00Z"], "--to", "is not after --from"),
    (["--from", "now", "--to", "2020-01-01T00:00:00Z"], "--to", "is not after --from"),
    (["--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:00:00Z"], "--to", "is not after --from"),
    (["--from", "yesterday"], "--from", "not an ISO 8601 time"),
    (["--to", "2026-01-01T10:00:00"], "--to", "has no timezone"),
])
def test_plan_bad_times_are_one_line_naming_the_option(store_path, args, option, text):
    result = plan("--state", str(store_path), *args)
    assert result.exit_code == 2
    [line] = error_lines(result)
    assert line.startswith(f"error: {option}:") and text in line
    assert "Traceback" not in result.output


def test_plan_with_a_missing_store_or_config_is_one_line(tmp_path, store_path):
    result = plan("--state", str(tmp_path / "missing.sqlite"))
    assert result.exit_code == 2
    [line] = error_lines(result)
    assert "--state" in line and "does not exist" in line
    assert not (tmp_path / "missing.sqlite").exists()              # a read-only command creates nothing
    result = plan("--state", str(store_path), "--config", str(tmp_path / "missing.toml"))
    assert result.exit_code == 2 and len(error_lines(result)) == 1


def test_plan_png_without_matplotlib_says_what_to_install(store_path, tmp_path, no_matplotlib):
    result = plan("--state", str(store_path), "--png", str(tmp_path / "x.png"))
    assert result.exit_code == 2
    [line] = error_lines(result)
    assert "pip install 'leasewise[plot]'" in line
    assert not (tmp_path / "x.png").exists()


def test_plan_png_into_a_missing_directory_is_one_line(store_path, tmp_path):
    now = datetime.now(UTC)
    submit(store_path, request(LeaseType.BEST_EFFORT, now, 60), now=now)
    result = plan("--state", str(store_path), "--png", str(tmp_path / "no" / "x.png"))
    assert result.exit_code == 2
    [line] = error_lines(result)
    assert line.startswith("error: --png: cannot write")
