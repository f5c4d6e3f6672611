"""The web pages over HTTP, without a browser: sign-in and sessions, CSRF, who may do what, the submit
form's validation, and the pages on the Unix socket (a real `leasewise serve`, real Unix users)."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import httpx

from orchestrator.model.timeutil import UTC
from orchestrator.service.client import Client
from tests.service.conftest import as_user
from tests.service.web.conftest import csrf_of, error_of, open_site

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFvboQNZtwefN4L+HjRQtDNq3IXxjfcrFoSfUPrceJOx alice@laptop"
PAGES = ("/calendar", "/calendar?view=month", "/leases", "/leases/new", "/hosts", "/leases/1", "/leases/1/cancel")


def _submit(client: httpx.Client, **fields) -> httpx.Response:
    csrf = csrf_of(client.get("/leases/new").text)
    return client.post("/leases", data={"csrf": csrf, "cpus": "1", "memory": "512", "duration": "1h", **fields})


def _lease_id(answer: httpx.Response) -> int:
    return int(re.search(r"lease (\d+) accepted", answer.text).group(1))


def test_no_page_without_signing_in(site):
    alice = site.signed_in(site.token("lwalice")["token"])
    _submit(alice, start="now", name="secret-experiment")
    with site.browser() as anonymous:
        for path in PAGES:
            answer = anonymous.get(path)
            assert answer.status_code == 303 and "secret" not in answer.text, path
            target = urlsplit(answer.headers["location"])
            assert target.path == "/login" and parse_qs(target.query)["next"] == [path], path
        login = anonymous.get("/login")
        assert login.status_code == 200 and 'name="token"' in login.text
        for private in ("secret-experiment", "lwalice", "h2", "h3"):   # no lease, no host on the sign-in page
            assert private not in login.text
        data = anonymous.get("/calendar.json")
        assert data.status_code == 401 and data.json()["error"]["message"] == "sign in with an API token"
        for path in ("/leases", "/logout", "/hosts/h1/drain"):
            assert anonymous.post(path, data={"cpus": "1"}).status_code == 401, path
        # a browser's own sign-in page, then the page it asked for
        assert anonymous.get("/").headers["location"] == "/calendar"
        assert anonymous.get("/docs").status_code == 404 and anonymous.get("/redoc").status_code == 404
        assert anonymous.get("/openapi.json").status_code == 200


def test_signing_in_sets_a_session_cookie_not_the_token(site):
    made = site.token("lwalice", expires=timedelta(hours=2))
    with site.browser() as browser:
        for wrong, line in (("nonsense", "not a leasewise token"), (made["token"][:-4] + "AAAA", "unknown token"),
                            ("", "token: is required (make one with `leasewise token create`)")):
            answer = browser.post("/login", data={"token": wrong})
            assert answer.status_code in (400, 401) and error_of(answer.text) == line
            assert "set-cookie" not in answer.headers
        answer = browser.post("/login", data={"token": made["token"], "next": "/hosts"})
        assert answer.status_code == 303 and answer.headers["location"] == "/hosts"
        cookie = answer.headers["set-cookie"]
        attributes = {part.strip().split("=")[0].lower(): part.strip() for part in cookie.split(";")}
        assert {"httponly", "secure", "samesite", "path", "max-age"} <= set(attributes)
        assert attributes["samesite"].lower() == "samesite=strict"
        assert 3600 <= int(attributes["max-age"].split("=")[1]) <= 7200   # with the token (2 h, less what a loaded machine took), not the 12 h
        session = cookie.split(";")[0].split("=", 1)[1]
        secret = made["token"].split("_", 2)[2]   # (lw_<id>_<secret>: the secret may itself hold "_")
        assert session != made["token"] and secret not in cookie and len(session) >= 40
        page = browser.get("/calendar")
        assert page.status_code == 200 and 'data-user="lwalice"' in page.text
        assert page.headers["content-security-policy"].startswith("default-src 'none'")
        # only a path of this site is where a sign-in goes on to
        assert browser.post("/login", data={"token": made["token"], "next": "//evil.example/x"}).headers["location"] == "/calendar"


def test_a_revoked_token_ends_its_sessions_and_signing_out_ends_one(site):
    made = site.token("lwbob")
    first, second = site.signed_in(made["token"]), site.signed_in(made["token"])
    page = first.get("/leases")
    assert page.status_code == 200
    # signing out needs the session's own form
    assert first.post("/logout", data={}).status_code == 403
    assert first.post("/logout", data={"csrf": csrf_of(second.get("/leases").text)}).status_code == 403
    assert first.get("/leases").status_code == 200
    out = first.post("/logout", data={"csrf": csrf_of(page.text)})
    assert out.status_code == 303 and out.headers["location"].startswith("/login")
    assert first.get("/leases").status_code == 303
    assert second.get("/leases").status_code == 200          # the other session goes on
    url = site.socket_url
    as_user("lwbob", lambda: Client(url).token_revoke(made["id"]))
    gone = second.get("/leases")
    assert gone.status_code == 303 and "was%20revoked" in gone.headers["location"]
    assert second.get("/leases").status_code == 303         # and stays ended


def test_forms_need_their_session_csrf_token_and_their_own_origin(site):
    alice = site.signed_in(site.token("lwalice")["token"])
    other = site.signed_in(site.token("lwalice")["token"])
    api = site.api(site.token("lwalice")["token"])
    before = len(api.leases())
    fields = {"cpus": "1", "memory": "512", "duration": "1h", "start": "now"}
    for forged in ({}, {"csrf": "x" * 43}, {"csrf": csrf_of(other.get("/leases/new").text)}):
        answer = alice.post("/leases", data={**fields, **forged})
        assert answer.status_code == 403 and "CSRF" in error_of(answer.text)
    mine = csrf_of(alice.get("/leases/new").text)
    answer = alice.post("/leases", data={**fields, "csrf": mine}, headers={"Origin": "https://evil.example"})
    assert answer.status_code == 403 and error_of(answer.text) == "a form from https://evil.example may not act here"
    answer = alice.post("/leases", data={**fields, "csrf": mine}, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400
    assert len(api.leases()) == before   # nothing was submitted
    done = alice.post("/leases", data={**fields, "csrf": mine}, headers={"Origin": site.https})
    assert done.status_code == 201 and len(api.leases()) == before + 1


def test_a_bearer_token_opens_the_pages_and_its_forms_need_no_cookie(site):
    token = site.token("lwalice")["token"]
    with site.browser(headers={"Authorization": f"Bearer {token}"}) as script:
        assert script.get("/hosts").status_code == 200
        answer = script.post("/leases", data={"cpus": "1", "memory": "512", "duration": "30m", "start": "now"})
        assert answer.status_code == 201 and "accepted" in answer.text
        assert "set-cookie" not in answer.headers
        data = script.get("/calendar.json", params={"view": "day"}).json()
        assert [h[0] for h in data["hosts"]] == ["h1", "h2", "h3"]
    with site.browser(headers={"Authorization": "Bearer lw_9_" + "A" * 43}) as wrong:
        assert wrong.get("/hosts").status_code == 303


def test_the_submit_form_checks_as_lease_submit_does_and_answers_as_it_does(site):
    alice = site.signed_in(site.token("lwalice")["token"])
    past = (datetime.now(UTC) - timedelta(hours=1)).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    cases = [
        ({"cpus": ""}, 400, "cpus: is required"),
        ({"duration": "-1h"}, 400, "duration: must be greater than zero (got '-1h')"),
        ({"memory": "lots"}, 400, "memory: "),
        ({"start": past}, 400, f"start: {past} is in the past"),
        ({"preemptible": "maybe"}, 400, "preemptible: must be yes or no (got 'maybe')"),
        ({"cpus": "64"}, 400, "nodes[0].cpus: 64 vCPUs is more than any host has (8 vCPUs)"),
        ({"image_path": "/srv/x.qcow2"}, 403, "image: only catalogued images may be booted by users"),
        ({"image": "debian12"}, 400, "image: 'debian12' is neither a catalogued image nor an absolute path"),
        ({"ssh_key": KEY}, 400, "ssh_key: needs an image with a disk (image)"),
        ({"user": "lwbob"}, 403, "lwalice may not submit leases for lwbob (only admins may)"),
    ]
    for fields, status, line in cases:
        answer = _submit(alice, name="kept", **fields)
        assert answer.status_code == status, (fields, answer.text[-500:])
        assert error_of(answer.text).startswith(line), fields
        assert 'value="kept"' in answer.text   # what was typed stays in the form
    assert alice.get("/calendar.json").json()["leases"] == []   # nothing was made
    answer = _submit(alice, start="now", name="first")
    assert answer.status_code == 201
    lines = re.findall(r"<p>([^<]+)</p>", answer.text.split('id="answer"')[1])
    assert re.fullmatch(r"lease \d+ accepted \(immediate, (scheduled|active)\)", lines[0])
    assert re.fullmatch(r"planned \S+Z → \S+Z on h\d", lines[1].replace("&gt;", ">"))
    later = _submit(alice, nodes="3", cpus="8", duration="2h")   # best-effort: the whole site, after the first
    assert later.status_code == 201 and re.search(r"lease \d+ accepted \(best-effort, scheduled\)", later.text)


def test_who_may_do_what_is_the_servers_word_whatever_the_page_shows(site):
    alice = site.signed_in(site.token("lwalice")["token"])
    bob = site.signed_in(site.token("lwbob")["token"])
    admin = site.signed_in(site.token("lwadm", admin=True)["token"])
    lease_id = _lease_id(_submit(alice, start="now", name="alices"))
    # bob sees it, without a way to change it
    page = bob.get(f"/leases/{lease_id}")
    assert page.status_code == 200 and "alices" in page.text and "lwalice" in page.text
    assert "/cancel" not in page.text and "/extend" not in page.text
    assert "Yes, cancel" not in bob.get(f"/leases/{lease_id}/cancel").text
    csrf = csrf_of(page.text)
    refused = bob.post(f"/leases/{lease_id}/cancel", data={"csrf": csrf})
    assert refused.status_code == 403
    assert error_of(refused.text) == f"lease {lease_id} belongs to lwalice: only its owner or an admin may cancel it"
    assert bob.post(f"/leases/{lease_id}/extend", data={"csrf": csrf, "by": "30m"}).status_code == 403
    # admin actions: not shown to users, and refused to them
    hosts = bob.get("/hosts")
    assert hosts.status_code == 200 and "/drain" not in hosts.text
    refused = bob.post("/hosts/h1/drain", data={"csrf": csrf})
    assert refused.status_code == 403 and error_of(refused.text) == "draining a host is for admins (lwbob is not one)"
    assert "/hosts/h2/drain" in admin.get("/hosts").text
    # the owner extends and cancels
    page = alice.get(f"/leases/{lease_id}")
    csrf = csrf_of(page.text)
    assert f"/leases/{lease_id}/cancel" in page.text
    extended = alice.post(f"/leases/{lease_id}/extend", data={"csrf": csrf, "by": "30m"})
    assert extended.status_code == 200 and f"lease {lease_id} extended by 30m (now 1h30m)" in extended.text
    bad = alice.post(f"/leases/{lease_id}/extend", data={"csrf": csrf, "by": "soon"})
    assert bad.status_code == 400 and error_of(bad.text) == "by: 'soon' is not a duration (use e.g. 90s, 15m, 2h, 1h30m)"
    confirm = alice.get(f"/leases/{lease_id}/cancel")
    assert "Yes, cancel lease" in confirm.text
    done = alice.post(f"/leases/{lease_id}/cancel", data={"csrf": csrf_of(confirm.text)})
    assert done.status_code == 200 and f"lease {lease_id} cancelled" in done.text
    again = alice.post(f"/leases/{lease_id}/cancel", data={"csrf": csrf})
    assert again.status_code == 400 and error_of(again.text) == f"lease: lease {lease_id} is already cancelled"


def test_an_admin_drains_and_undrains_a_host(site):
    alice = site.signed_in(site.token("lwalice")["token"])
    admin = site.signed_in(site.token("lwadm", admin=True)["token"])
    _submit(alice, start="now", name="moved")
    csrf = csrf_of(admin.get("/hosts").text)
    for by, line in (("yesterday", "by: 'yesterday' is not an ISO 8601 time"), ("2001-01-01T00:00:00Z", "by: 2001-01-01T00:00:00Z is in the past")):
        answer = admin.post("/hosts/h1/drain", data={"csrf": csrf, "by": by})
        assert answer.status_code == 400 and error_of(answer.text).startswith(line)
    assert admin.post("/hosts/nope/drain", data={"csrf": csrf}).status_code == 400
    drained = admin.post("/hosts/h1/drain", data={"csrf": csrf, "by": "now"})
    assert drained.status_code == 200 and "host h1 drained: unavailable from" in drained.text
    page = alice.get("/hosts")
    assert re.search(r'id="host-h1">.*?state-drained', page.text, re.S)
    data = alice.get("/calendar.json", params={"view": "day"}).json()
    assert data["hosts"][0][0] == "h1" and data["hosts"][0][3] is not None and data["hosts"][1][3] is None
    undrained = admin.post("/hosts/h1/undrain", data={"csrf": csrf})
    assert undrained.status_code == 200 and "host h1 is available again" in undrained.text


def test_the_calendar_data_is_the_plan_of_its_window(site):
    alice = site.signed_in(site.token("lwalice")["token"])
    start = (datetime.now(UTC) + timedelta(days=1)).replace(hour=10, minute=0, second=0, microsecond=0)
    lease_id = _lease_id(_submit(alice, start=start.isoformat().replace("+00:00", "Z"), nodes="2", name="pair"))
    data = alice.get("/calendar.json", params={"view": "day", "date": start.date().isoformat()}).json()
    assert data["view"] == "day" and data["start"] == int(start.replace(hour=0).timestamp())
    assert data["end"] - data["start"] == 86400 and data["me"] == "lwalice"
    assert data["leases"] == [[lease_id, "pair", "lwalice", "advance-reservation", "scheduled"]]
    bars = [data["bars"][i:i + 7] for i in range(0, len(data["bars"]), 7)]
    kinds = [k[0] for k in data["kinds"]]
    vm = [b for b in bars if kinds[b[1]] == "vm"]
    assert vm and {data["hosts"][b[0]][0] for b in vm} <= {"h1", "h2", "h3"}
    assert {(b[2], b[3], b[4]) for b in vm} == {(0, 10 * 3600, 11 * 3600)}   # (lease 0 of the list)
    week = alice.get("/calendar.json", params={"view": "week", "date": start.date().isoformat()}).json()
    assert datetime.fromtimestamp(week["start"], UTC).weekday() == 0 and week["end"] - week["start"] == 7 * 86400
    before = alice.get("/calendar.json", params={"view": "day", "date": (start - timedelta(days=1)).date().isoformat()}).json()
    assert before["leases"] == [] and before["bars"] == []
    for params, line in (({"view": "year"}, "view: must be day, week or month (got 'year')"),
                         ({"date": "someday"}, "date: 'someday' is not a date (YYYY-MM-DD)")):
        answer = alice.get("/calendar.json", params=params)
        assert answer.status_code == 400 and answer.json()["error"]["message"] == line
    page = alice.get("/calendar", params={"view": "day", "date": start.date().isoformat()})
    embedded = re.search(r'<script id="calendar-data" type="application/json">(.*?)</script>', page.text, re.S).group(1)
    assert json.loads(embedded)["leases"] == data["leases"]


def test_a_lease_page_has_its_vms_plan_events_and_plan_against_reality(site):
    alice = site.signed_in(site.token("lwalice")["token"])
    lease_id = _lease_id(_submit(alice, start="now", name="run"))
    deadline = time.monotonic() + 30
    page = alice.get(f"/leases/{lease_id}")
    while "report.png" not in page.text and time.monotonic() < deadline:   # the daemon starts it, and says so
        time.sleep(0.3)
        page = alice.get(f"/leases/{lease_id}")
    assert page.status_code == 200
    assert re.search(rf"<td>lw-{lease_id}-0</td><td>h\d</td><td>running</td>", page.text)
    for heading in ("Request", "VMs", "Plan", "Plan against reality", "State history", "Events"):
        assert f"<h2>{heading}</h2>" in page.text or f'">{heading}</h2>' in page.text
    assert f'src="/leases/{lease_id}/report.png"' in page.text and "enacted" in page.text
    picture = alice.get(f"/leases/{lease_id}/report.png")
    assert picture.status_code == 200 and picture.headers["content-type"] == "image/png"
    assert picture.content.startswith(b"\x89PNG\r\n\x1a\n") and len(picture.content) > 5000
    assert alice.get("/leases/999").status_code == 400
    assert error_of(alice.get("/leases/999").text) == "lease: no lease with id 999"


def test_the_leases_table_filters_mine_and_by_state(site):
    alice = site.signed_in(site.token("lwalice")["token"])
    bob = site.signed_in(site.token("lwbob")["token"])
    first = _lease_id(_submit(alice, start="now", name="alices-one"))
    second = _lease_id(_submit(bob, start="now", name="bobs-one"))
    csrf = csrf_of(bob.get("/leases").text)
    bob.post(f"/leases/{second}/cancel", data={"csrf": csrf})
    everyone = alice.get("/leases").text
    assert "alices-one" in everyone and "bobs-one" not in everyone   # live leases by default
    assert "bobs-one" in alice.get("/leases", params={"state": "all"}).text
    assert "bobs-one" in alice.get("/leases", params={"state": "cancelled"}).text
    mine = alice.get("/leases", params={"scope": "mine", "state": "all"}).text
    assert f'href="/leases/{first}"' in mine and "bobs-one" not in mine
    wrong = alice.get("/leases", params={"state": "sleeping"})
    assert wrong.status_code == 400 and error_of(wrong.text).startswith("state: 'sleeping' is not a lease state")


def test_the_unix_socket_knows_its_user_and_still_asks_forms_for_their_token(site):
    url = site.socket_url

    def visit():
        out = {}
        # (a browser keeps the Secure cookie on http://localhost, which it trusts; httpx would not send it)
        with httpx.Client(transport=httpx.HTTPTransport(uds=url[len("unix:"):]), base_url="http://localhost:8080") as web:
            page = web.get("/calendar")
            out["page"] = (page.status_code, 'data-user="lwalice"' in page.text, "Sign out" in page.text)
            cookie = {"Cookie": page.headers["set-cookie"].split(";")[0]}
            out["rebound"] = web.get("/calendar", headers={"Host": "evil.example:8080", **cookie}).status_code
            out["login"] = web.get("/login", headers=cookie).status_code
            fields = {"cpus": "1", "memory": "512", "duration": "30m", "start": "now", "name": "via-socket"}
            out["forged"] = web.post("/leases", data=fields, headers=cookie).status_code
            out["no-session"] = web.post("/leases", data={**fields, "csrf": "x"}).status_code
            form = web.get("/leases/new", headers=cookie)
            out["same-session"] = "set-cookie" not in form.headers
            csrf = re.search(r'name="csrf" value="([^"]+)"', form.text).group(1)
            answer = web.post("/leases", data={**fields, "csrf": csrf}, headers=cookie)
            out["submitted"] = (answer.status_code, "accepted" in answer.text)
        return out

    seen = as_user("lwalice", visit)
    assert seen["page"] == (200, True, False)    # no sign-in, no sign-out: the kernel says who calls
    assert seen["rebound"] == 403 and seen["login"] == 303
    assert seen["forged"] == 403 and seen["no-session"] == 403 and seen["same-session"]
    assert seen["submitted"] == (201, True)
    leases = as_user("lwalice", lambda: [(l.request.name, l.request.user) for l in Client(url).leases()])
    assert ("via-socket", "lwalice") in leases


def test_pages_load_nothing_from_another_origin(site):
    alice = site.signed_in(site.token("lwalice")["token"])
    _submit(alice, start="now")
    texts = [alice.get(path).text for path in PAGES]
    texts += [alice.get(f"/static/{name}").text for name in ("calendar.js", "leasewise.css", "favicon.svg")]
    for text in texts:
        for found in re.findall(r"""(?:src|href|action)\s*=\s*["']([^"']+)""", text):
            assert found.startswith(("/", "#", "?")), found
        assert not re.search(r"url\(\s*['\"]?(https?:)?//", text)
    assert re.search(r"fetch\(\"/calendar\.json\"", texts[-3])


def test_a_lease_that_ran_stays_on_the_calendar_where_it_ran(site):
    alice = site.signed_in(site.token("lwalice")["token"])
    ran = _lease_id(_submit(alice, start="now", name="ran"))
    never = _lease_id(_submit(alice, start=(datetime.now(UTC) + timedelta(hours=3)).isoformat(), name="never"))
    deadline = time.monotonic() + 30
    while "report.png" not in alice.get(f"/leases/{ran}").text and time.monotonic() < deadline:
        time.sleep(0.3)   # (until the daemon has started it)
    for lease_id in (ran, never):
        page = alice.get(f"/leases/{lease_id}/cancel")
        assert alice.post(f"/leases/{lease_id}/cancel", data={"csrf": csrf_of(page.text)}).status_code == 200
    time.sleep(2.5)   # the daemon's next steps stop its VMs and retire it from the scheduler in memory
    data = alice.get("/calendar.json", params={"view": "day"}).json()
    assert [l[0] for l in data["leases"]] == [ran] and data["leases"][0][4] == "cancelled"
    bars = [data["bars"][i:i + 7] for i in range(0, len(data["bars"]), 7)]
    vm = [b for b in bars if data["kinds"][b[1]][0] == "vm"]
    assert len(vm) == 1 and data["states"][vm[0][5]] != "scheduled" and vm[0][3] <= data["now"] - data["start"]


def test_the_submit_form_shares_the_users_rate_of_submissions(tmp_path, unix_users):
    """The rate limit is the use case's: submissions through the API and through the form take from one
    bucket, and the form past it says when to try again (429). The bucket refills at one a minute here, so a
    slow machine between the API's refusal and the form's post cannot refill it."""
    from orchestrator.service.client import RemoteError
    from orchestrator.service.models import submission_of

    site = open_site(tmp_path, submit_burst=3, submits_per_minute=1)
    try:
        token = site.token("lwalice")["token"]
        api = site.api(token)
        later = (datetime.now(UTC) + timedelta(days=2)).replace(microsecond=0)
        browser = site.signed_in(token)
        csrf = csrf_of(browser.get("/leases/new").text)
        taken = 0
        for i in range(10):
            try:
                api.submit(submission_of({"cpus": 1, "memory": 256, "duration": "10m",
                                          "start": (later + timedelta(hours=i)).isoformat()}))
                taken += 1
            except RemoteError as exc:
                assert exc.exit_code == 75 and "too many lease submissions" in str(exc)
                break
        else:
            raise AssertionError("the API never said too many")
        assert taken == 3
        answer = browser.post("/leases", data={"csrf": csrf, "cpus": "1", "memory": "512", "duration": "1h",
                                               "start": (later + timedelta(hours=90)).isoformat()})
        assert answer.status_code == 429, answer.text[:500]
        assert "too many lease submissions" in error_of(answer.text)
    finally:
        site.close()
