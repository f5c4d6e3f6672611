"""The hosts page shows each host's properties (issue 32), once an admin gave hosts some: the column the
web page keeps for them (`views.host_properties`), absent while no host has any."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from orchestrator.model.timeutil import UTC
from tests.service.web.conftest import csrf_of, error_of


def test_the_hosts_page_shows_properties(site):
    alice = site.signed_in(site.token("lwalice")["token"])
    assert "<th scope=\"col\">properties</th>" not in alice.get("/hosts").text
    admin = site.api(site.token("lwadm", admin=True)["token"])
    admin.host_set("h1", {"gpu": "a100", "rack": "r1"}, [])
    page = alice.get("/hosts").text
    assert "<th scope=\"col\">properties</th>" in page
    assert re.search(r'id="host-h1">.*?<td>gpu=a100, rack=r1</td>', page, re.S)
    assert re.search(r'id="host-h2">.*?<td>-</td>', page, re.S)


def _form(client, path: str, **fields):
    csrf = csrf_of(client.get("/leases/new").text)
    return client.post(path, data={"csrf": csrf, "duration": "1h", **fields})


def _ahead(hours: float) -> str:
    return (datetime.now(UTC) + timedelta(hours=hours)).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def test_the_submit_form_places_as_lease_submit_does(site):
    """where, spread, exclusive and start=earliest through the form: checked by the API's model and the use
    case (one line naming the form's field, nothing made), and honoured by the plan."""
    admin = site.api(site.token("lwadm", admin=True)["token"])
    for host in ("h1", "h2"):
        admin.host_set(host, {"gpu": "a100"}, [])
    alice = site.signed_in(site.token("lwalice")["token"])
    not_before = _ahead(2)
    cases = [
        ({"where": "gpu=", "cpus": "1", "memory": "512"}, 400, "where: 'gpu=': '' is not a property value"),
        ({"where": "colour=red", "cpus": "1", "memory": "512"}, 400,
         "where: no host has a property 'colour' (known: gpu)"),
        ({"spread": "yes", "pack": "yes", "cpus": "1", "memory": "512"}, 400,
         "pack: spread and pack exclude each other: give one"),
        ({"exclusive": "maybe"}, 400, "exclusive: must be yes or no (got 'maybe')"),
        ({"start": "earliest", "not_before": "tomorrow", "cpus": "1", "memory": "512"}, 400,
         "not_before: 'tomorrow' is not an ISO 8601 time"),
        ({"where": "gpu=h100", "cpus": "1", "memory": "512"}, 409, "lease not submitted: no host meets gpu=h100"),
        ({"where": "gpu=a100", "spread": "yes", "nodes": "3", "cpus": "1", "memory": "512"}, 409,
         "lease not submitted: 3 VMs spread need 3 hosts, and only 2 meet the constraints"),
    ]
    for fields, status, line in cases:
        answer = _form(alice, "/leases", name="kept", **fields)
        assert answer.status_code == status, (fields, answer.text[-800:])
        assert error_of(answer.text) == line, fields
        assert ('aria-invalid="true"' in answer.text) == (status == 400)   # (the field named is marked)
        assert 'value="kept"' in answer.text
    assert alice.get("/calendar.json").json()["leases"] == []   # nothing was made

    answer = _form(alice, "/leases", nodes="2", cpus="1", memory="512", where="gpu=a100", spread="yes",
                   start="earliest", not_before=not_before, name="spread")
    assert answer.status_code == 201, answer.text[-800:]
    lease_id = int(re.search(r"lease (\d+) accepted \(advance-reservation", answer.text).group(1))
    record = admin.lease(lease_id, vms=False)[0]
    assert record.last_vm.start == datetime.fromisoformat(not_before.replace("Z", "+00:00"))
    assert sorted(record.last_vm.resources) == ["h1", "h2"]
    assert record.request.placement.spread

    # the whole host h3 (gpu-less), exclusive: no size given, it takes the host's
    answer = _form(alice, "/leases", where="!gpu", exclusive="yes", start="now", name="whole")
    assert answer.status_code == 201, answer.text[-800:]
    whole = admin.lease(int(re.search(r"lease (\d+) accepted", answer.text).group(1)), vms=False)[0]
    assert list(whole.last_vm.resources) == ["h3"] and whole.request.placement.exclusive


def test_the_submit_form_lists_free_windows_for_its_request(site):
    admin = site.api(site.token("lwadm", admin=True)["token"])
    admin.host_set("h2", {"gpu": "a100"}, [])
    alice = site.signed_in(site.token("lwalice")["token"])
    assert 'id="free-windows"' not in alice.get("/leases/new").text
    page = _form(alice, "/leases/free", cpus="1", memory="512", where="gpu=a100", name="kept")
    assert page.status_code == 200, page.text[-800:]
    assert 'value="kept"' in page.text
    region = page.text.split('id="free-windows"')[1].split("</div>")[0]
    windows = re.findall(r"<li><code>(\S+)</code> \(latest start ([^)]+)\) on ([^<]+)</li>", region)
    assert windows and all(hosts == "h2" for _, _, hosts in windows)
    assert "where gpu=a100" in region or "gpu=a100" in region
    # its fields are checked as plan --free checks them, and nothing is booked
    bad = _form(alice, "/leases/free", cpus="1", memory="512", where="gpu=h100")
    assert bad.status_code == 409 and 'id="free-windows"' not in bad.text
    bad = _form(alice, "/leases/free", cpus="1", memory="lots")
    assert bad.status_code == 400 and error_of(bad.text).startswith("memory: ")
    assert alice.get("/calendar.json").json()["leases"] == []
