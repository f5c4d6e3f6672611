"""`JsonRecords`, the `--json` line of each lease, against its plain definition: `json.dumps(lease_json(...))`."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.config import config_from_dict
from orchestrator.runtime.lease_records import JsonRecords
from orchestrator.model.lease import Lease, LeaseRequest, LeaseType
from orchestrator.model.reservations import Reservation, ReservationKind
from orchestrator.model.resources import Resources
from orchestrator.model.states import LeaseState
from orchestrator.model.timeutil import UTC
from orchestrator.runtime.simulator import Simulator, lease_json
from orchestrator.workloads import load_workload

ROOT = Path(__file__).resolve().parents[2]


def _finished(workload: Path, settings: dict) -> list[tuple[Lease, str]]:
    config = config_from_dict(settings)
    leases: list[tuple[Lease, str]] = []
    Simulator(load_workload(workload, config), config, retire=lambda lease, wid: leases.append((lease, wid))).run()
    return leases


def test_records_of_real_runs_are_the_bytes_of_their_plain_json():
    """Runs with suspensions, resumptions, image and live migrations, rejections and advance reservations:
    one memo for all of them, as a run has."""
    runs = [
        _finished(ROOT / "examples" / "preemption.lwf", {"simulation": {"start": "2026-01-01T13:00:00Z"}}),
        _finished(ROOT / "examples" / "mixed.lwf", {}),
        _finished(ROOT / "benchmarks" / "data" / "KTH-SP2-1996-2.1-cln.swf.gz",
                  {"scheduling": {"backfilling": "aggressive"}, "workload": {"swf": {"first": 3000}}}),
    ]
    records = JsonRecords()
    kinds, states = set(), set()
    for leases in runs:
        for lease, wid in leases:
            assert records.record(lease, wid) == json.dumps(lease_json(lease, wid)).encode(), lease.id
            kinds.update(rr.kind for vm in lease.reservations for rr in vm.all_parts())
            states.add(lease.state)
    # (the runs do meet what the record must write)
    assert {ReservationKind.SUSPEND, ReservationKind.RESUME, ReservationKind.SHUTDOWN} <= kinds
    assert ReservationKind.MIGRATE in kinds or ReservationKind.LIVE_MIGRATE in kinds
    assert LeaseState.DONE in states and len(states) > 1


_NAMES = st.text(min_size=1, max_size=8)   # (quotes, backslashes, control and non-ASCII characters)
_TIMES = st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(9000, 1, 1),
                      timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30))]))


@settings(max_examples=200, deadline=None)
@given(wid=_NAMES, reason=st.one_of(st.just(""), _NAMES), hosts=st.lists(_NAMES, min_size=1, max_size=4),
       times=st.lists(_TIMES, min_size=4, max_size=4), state=st.sampled_from(list(LeaseState)),
       started=st.booleans(), transfer=st.booleans())
def test_any_names_times_and_states_give_the_bytes_of_the_plain_json(wid, reason, hosts, times, state, started,
                                                                      transfer):
    a, b, c, d = sorted(times)
    request = LeaseRequest(type=LeaseType.BEST_EFFORT, nodes=(Resources.of(1, 512),), duration=timedelta(hours=1),
                           submit_time=a)
    lease = Lease(id=7, request=request, state=state, reason=reason, start_time=b if started else None, end_time=d)
    vm = Reservation(7, ReservationKind.VM, b, c, {h: Resources.of(1, 512) for h in hosts}, nodes={0: hosts[0]})
    if transfer:
        vm.pre.append(Reservation(7, ReservationKind.MIGRATE, a, b, {}, transfers={0: (hosts[-1], "elsewhere")}))
    vm.post.append(Reservation(7, ReservationKind.SHUTDOWN, c, d, {}, nodes={0: hosts[0]}))
    lease.reservations.append(vm)
    records = JsonRecords()
    for _ in range(2):   # (the second time from the memo)
        assert records.record(lease, wid) == json.dumps(lease_json(lease, wid)).encode()
