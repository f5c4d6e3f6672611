"""The hosts page shows each host's properties (issue 32), once an admin gave hosts some: the column the
web page keeps for them (`views.host_properties`), absent while no host has any."""

from __future__ import annotations

import re


def test_the_hosts_page_shows_properties(site):
    alice = site.signed_in(site.token("lwalice")["token"])
    assert "<th scope=\"col\">properties</th>" not in alice.get("/hosts").text
    admin = site.api(site.token("lwadm", admin=True)["token"])
    admin.host_set("h1", {"gpu": "a100", "rack": "r1"}, [])
    page = alice.get("/hosts").text
    assert "<th scope=\"col\">properties</th>" in page
    assert re.search(r'id="host-h1">.*?<td>gpu=a100, rack=r1</td>', page, re.S)
    assert re.search(r'id="host-h2">.*?<td>-</td>', page, re.S)
