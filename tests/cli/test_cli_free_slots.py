"""`lease submit --start earliest`, `plan --free`, `lease shorten` and `lease update` on a store in a temporary
directory: the flags and a lease file give the same answers, refusals are exit 3 with the reason, bad input
is one line and exit 2 (the corpus in tests/data/bad_leases/ holds more), and what a shorter lease frees is
planned at once."""

import json
import shutil
from datetime import datetime

from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.model.states import LeaseState
from orchestrator.model.timeutil import UTC
from orchestrator.state.store import Store
from tests.support.stores import snapshot
from tests.support.text import lines

T = lambda hh, mm=0, ss=0: datetime(2027, 3, 1, hh, mm, ss, tzinfo=UTC)  # noqa: E731
WHOLE_SITE = ("--nodes", "2", "--cpus", "8", "--memory", "1024")


def stored(store_path, lease_id: int):
    with Store.open(store_path) as store:
        return store.lease(lease_id)


def reserve(site, start: str, duration: str = "1h", *more: str) -> None:
    """An advance reservation of both hosts (not preemptible)."""
    result = site("lease", "submit", *WHOLE_SITE, "--duration", duration, "--start", start, "--no-preemptible", *more)
    assert result.exit_code == 0, result.output


def test_earliest_start_waits_for_reservations_that_cannot_give_way(site, store_path, tmp_path):
    reserve(site, "2027-03-01T09:30:00Z")
    reserve(site, "2027-03-01T11:00:00Z")
    result = site("lease", "submit", *WHOLE_SITE, "--duration", "1h", "--start", "earliest", "--no-preemptible")
    assert result.exit_code == 0, result.output
    assert lines(result.stdout) == [
        "lease 3 accepted (advance-reservation, scheduled)",
        "  planned 2027-03-01T12:00:00Z → 2027-03-01T13:00:00Z on lab1, lab2",
        "  the earliest start it fits: 2027-03-01T12:00:00Z"]
    lease = stored(store_path, 3)
    assert lease.request.start == T(12) and not lease.request.earliest
    # best-effort work planned from 13:00 (not suspended: it waits for room for its whole run) gives way to
    # the next one, as to any advance reservation
    config = tmp_path / "no-suspension.toml"
    config.write_text('[scheduling]\nsuspension = "none"\n')
    assert site("lease", "submit", *WHOLE_SITE, "--duration", "8h", config=config).exit_code == 0
    assert stored(store_path, 4).last_vm.start == T(13)
    after = site("lease", "submit", *WHOLE_SITE, "--duration", "1h", "--start", "earliest", "--no-preemptible")
    assert after.exit_code == 0, after.output
    assert "planned 2027-03-01T13:00:00Z → 2027-03-01T14:00:00Z" in after.stdout
    assert "preempts lease 4" in after.stdout
    # a shorter one fits in the gap between the first two reservations
    gap = site("lease", "submit", *WHOLE_SITE, "--duration", "30m", "--start", "earliest", "--not-before",
               "2027-03-01T10:00:00Z", "--json")
    assert gap.exit_code == 0, gap.output
    assert json.loads(gap.stdout)["start"] == "2027-03-01T10:30:00Z"


def test_earliest_start_from_a_lease_file(site, store_path, tmp_path):
    reserve(site, "2027-03-01T09:00:00Z", "2h")
    path = tmp_path / "lease.yaml"
    path.write_text("nodes: 2\ncpus: 4\nmemory: 2048\nduration: 90m\nstart: earliest\n"
                    "not_before: 2027-03-01T10:00:00Z\nnot_after: 2027-03-01T13:00:00Z\npreemptible: false\n")
    result = site("lease", "submit", str(path), "--json")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert (answer["start"], answer["end"]) == ("2027-03-01T11:00:00Z", "2027-03-01T12:30:00Z")
    with Store.open(store_path) as store:
        [submitted] = [e for e in store.events(lease_id=2) if e.kind == "submitted"]
    assert submitted.detail["start"] == "earliest" and submitted.detail["not_after"] == "2027-03-01T13:00:00Z"


def test_nothing_before_not_after_is_a_rejection_with_the_reason(site, store_path):
    reserve(site, "2027-03-01T09:00:00Z", "3h")
    result = site("lease", "submit", *WHOLE_SITE, "--duration", "1h", "--start", "earliest", "--not-after",
                  "2027-03-01T12:30:00Z")
    assert result.exit_code == 3, result.output
    assert lines(result.stdout) == [
        "lease 2 rejected (advance-reservation): nothing fits from 2027-03-01T09:00:00Z to 2027-03-01T12:30:00Z "
        "without preempting leases that may not be preempted"]
    assert stored(store_path, 2).state is LeaseState.REJECTED
    # by 13:00 it fits
    ok = site("lease", "submit", *WHOLE_SITE, "--duration", "1h", "--start", "earliest", "--not-after",
              "2027-03-01T13:00:00Z", "--json")
    assert ok.exit_code == 0 and json.loads(ok.stdout)["start"] == "2027-03-01T12:00:00Z"


def test_plan_free_lists_windows_that_each_really_fit(site, store_path, tmp_path):
    reserve(site, "2027-03-01T09:30:00Z")
    reserve(site, "2027-03-01T12:00:00Z", "2h")
    result = site("plan", "--free", *WHOLE_SITE, "--duration", "30m", "--json")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    windows = [(w["start"], w["latest_start"], w["latest_end"]) for w in answer["windows"]]
    assert windows == [("2027-03-01T09:00:00Z", "2027-03-01T09:00:00Z", "2027-03-01T09:30:00Z"),
                       ("2027-03-01T10:30:00Z", "2027-03-01T11:30:00Z", "2027-03-01T12:00:00Z"),
                       ("2027-03-01T14:00:00Z", None, None)]
    assert all(w["hosts"] == ["lab1", "lab2"] for w in answer["windows"])
    before = snapshot(store_path)
    for i, window in enumerate(answer["windows"]):   # (each on a copy of the plan as it was)
        for start in {window["start"], window["latest_start"]} - {None}:
            copy = tmp_path / f"copy-{i}-{start}.sqlite"
            shutil.copy(store_path, copy)
            trial = CliRunner().invoke(app, ["lease", "submit", *WHOLE_SITE, "--duration", "30m", "--start", start,
                                             "--state", str(copy)])
            assert trial.exit_code == 0, (window, trial.output)
            assert f"planned {start}" in trial.stdout
    assert snapshot(store_path) == before   # (plan --free writes nothing)
    table = site("plan", "--free", *WHOLE_SITE, "--duration", "30m", "--count", "1", "--not-before",
                 "2027-03-01T10:00:00Z")
    assert table.exit_code == 0, table.output
    assert "2027-03-01T10:30:00Z" in table.stdout and "2027-03-01T14:00:00Z" not in table.stdout
    none = site("plan", "--free", *WHOLE_SITE, "--duration", "3h", "--not-after", "2027-03-01T13:00:00Z")
    assert none.exit_code == 0 and lines(none.stdout) == [
        "no window for 2 × 8 vCPU / 1024 MiB for 3h ending by 2027-03-01T13:00:00Z"]


def test_shorten_frees_capacity_that_the_plan_and_the_queue_use_at_once(site, store_path, tmp_path):
    config = tmp_path / "conservative.toml"
    config.write_text('[scheduling]\nbackfilling = "conservative"\n')
    reserve(site, "2027-03-01T09:00:00Z", "3h")
    for _ in range(2):   # planned one after the other behind the reservation
        assert site("lease", "submit", *WHOLE_SITE, "--duration", "1h", config=config).exit_code == 0
    assert [stored(store_path, i).last_vm.start for i in (2, 3)] == [T(12), T(13)]
    result = site("lease", "shorten", "1", "--to", "2027-03-01T10:00:00Z", config=config)
    assert result.exit_code == 0, result.output
    assert lines(result.stdout) == ["lease 1 shortened (now 1h); planned end 2027-03-01T10:00:00Z"]
    assert stored(store_path, 1).last_vm.final_end == T(10)
    assert [stored(store_path, i).last_vm.start for i in (2, 3)] == [T(10), T(11)]
    # and by a duration: the next one moves up again
    assert site("lease", "shorten", "2", "--by", "30m", config=config).exit_code == 0
    assert stored(store_path, 3).last_vm.start == T(10, 30)


def test_update_moves_the_end_either_way_or_is_refused(site, store_path):
    reserve(site, "2027-03-01T10:00:00Z")
    reserve(site, "2027-03-01T12:00:00Z")
    later = site("lease", "update", "1", "--end", "2027-03-01T11:30:00Z")
    assert later.exit_code == 0, later.output
    assert lines(later.stdout) == ["lease 1 updated (now 1h30m); planned end 2027-03-01T11:30:00Z"]
    before = snapshot(store_path)
    refused = site("lease", "update", "1", "--end", "2027-03-01T12:30:00Z")
    assert refused.exit_code == 3
    assert lines(refused.stdout)[0].startswith("lease 1 not updated: cannot extend lease 1 by 1:00:00: host lab1 "
                                               "is reserved between")
    assert snapshot(store_path) == before
    earlier = site("lease", "update", "1", "--end", "2027-03-01T10:15:00Z")
    assert earlier.exit_code == 0 and "now 15m" in earlier.stdout
    past = site("lease", "shorten", "1", "--to", "2027-03-01T08:00:00Z")
    assert past.exit_code == 3
    assert "lease 1 not shortened: lease 1 has run 0s of its 15m: it cannot be shortened by" in past.stdout
    not_before_end = site("lease", "shorten", "1", "--to", "2027-03-01T10:30:00Z")
    assert not_before_end.exit_code == 2
    assert lines(not_before_end.stderr) == ["error: --to: 2027-03-01T10:30:00Z is not before the planned end "
                                            "(2027-03-01T10:15:00Z): `lease update --end` makes a lease longer"]


def test_a_queued_lease_is_shortened_by_a_duration_only(site, store_path):
    reserve(site, "2027-03-01T09:00:00Z", "3h")
    for _ in range(2):
        assert site("lease", "submit", *WHOLE_SITE, "--duration", "2h").exit_code == 0
    assert stored(store_path, 3).state is LeaseState.QUEUED
    assert site("lease", "shorten", "3", "--by", "30m").exit_code == 0
    assert stored(store_path, 3).request.duration.total_seconds() == 90 * 60
    to = site("lease", "shorten", "3", "--to", "2027-03-01T18:00:00Z")
    assert to.exit_code == 2
    assert lines(to.stderr) == ["error: --to: lease 3 is queued: it has no planned end yet (change its duration "
                                "with --by instead)"]


def test_a_running_lease_shortened_ends_at_its_new_end(site, store_path, clock):
    from tests.cli.test_cli_leases import daemon_step

    assert site("lease", "submit", "--cpus", "2", "--memory", "1024", "--duration", "2h").exit_code == 0
    daemon_step(store_path, T(9))
    assert stored(store_path, 1).state is LeaseState.ACTIVE
    clock["now"] = T(9, 10)
    too_far = site("lease", "shorten", "1", "--to", "2027-03-01T09:05:00Z")
    assert too_far.exit_code == 3 and "before now" in too_far.stdout
    result = site("lease", "shorten", "1", "--by", "90m")
    assert result.exit_code == 0, result.output
    assert lines(result.stdout) == ["lease 1 shortened (now 30m); planned end 2027-03-01T09:30:00Z"]
    daemon_step(store_path, T(9, 30))
    lease = stored(store_path, 1)
    assert lease.state is LeaseState.DONE and lease.end_time == T(9, 30)


def test_plan_free_asks_about_a_placed_lease_as_submit_places_it(site, store_path):
    """--where, --exclusive and --spread with --free: the windows are those of a lease placed so; a key no host
    has is exit 2, a placement no hosts could meet exit 3."""
    assert site("host", "set", "lab2", "--property", "gpu=a100").exit_code == 0
    # lab2 (the GPU host) is held whole 09:30-10:30 by a reservation; lab1 is free
    held = site("lease", "submit", "--nodes", "1", "--cpus", "8", "--memory", "16384", "--duration", "1h",
                "--start", "2027-03-01T09:30:00Z", "--no-preemptible", "--where", "gpu=a100")
    assert held.exit_code == 0, held.output
    gpu = site("plan", "--free", "--cpus", "1", "--memory", "512", "--duration", "1h", "--where", "gpu=a100",
               "--json")
    assert gpu.exit_code == 0, gpu.output
    answer = json.loads(gpu.stdout)
    assert answer["placement"] == "gpu=a100"
    assert all(w["hosts"] == ["lab2"] for w in answer["windows"]), answer
    assert answer["windows"][0]["start"] == "2027-03-01T10:30:00Z", answer   # (09:00-09:30 is too short)
    anywhere = json.loads(site("plan", "--free", "--cpus", "1", "--memory", "512", "--duration", "1h",
                               "--json").stdout)
    assert anywhere["windows"][0]["latest_end"] is None   # (lab1 is free from now on)
    # a whole host: lab1 now, or lab2 after the reservation; its size is the host's
    whole = json.loads(site("plan", "--free", "--nodes", "2", "--exclusive", "--duration", "1h", "--json").stdout)
    assert (whole["cpus"], whole["memory_mib"]) == (8, 16384)
    assert whole["windows"][0]["start"] == "2027-03-01T10:30:00Z" and whole["windows"][0]["hosts"] == ["lab1", "lab2"]
    typo = site("plan", "--free", "--cpus", "1", "--memory", "512", "--duration", "1h", "--where", "gpu2=x")
    assert typo.exit_code == 2 and "no host has a property 'gpu2'" in typo.output, typo.output
    spread = site("plan", "--free", "--nodes", "2", "--cpus", "1", "--memory", "512", "--duration", "1h",
                  "--where", "gpu=a100", "--spread")
    assert spread.exit_code == 3 and spread.output.count("\n") == 1, spread.output
