"""The `--json` line of a finished lease, as `leasewise simulate` writes it while the run goes on.

`JsonRecords.record` gives the same bytes as `json.dumps(lease_json(lease, workload_id))`, without the
dicts in between, and with the JSON text of each time, type, state and kind made once: a run repeats
them thousands of times (a lease starts when another ends), and the record of every lease is made on
the simulation's own time.
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import Enum
from json.encoder import encode_basestring_ascii as _json_string   # (what json.dumps does to a str)

from orchestrator.model.lease import Lease
from orchestrator.model.reservations import Reservation
from orchestrator.model.states import LeaseState
from orchestrator.model.timeutil import iso
from orchestrator.runtime.simulator import record_hosts

#: times remembered before the memo starts again (a long run's times never come back)
_MEMO_LIMIT = 1 << 14


class JsonRecords:
    """Makes lease records, remembering the JSON text of the values they repeat."""

    def __init__(self) -> None:
        self._times: dict[datetime, str] = {}
        self._names: dict[Enum, str] = {}

    def record(self, lease: Lease, workload_id: str) -> bytes:
        time = self._time
        name = self._name
        parts = [self._reservation(rr) for vm in lease.reservations for rr in vm.all_parts()]
        end = time(lease.end_time) if lease.state is LeaseState.DONE else "null"
        reason = _json_string(lease.reason) if lease.reason else "null"
        return (f'{{"id": {_json_string(workload_id)}, "type": {name(lease.type)}, "state": {name(lease.state)}, '
                f'"submit": {time(lease.submit_time)}, "start": {time(lease.start_time)}, "end": {end}, '
                f'"reason": {reason}, "reservations": [{", ".join(parts)}]}}').encode()

    def _reservation(self, rr: Reservation) -> str:
        # (the host list as json.dumps writes a list of strings, each by json's C encoder: a big lease's
        # reservation holds hundreds of hosts)
        hosts = ", ".join(map(_json_string, record_hosts(rr)))
        return (f'{{"kind": {self._name(rr.kind)}, "start": {self._time(rr.start)}, "end": {self._time(rr.end)}, '
                f'"hosts": [{hosts}]}}')

    def _time(self, t: datetime | None) -> str:
        if t is None:
            return "null"
        text = self._times.get(t)
        if text is None:
            if len(self._times) >= _MEMO_LIMIT:
                self._times.clear()
            text = self._times[t] = f'"{iso(t)}"'
        return text

    def _name(self, member: Enum) -> str:
        """An enum member's value (a lease's type or state, a reservation's kind), as a JSON string."""
        text = self._names.get(member)
        if text is None:
            text = self._names[member] = json.dumps(member.value)
        return text
