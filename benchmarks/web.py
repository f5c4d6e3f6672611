"""The web calendar at a lab's size (issue 33): 300 hosts and 5,000 reservations in a week.

Run: `python benchmarks/web.py [--hosts 300] [--reservations 5000] [--runs 10] [--screenshot OUT.png]`.

A store is made with that many hosts and advance reservations (1 or 2 VMs each, 30 min to 8 h) spread over
next week until the week holds that many reservations (each VM reservation and its shutdown count), then a
real `leasewise serve` (its own process, simulated hosts, HTTPS on loopback with a certificate made by
openssl) serves it. Printed, with the targets:

* server time: the week's calendar page (`/calendar?view=week`, its data in the page), from request to
  the last byte over loopback, the median of `--runs` after two warm-ups (target <= 200 ms); its data
  alone (`/calendar.json`) beside it;
* page weight: the page, its script, its styles and its icon, as a first visit fetches them (<= 1 MB);
* first render: headless Chromium (Debian's chromium and chromedriver) loading the page until the calendar
  is first drawn, from the navigation's start (`performance.now()` when drawn), the median of `--runs`
  (<= 1 s).

`--mixed` makes a smaller, livelier site instead (best-effort leases running now, advance reservations
that preempt some of them today: suspensions, resumptions, migrations), for a picture such as
docs/web-calendar.png (`--hosts 14 --reservations 120 --mixed --view day --screenshot docs/web-calendar.png`).
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date, datetime, time as clock, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from drivers.inventory import HostConfig  # noqa: E402
from orchestrator.config import Config  # noqa: E402
from orchestrator.model.lease import LeaseRequest, LeaseType  # noqa: E402
from orchestrator.model.resources import Resources  # noqa: E402
from orchestrator.model.timeutil import UTC  # noqa: E402
from orchestrator.state.cluster import Cluster  # noqa: E402
from orchestrator.state.store import Store  # noqa: E402
from orchestrator.state.tokens import create_token  # noqa: E402
from tests.service.conftest import free_port, self_signed_certificate  # noqa: E402

USERS = ("alice", "bob", "carol", "dave", "erin", "frank")
TARGETS = {"server": 0.200, "weight": 1_000_000, "render": 1.0}


def make_site(path: Path, hosts: int, reservations: int, first: datetime, now: datetime, seed: int,
              mixed: bool) -> tuple[int, int]:
    """The store: `hosts` hosts and leases until the week from `first` holds `reservations`; (leases, held)."""
    rng = random.Random(seed)
    end = first + timedelta(days=1 if mixed else 7)
    with Store.open(path) as store:
        for i in range(hosts):
            store.add_host(HostConfig(name=f"node{i + 1:03d}", uri=f"sim://node{i + 1:03d}"), 16, 65536)
        with store.transaction():
            cluster = Cluster(store, Config())
            leases = 0
            if mixed:   # best-effort work running now, which reservations later today push aside
                for _ in range(hosts):
                    _submit(cluster, rng, now, None, LeaseType.BEST_EFFORT, rng.choice([8, 16]), hours=(4, 12),
                            memory=(16384, 32768))
                    leases += 1
            held = len(cluster.plan(first, end))
            while held < reservations and leases < 20 * reservations:
                start = first + timedelta(minutes=rng.randrange(0, int((end - first).total_seconds() // 60) - 30))
                if start > now:
                    # (today's reservations take whole hosts: the work running there moves or waits)
                    _submit(cluster, rng, now, start, LeaseType.ADVANCE_RESERVATION,
                            rng.choice([8, 16] if mixed else [1, 2, 4, 8]))
                leases += 1
                if leases % 50 == 0:
                    held = len(cluster.plan(first, end))
            cluster.save(now)
            held = len(cluster.plan(first, end))
    return leases, held


def _submit(cluster: Cluster, rng: random.Random, now: datetime, start: datetime | None, kind: LeaseType,
            cpus: int, hours: tuple[float, float] = (0.5, 8), memory: tuple[int, ...] = (2048, 4096, 8192)) -> None:
    minutes = rng.randrange(int(hours[0] * 60), int(hours[1] * 60) + 1, 30)
    nodes = 2 if rng.random() < 0.2 else 1
    request = LeaseRequest(type=kind, nodes=(Resources.of(cpus, rng.choice(memory)),) * nodes,
                           duration=timedelta(minutes=minutes), submit_time=now, start=start,
                           preemptible=kind is LeaseType.BEST_EFFORT, user=rng.choice(USERS),
                           name=rng.choice(["train", "sweep", "build", "class", "bench", "exp"]) + f"-{rng.randrange(100)}",
                           dirty_rate_mib_s=rng.choice([5.0, 20.0, 80.0]))
    cluster.submit(request, now)


def serve(workdir: Path, store: Path, port: int) -> subprocess.Popen:
    cert, key = self_signed_certificate(workdir)
    config = workdir / "config.toml"
    config.write_text(f'[daemon]\ndriver = "simulated"\npoll_interval = "2s"\n'
                      f'[serve]\nsocket = "{workdir / "api.sock"}"\nsocket_group = ""\n'
                      f'listen = "127.0.0.1:{port}"\ntls_cert = "{cert}"\ntls_key = "{key}"\n')
    server = subprocess.Popen([sys.executable, "-c", "from orchestrator.cli import main; main()", "serve",
                               "--config", str(config), "--state", str(store), "--log-level", "warning"],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(workdir / "serve.log", "wb"))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            httpx.get(f"https://127.0.0.1:{port}/v1/health", verify=False, timeout=2)
            return server
        except httpx.HTTPError:
            if server.poll() is not None:
                raise SystemExit("the server stopped: " + (workdir / "serve.log").read_text()[-2000:])
            time.sleep(0.3)
    server.kill()
    raise SystemExit("the server did not answer within 120 s")


def timed(client: httpx.Client, path: str, runs: int) -> tuple[float, bytes]:
    for _ in range(2):
        client.get(path)
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        answer = client.get(path)
        times.append(time.perf_counter() - began)
        answer.raise_for_status()
    return statistics.median(times), answer.content


def browser_renders(base: str, token: str, path: str, runs: int, screenshot: Path | None) -> list[float]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1400,900"):
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="leasewise-bench-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    options.accept_insecure_certs = True
    driver = webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=options)
    try:
        driver.get(base + "/login")
        driver.find_element(By.ID, "token").send_keys(token)
        driver.find_element(By.CSS_SELECTOR, "form.card button[type=submit]").click()
        WebDriverWait(driver, 30).until(lambda d: "/login" not in d.current_url)
        renders = []
        for _ in range(runs + 1):
            driver.get(base + path)
            WebDriverWait(driver, 30).until(
                lambda d: d.execute_script("return !!(window.leasewiseCalendar && window.leasewiseCalendar.drawnAt)"))
            renders.append(driver.execute_script("return window.leasewiseCalendar.drawnAt") / 1000)
        if screenshot is not None:
            driver.save_screenshot(str(screenshot))
        return renders[1:]   # (the first load fills the browser's caches: a returning visitor's)
    finally:
        driver.quit()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=300)
    parser.add_argument("--reservations", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=33)
    parser.add_argument("--mixed", action="store_true", help="best-effort work now and reservations today (a picture)")
    parser.add_argument("--view", choices=("day", "week", "month"), default=None)
    parser.add_argument("--screenshot", type=Path, default=None, help="save the calendar as the browser drew it")
    args = parser.parse_args()
    now = datetime.now(UTC).replace(microsecond=0)
    today = now.date()
    if args.mixed:
        first, view, day = datetime.combine(today, clock(), tzinfo=UTC), args.view or "day", today
    else:
        monday = today + timedelta(days=7 - today.weekday())
        first, view, day = datetime.combine(monday, clock(), tzinfo=UTC), args.view or "week", monday
    with tempfile.TemporaryDirectory(prefix="leasewise-web-bench-") as tmp:
        workdir = Path(tmp)
        store = workdir / "state.sqlite"
        began = time.perf_counter()
        leases, held = make_site(store, args.hosts, args.reservations, first, now, args.seed, args.mixed)
        with Store.open(store) as opened:
            token, _ = create_token(opened, "alice", admin=True, expires=timedelta(days=1), now=now)
        print(f"site: {args.hosts} hosts, {leases} leases submitted, {held} reservations from {first:%Y-%m-%d} "
              f"({view} view) (made in {time.perf_counter() - began:.1f} s)")
        port = free_port()
        server = serve(workdir, store, port)
        base = f"https://127.0.0.1:{port}"
        try:
            with httpx.Client(base_url=base, verify=False, timeout=60) as client:
                assert client.post("/login", data={"token": token}).status_code == 303
                page = f"/calendar?view={view}&date={_iso(day)}"
                server_s, html = timed(client, page, args.runs)
                data_s, data = timed(client, f"/calendar.json?view={view}&date={_iso(day)}", args.runs)
                assets = sum(len(client.get(f"/static/{name}").content)
                             for name in ("calendar.js", "leasewise.css", "favicon.svg"))
            renders = browser_renders(base, token, page, max(3, args.runs // 2), args.screenshot)
        finally:
            server.terminate()
            server.wait(timeout=60)
    weight = len(html) + assets
    render = statistics.median(renders)
    rows = [("server time, calendar page", f"{server_s * 1000:.0f} ms", server_s <= TARGETS["server"], "<= 200 ms"),
            ("  its data alone (/calendar.json)", f"{data_s * 1000:.0f} ms, {len(data) / 1024:.0f} KiB", None, ""),
            ("page weight (page + script + styles + icon)", f"{weight / 1024:.0f} KiB", weight <= TARGETS["weight"], "<= 1 MB"),
            ("first render, headless Chromium", f"{render * 1000:.0f} ms (runs: {', '.join(f'{r * 1000:.0f}' for r in renders)})",
             render <= TARGETS["render"], "<= 1 s")]
    for what, figure, met, target in rows:
        verdict = "" if met is None else f"  target {target}: {'met' if met else 'NOT met'}"
        print(f"{what}: {figure}{verdict}")
    if args.screenshot is not None:
        print(f"screenshot: {args.screenshot}")
    return 0 if all(met is not False for _, _, met, _ in rows) else 1


def _iso(day: date) -> str:
    return day.isoformat()


if __name__ == "__main__":
    sys.exit(main())
