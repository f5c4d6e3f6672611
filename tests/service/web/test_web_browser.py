"""The web pages in a real browser: Debian's headless Chromium driven by Selenium through Debian's
chromedriver (both named by path: nothing is downloaded), against a real `leasewise serve` on loopback with
TLS and simulated hosts.

A user signs in with a token, sees the site's hosts and leases on the calendar, books a lease with the form,
finds it on the calendar, opens it with a click and cancels it; a second user sees it but gets no way to
cancel it, and a form posted without its CSRF token is refused; an admin drains a host. The calendar's
screenshot is kept as the test's artefact (`calendar.png` in the test's temporary directory, and in
`$LEASEWISE_SCREENSHOTS` when that names a directory).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from orchestrator.service.models import submission_of
from orchestrator.model.timeutil import UTC

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
#: headless, and nothing of Chromium's own traffic (updates, sync, QUIC probes): the network is closed
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1400,900")


class Browser:
    """One Chromium with a profile of its own (its own cookies: one person)."""

    def __init__(self, site, profile: Path):
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={profile}")
        options.accept_insecure_certs = True   # (the test's self-signed certificate)
        self.driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
        self.site = site

    def open(self, path: str) -> None:
        self.driver.get(self.site.https + path)

    def sign_in(self, token: str) -> None:
        self.open("/login")
        self.driver.find_element(By.ID, "token").send_keys(token)
        self.driver.find_element(By.CSS_SELECTOR, "form.card button[type=submit]").click()
        WebDriverWait(self.driver, 20).until(lambda d: "/login" not in d.current_url)

    def calendar(self, path: str = "/calendar") -> dict:
        """Open the calendar and wait until it is drawn; what it draws."""
        if path:
            self.open(path)
        WebDriverWait(self.driver, 20).until(
            lambda d: d.execute_script("return document.documentElement.dataset.calendar") == "drawn")
        return self.driver.execute_script("return window.leasewiseCalendar.summary()")

    def post(self, path: str, body: str) -> tuple[int, str]:
        """A form posted by a script of the page (same origin, the session's cookie): status and text."""
        return tuple(self.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "fetch(arguments[0], {method: 'POST', headers: {'Content-Type': 'application/x-www-form-urlencoded'},"
            " body: arguments[1]}).then(r => r.text().then(t => done([r.status, t])));", path, body))

    def text(self, css: str) -> str:
        return self.driver.find_element(By.CSS_SELECTOR, css).text

    def arrive(self, title: str) -> None:
        """Wait for the page a click leads to (its title starts with `title`)."""
        WebDriverWait(self.driver, 20).until(lambda d: d.title.startswith(title))

    def close(self) -> None:
        self.driver.quit()


@pytest.fixture
def browsers(site):
    made: list[Browser] = []
    profiles = Path(tempfile.mkdtemp(prefix="leasewise-chromium-"))

    def make() -> Browser:
        browser = Browser(site, profiles / str(len(made)))
        made.append(browser)
        return browser

    try:
        yield make
    finally:
        for browser in made:
            browser.close()
        shutil.rmtree(profiles, ignore_errors=True)


def _keep(screenshot: Path) -> None:
    where = os.environ.get("LEASEWISE_SCREENSHOTS")
    if where and Path(where).is_dir():
        shutil.copy(screenshot, Path(where) / screenshot.name)


def test_book_see_and_cancel_a_lease_in_the_browser(site, browsers, tmp_path):
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).replace(hour=9, minute=0, second=0, microsecond=0)
    # bob holds a lease already (booked with the CLI's request, through the API)
    bobs = site.api(site.token("lwbob")["token"]).submit(submission_of(
        {"cpus": 2, "memory": 1024, "duration": "3h", "start": tomorrow.isoformat(), "name": "bobs-run"}))["id"]

    alice = browsers()
    alice.open("/calendar")                              # signing in is required
    assert "/login" in alice.driver.current_url and alice.driver.find_elements(By.ID, "token")
    assert not alice.driver.find_elements(By.ID, "cal-canvas")
    alice.sign_in(site.token("lwalice")["token"])
    shown = alice.calendar(f"/calendar?view=week&date={tomorrow.date().isoformat()}")
    assert shown["hosts"] == ["h1", "h2", "h3"] and shown["leases"] == [bobs]

    # book with the form
    alice.open("/leases/new")
    form = {"f-cpus": "1", "f-memory": "512", "f-duration": "2h", "f-name": "browser-booked",
            "f-start": (tomorrow + timedelta(hours=3)).isoformat().replace("+00:00", "Z")}
    for field, value in form.items():
        alice.driver.find_element(By.ID, field).send_keys(value)
    alice.driver.find_element(By.CSS_SELECTOR, "form.card button[type=submit]").click()
    alice.arrive("Lease ")
    answer = alice.text("#answer")
    assert "accepted (advance-reservation, scheduled)" in answer and "planned" in answer
    mine = int(answer.split()[1])

    # on the calendar: drawn, found by the keyboard, opened by a click
    alice.driver.find_element(By.LINK_TEXT, "on the calendar").click()
    alice.arrive("Calendar")
    shown = alice.calendar(path="")
    assert shown["view"] == "day" and set(shown["leases"]) == {bobs, mine}
    screenshot = tmp_path / "calendar.png"
    alice.driver.save_screenshot(str(screenshot))
    assert screenshot.stat().st_size > 10_000
    _keep(screenshot)
    canvas = alice.driver.find_element(By.ID, "cal-scroll")
    canvas.send_keys(Keys.ARROW_RIGHT)
    assert alice.text("#cal-status").startswith("lease ")
    box = alice.driver.execute_script("return window.leasewiseCalendar.reveal(arguments[0])", mine)
    assert box is not None and box["width"] > 10
    assert f"lease {mine} browser-booked of lwalice" in alice.text("#cal-status")
    ActionChains(alice.driver).move_by_offset(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2).click().perform()
    WebDriverWait(alice.driver, 20).until(lambda d: d.current_url.endswith(f"/leases/{mine}"))
    assert alice.driver.find_elements(By.ID, "cancel-link")

    # bob sees it, with no way to cancel it; posts without the form's token are refused
    bob = browsers()
    bob.sign_in(site.token("lwbob")["token"])
    assert mine in bob.calendar(f"/calendar?view=day&date={tomorrow.date().isoformat()}")["leases"]
    bob.open(f"/leases/{mine}")
    assert "browser-booked" in bob.text("h1") and not bob.driver.find_elements(By.ID, "cancel-link")
    bob.open(f"/leases/{mine}/cancel")
    assert not bob.driver.find_elements(By.ID, "confirm-cancel")
    csrf = bob.driver.find_element(By.NAME, "csrf").get_attribute("value")
    status, text = bob.post(f"/leases/{mine}/cancel", f"csrf={csrf}")
    assert status == 403 and "only its owner or an admin may cancel it" in text
    status, text = alice.post(f"/leases/{mine}/cancel", "")     # the owner's cookie, but no CSRF token
    assert status == 403 and "CSRF" in text

    # alice cancels it, confirming
    alice.open(f"/leases/{mine}")
    alice.driver.find_element(By.ID, "cancel-link").click()
    alice.arrive(f"Cancel lease {mine}")
    alice.driver.find_element(By.ID, "confirm-cancel").click()
    alice.arrive(f"Lease {mine} cancelled")
    assert f"lease {mine} cancelled" in alice.text("main")
    assert mine not in alice.calendar(f"/calendar?view=day&date={tomorrow.date().isoformat()}")["leases"]

    # an admin drains a host
    admin = browsers()
    admin.sign_in(site.token("lwadm", admin=True)["token"])
    admin.open("/hosts")
    admin.driver.find_element(By.ID, "drain-h3").click()
    admin.arrive("Host h3 drained")
    assert "host h3 drained: unavailable from" in admin.text("main")
    admin.open("/hosts")
    assert admin.text("#host-h3 .state") == "drained" and admin.driver.find_elements(By.ID, "undrain-h3")
    assert admin.calendar()["drained"] == ["h3"]
    assert not bob.driver.find_elements(By.ID, "drain-h1")
    bob.open("/hosts")
    assert not bob.driver.find_elements(By.ID, "drain-h1") and bob.text("#host-h3 .state") == "drained"


def test_the_calendar_zooms_moves_in_time_and_filters_hosts(site, browsers):
    user = browsers()
    user.sign_in(site.token("lwalice")["token"])
    shown = user.calendar("/calendar?view=week")
    first = shown["start"]
    user.driver.find_element(By.CSS_SELECTOR, "[data-zoom=in]").click()
    user.driver.find_element(By.CSS_SELECTOR, "[data-zoom=in]").click()
    assert user.text("#cal-zoom") == "2×"
    scroller = user.driver.find_element(By.ID, "cal-scroll")
    assert user.driver.execute_script("return arguments[0].scrollWidth > arguments[0].clientWidth * 1.5", scroller)
    user.driver.find_element(By.CSS_SELECTOR, "a[data-go=next]").click()
    WebDriverWait(user.driver, 20).until(lambda d: d.execute_script("return window.leasewiseCalendar.summary().start") != first)
    after = user.calendar(path="")
    assert after["start"] - first == 7 * 86400 and "date=" in user.driver.current_url
    user.driver.find_element(By.CSS_SELECTOR, "a[data-view=month]").click()
    WebDriverWait(user.driver, 20).until(lambda d: d.execute_script("return window.leasewiseCalendar.summary().view") == "month")
    user.driver.find_element(By.ID, "cal-hosts").send_keys("h2")
    assert user.calendar(path="")["shown"] == ["h2"]


def test_the_form_asks_free_windows_and_books_the_earliest_placed_lease(site, browsers):
    """Placement in the browser: constraints typed one a line, spread chosen, the free windows listed for
    that request, then the lease booked at the earliest start, on the hosts the constraints allow."""
    from selenium.webdriver.support.ui import Select

    admin = site.api(site.token("lwadm", admin=True)["token"])
    for host in ("h1", "h3"):
        admin.host_set(host, {"rack": "r1"}, [])
    alice = browsers()
    alice.sign_in(site.token("lwalice")["token"])
    alice.open("/leases/new")
    for field, value in {"f-nodes": "2", "f-cpus": "1", "f-memory": "512", "f-duration": "1h",
                         "f-where": "rack=r1"}.items():
        alice.driver.find_element(By.ID, field).send_keys(value)
    Select(alice.driver.find_element(By.ID, "f-spread")).select_by_value("yes")
    alice.driver.find_element(By.ID, "find-free").click()
    WebDriverWait(alice.driver, 20).until(lambda d: d.find_elements(By.ID, "free-windows"))
    windows = alice.text("#free-windows")
    assert "on h1, h3" in windows and "spread" in windows
    # the form kept what was typed: ask for the earliest start and submit
    assert alice.driver.find_element(By.ID, "f-where").get_attribute("value") == "rack=r1"
    alice.driver.find_element(By.ID, "f-start").send_keys("earliest")
    alice.driver.find_element(By.ID, "submit-lease").click()
    alice.arrive("Lease ")
    answer = alice.text("#answer")
    assert "accepted (advance-reservation, scheduled)" in answer and answer.rstrip().endswith("on h1, h3")
