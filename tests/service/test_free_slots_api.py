"""The earliest start, the free windows, shorter and moved ends through a real `leasewise serve` on a Unix
socket: the same checks and answers as on the CLI's own store, bad input one line and exit 2, undeclared
query parameters refused."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from orchestrator.model.errors import InvalidRequest
from orchestrator.model.timeutil import UTC, iso
from orchestrator.service.client import RemoteError
from orchestrator.service.models import EndChange, FreeQuery, Shortening, model_of, submission_of


def tomorrow(hh: int, mm: int = 0) -> str:
    day = datetime.now(UTC).date() + timedelta(days=1)
    return iso(datetime(day.year, day.month, day.day, hh, mm, tzinfo=UTC))


WHOLE = {"nodes": 2, "cpus": 8, "memory": 1024}


def test_earliest_start_and_free_windows_through_the_api(running):
    client = running.client()
    first = client.submit(submission_of({**WHOLE, "duration": "1h", "start": tomorrow(10), "preemptible": False}))
    assert first["state"] == "scheduled"
    answer = client.post("/v1/leases", {**WHOLE, "duration": "1h", "start": "earliest",
                                        "not_before": tomorrow(9, 30), "preemptible": False})
    assert (answer["state"], answer["start"], answer["end"]) == ("scheduled", tomorrow(11), tomorrow(12))
    refused = client.post("/v1/leases", {**WHOLE, "duration": "1h", "start": "earliest",
                                         "not_before": tomorrow(9, 30), "not_after": tomorrow(11, 30)})
    assert refused["state"] == "rejected"
    assert refused["reason"] == (f"nothing fits from {tomorrow(9, 30)} to {tomorrow(11, 30)} without preempting "
                                 "leases that may not be preempted")
    free = client.free_windows(model_of(FreeQuery, {**WHOLE, "duration": "30m", "count": 2,
                                                    "not_before": tomorrow(9)}))
    assert [(w["start"], w["latest_end"], w["hosts"]) for w in free["windows"]] == [
        (tomorrow(9), tomorrow(10), ["h1", "h2"]), (tomorrow(12), None, ["h1", "h2"])]
    raw = client.get("/v1/free", nodes=2, cpus=8, memory=1024, duration="30m", count=1, not_before=tomorrow(10))
    assert [w["start"] for w in raw["windows"]] == [tomorrow(12)]
    # placed: the same query with a whole host each (the size: the host's) and a constraint; the constraint's
    # key checked as at submit (no host has it: the field named, exit 2)
    whole = client.get("/v1/free", nodes=2, exclusive="true", duration="30m", count=1, not_before=tomorrow(10))
    assert (whole["cpus"], whole["placement"], whole["windows"][0]["start"]) == (8, "exclusive", tomorrow(12))
    with pytest.raises(InvalidRequest) as caught:
        client.free_windows(model_of(FreeQuery, {**WHOLE, "duration": "30m", "where": ["gpu=a100"]}))
    assert caught.value.field == "where" and "no host has a property 'gpu'" in caught.value.problem
    schema = client.get("/openapi.json")
    assert {"/v1/free", "/v1/leases/{lease_id}/shorten"} <= set(schema["paths"])
    assert "patch" in schema["paths"]["/v1/leases/{lease_id}"]


def test_bad_input_is_one_line_naming_the_field(running):
    client = running.client()
    cases = [
        ({**WHOLE, "duration": "1h", "start": "earliest", "not_before": tomorrow(10), "not_after": tomorrow(10, 30)},
         f"not_after: {tomorrow(10, 30)} leaves less than the duration after the earliest start ({tomorrow(10)})"),
        ({**WHOLE, "duration": "1h", "start": tomorrow(10), "not_after": tomorrow(12)},
         "not_after: is for a lease that starts at the earliest time it fits (start 'earliest')"),
        ({**WHOLE, "duration": "1h", "start": "earliest", "not_before": "soon"}, "not_before: "),
        ({**WHOLE, "duration": "1h", "start": "earliest", "not_after": 12}, "not_after: must be an ISO 8601 time"),
    ]
    for body, expected in cases:
        with pytest.raises(InvalidRequest) as caught:
            client.post("/v1/leases", body)
        assert caught.value.exit_code == 2 and str(caught.value).startswith(expected), (body, str(caught.value))
    with pytest.raises(InvalidRequest) as caught:
        client.get("/v1/free", cpus=1, memory=512, duration="1h", stauts="x")
    assert caught.value.exit_code == 2 and str(caught.value).startswith("stauts: unknown query parameter")
    with pytest.raises(InvalidRequest) as caught:
        client.get("/v1/free", cpus=1, memory=512, duration="0s")
    assert str(caught.value) == "duration: must be greater than zero (got '0s')"
    with pytest.raises(InvalidRequest) as caught:
        client.get("/v1/free", nodes=40, cpus=1, memory=512, duration="1h")
    assert str(caught.value) == "nodes: 40 nodes cannot fit on 2 hosts"
    with pytest.raises(InvalidRequest) as caught:
        client.get("/v1/free", cpus=1, memory=512)
    assert str(caught.value).startswith("duration: ")
    lease = client.submit(submission_of({"cpus": 1, "memory": 512, "duration": "1h", "start": tomorrow(10)}))
    with pytest.raises(InvalidRequest) as caught:
        client.post(f"/v1/leases/{lease['id']}/shorten", {"by": "10m", "to": tomorrow(10, 30)})
    assert str(caught.value).startswith("by: give either by (how much shorter) or to (the new end), not both")


def test_shorten_and_update_through_the_api(running):
    client = running.client()
    one = client.submit(submission_of({**WHOLE, "duration": "2h", "start": tomorrow(10), "preemptible": False}))
    two = client.submit(submission_of({**WHOLE, "duration": "1h", "start": tomorrow(13), "preemptible": False}))
    shorter = client.shorten(one["id"], model_of(Shortening, {"to": tomorrow(11)}))
    assert shorter["duration_s"] == 3600 and shorter["end"].startswith(tomorrow(11)[:16])
    moved = client.update(one["id"], model_of(EndChange, {"end": tomorrow(12, 30)}))
    assert moved["duration_s"] == 2.5 * 3600
    with pytest.raises(RemoteError) as caught:
        client.update(one["id"], model_of(EndChange, {"end": tomorrow(13, 30)}))
    assert caught.value.exit_code == 3 and str(caught.value).startswith(f"lease {one['id']} not updated: cannot "
                                                                        f"extend lease {one['id']} by 1:00:00")
    with pytest.raises(RemoteError) as caught:
        client.shorten(two["id"], model_of(Shortening, {"by": "2h"}))
    assert caught.value.exit_code == 3 and "it cannot be shortened by 2h" in str(caught.value)
