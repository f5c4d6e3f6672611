"""Many clients at once against a real `leasewise serve`: the load test of issue 14 (benchmarks/api.py runs
it at full size and prints the latencies; tests/service/test_load.py runs it small and checks it).

The server runs as its own process (`leasewise serve`, simulated hosts on the wall clock, shutdowns and
suspensions that take real seconds); each client is a thread with its own connection that submits
(immediate, best-effort and advance-reservation leases of a few minutes), lists the live leases and
cancels one of its own, with a pause between requests as a person's script would. Afterwards the plan in
the store is checked against the hosts' capacity at every instant: nothing double-booked.

The clients start one by one over their first pause, as the users of a lab do (load tools call it the
ramp-up). A burst comes after the steady load (`burst`): that many clients, each connected already, send
one submission each at the same instant (a class told "now, everyone"); its latencies are a kind of their
own, since the last of them waits for all the others to be planned before it.

The clients may be spread over several processes (`processes`): users run the CLI each in a process of
their own, and 50 clients in one Python process measure that process's own queue for its GIL (decoding a
list of hundreds of leases costs the client more than the server) rather than the server.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from drivers.inventory import HostConfig
from orchestrator.service.models import submission_of
from orchestrator.model.lease_fields import request_from_fields
from orchestrator.model.timeutil import UTC, iso
from orchestrator.service.client import Client, RemoteError
from orchestrator.state.store import Store

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from orchestrator.cli import main; main()"]


@dataclass
class LoadResult:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[int, list[str]] = field(default_factory=lambda: defaultdict(list))   # exit code -> messages
    seconds: float = 0.0
    leases: int = 0
    overbooked: list[str] = field(default_factory=list)
    server_log: str = ""
    server_cpu_s: float | None = None   # the server's CPU time, start to the end of the load (Linux)
    server_peak_mib: float | None = None   # the server's peak resident memory (Linux: VmHWM)
    #: the clients' CPU time over the steady load (their process, or their processes), beside the server's:
    #: on a small machine the two share the cores, and a client's own work is inside its latencies
    client_cpu_s: float | None = None
    startup_s: float = 0.0   # from starting the server to its first answer: loading the store, re-planning
    #: kind -> the server's own seconds for each of those requests, in the same order (its Server-Timing
    #: header: from the app's receiving the request to its answer's start; None: no answer said it), to
    #: tell the server's share of a latency from the rest (the server's event loop, the wire, the client)
    server_times: dict[str, list[float | None]] = field(default_factory=lambda: defaultdict(list))

    def percentile(self, kind: str, p: float, of: str = "client") -> float | None:
        """The p-th percentile of a kind's latencies as its clients saw them (`of` "client"), as the server
        timed them ("server"), or of what each waited outside the server's app ("outside": the first
        less the second)."""
        seen, server = self.latencies.get(kind, []), self.server_times.get(kind, [])
        values = sorted(seen if of == "client" else
                        [t for t in server if t is not None] if of == "server" else
                        [c - t for c, t in zip(seen, server) if t is not None])
        if not values:
            return None
        index = min(len(values) - 1, max(0, int(round(p / 100 * len(values) + 0.5)) - 1))
        return values[index]

    def requests(self) -> int:
        """The steady load's requests (the burst's apart)."""
        return sum(len(v) for kind, v in self.latencies.items() if kind != "burst")


def make_site(workdir: Path, hosts: int) -> tuple[Path, Path, Path]:
    """A store with `hosts` simulated hosts of 16 vCPUs / 64 GiB, and the server's configuration."""
    store_path = workdir / "state.sqlite"
    with Store.open(store_path) as store:
        for i in range(1, hosts + 1):
            store.add_host(HostConfig(name=f"node{i:02d}", uri="test:///default"), 16, 65536)
    socket = Path(tempfile.mkdtemp(prefix="leasewise-load-")) / "api.sock"
    config = workdir / "serve.toml"
    config.write_text(
        '[daemon]\ndriver = "simulated"\npoll_interval = "1s"\n'
        # operations that take real time on the simulated hosts: the server must not wait for them
        '[scheduling]\nshutdown_time = "4s"\nsuspend_rate = 256.0\nresume_rate = 256.0\n'
        f'[serve]\nsocket = "{socket}"\nsocket_group = ""\n'
        # (every client stands for a user of its own, and all are root here)
        f'peer_max_connections = 1024\n')
    return store_path, config, socket


def preload(store_path: Path, leases: int, seed: int = 7) -> None:
    """`leases` advance reservations planned over the coming week (1-4 VMs of 1-4 vCPUs, 1-4 h each), written
    to the store before the server starts: the server then loads them and re-plans them as it starts."""
    from orchestrator.config import config_from_dict
    from orchestrator.state.cluster import Cluster

    rng = random.Random(seed)
    now = datetime.now(UTC).replace(microsecond=0)
    config = config_from_dict({"scheduling": {"shutdown_time": "4s", "suspend_rate": 256.0, "resume_rate": 256.0}})
    with Store.open(store_path) as store:
        cluster = Cluster(store, config)
        for _ in range(leases):
            start = now + timedelta(minutes=rng.randint(30, 7 * 24 * 60))
            fields = {"cpus": rng.choice([1, 2, 4]), "memory": rng.choice([1024, 2048, 4096]),
                      "nodes": rng.choice([1, 1, 2, 4]), "duration": f"{rng.randint(1, 4)}h", "start": iso(start)}
            cluster.submit(request_from_fields(fields, now, default_user="bench"), now)
        cluster.save(now)


def _client_loop(url: str, index: int, stop_at: float, result: LoadResult, lock: threading.Lock,
                 think: tuple[float, float], list_all: bool = False) -> None:
    rng = random.Random(index)
    mine: list[int] = []
    with Client(url, timeout=120) as client:
        time.sleep(rng.uniform(0, think[1]))   # (the ramp-up: clients start one by one)
        while time.monotonic() < stop_at:
            roll = rng.random()
            began = time.perf_counter()
            kind = "submit" if roll < 0.6 or not mine else "list" if roll < 0.85 else "cancel"
            try:
                if kind == "submit":
                    answer = client.submit(_request(rng))
                    if answer["state"] != "rejected":
                        mine.append(answer["id"])
                elif kind == "list":   # (a page of the caller's leases, or every page of everyone's)
                    if list_all:
                        client.leases(["active", "scheduled", "queued"], everyone=True)
                    else:
                        client.lease_page(["active", "scheduled", "queued"])
                else:
                    client.cancel(mine.pop(rng.randrange(len(mine))))
            except RemoteError as exc:
                with lock:
                    result.errors[exc.exit_code].append(f"{kind}: {exc}")
            took = time.perf_counter() - began
            with lock:
                result.latencies[kind].append(took)
                result.server_times[kind].append(None if client.server_ms is None else client.server_ms / 1000)
            time.sleep(rng.uniform(*think))


def _request(rng: random.Random):
    """A lease of a few minutes: immediate, advance reservation or best-effort, of 1-4 VMs."""
    now = datetime.now(UTC).replace(microsecond=0)
    shape = rng.random()
    fields = {"cpus": rng.choice([1, 2, 4]), "memory": rng.choice([1024, 2048, 4096]),
              "nodes": rng.choice([1, 1, 2, 4]), "duration": f"{rng.randint(1, 4)}m"}
    if shape < 0.4:
        fields["start"] = "now"
    elif shape < 0.6:
        fields["start"] = iso(now + timedelta(minutes=rng.randint(1, 10)))
    return submission_of(fields)


def _burst(url: str, clients: int, result: LoadResult) -> None:
    """`clients` connected clients send one submission each at the same instant (a barrier releases them)."""
    lock = threading.Lock()
    barrier = threading.Barrier(clients)

    def one(index: int) -> None:
        rng = random.Random(10_000 + index)
        with Client(url, timeout=120) as client:
            client.whoami()   # (connected, and the server has seen this client)
            request = _request(rng)
            barrier.wait(timeout=60)
            began = time.perf_counter()
            try:
                client.submit(request)
            except RemoteError as exc:
                with lock:
                    result.errors[exc.exit_code].append(f"burst: {exc}")
            took = time.perf_counter() - began
            with lock:
                result.latencies["burst"].append(took)
                result.server_times["burst"].append(None if client.server_ms is None else client.server_ms / 1000)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def overbooked(store_path: Path) -> list[str]:
    """Every instant at which the plan holds more on a host than it has (none, if nothing is double-booked)."""
    problems = []
    with Store.open(store_path) as store:
        capacity = {h.name: (h.vcpus, h.memory_mib) for h in store.hosts()}
        leases = store.load_leases()
    edges: dict[str, list[tuple[datetime, int, float, float]]] = defaultdict(list)
    for lease in leases:
        for vm in lease.reservations:
            for rr in vm.all_parts():
                end = rr.end
                if lease.is_final:   # (what a finished lease held stopped holding when it ended)
                    if rr.state.value == "scheduled" or lease.end_time is None:
                        continue
                    end = min(end, lease.end_time)
                if end <= rr.start:
                    continue
                for host, amount in rr.resources.items():
                    edges[host].append((rr.start, 1, amount.cpu, amount.memory))
                    edges[host].append((end, 0, amount.cpu, amount.memory))
    for host, points in edges.items():
        cpu = memory = 0.0
        for at, opening, c, m in sorted(points, key=lambda p: (p[0], p[1])):   # ends before starts at one instant
            sign = 1 if opening else -1
            cpu += sign * c
            memory += sign * m
            if cpu > capacity[host][0] * 100 + 1e-6 or memory > capacity[host][1] + 1e-6:
                problems.append(f"{host} at {iso(at)}: {cpu / 100:g} vCPUs, {memory:g} MiB planned")
    return problems


def _run_clients(url: str, indexes: range, stop_at: float, result: LoadResult, think: tuple[float, float],
                 list_all: bool = False) -> None:
    lock = threading.Lock()
    threads = [threading.Thread(target=_client_loop, args=(url, i, stop_at, result, lock, think, list_all))
               for i in indexes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _client_process(url: str, indexes: range, seconds: float, think: tuple[float, float], ready, results,
                    list_all: bool = False) -> None:
    """One process's share of the clients, started together with the others' (`ready`, a barrier)."""
    result = LoadResult()
    ready.wait()
    _run_clients(url, indexes, time.monotonic() + seconds, result, think, list_all)
    results.put((dict(result.latencies), dict(result.errors), dict(result.server_times)))


def _run_client_processes(url: str, clients: int, processes: int, seconds: float, result: LoadResult,
                          think: tuple[float, float], list_all: bool = False) -> float:
    """The clients (the same indexes, so the same requests) spread over `processes` processes; the seconds
    from their common start to the last one's end."""
    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(processes + 1)
    results = context.Queue()
    shares = [range(clients)[k::processes] for k in range(processes)]
    workers = [context.Process(target=_client_process, args=(url, share, seconds, think, ready, results, list_all))
               for share in shares]
    for worker in workers:
        worker.start()
    ready.wait(timeout=120)
    began = time.monotonic()
    for _ in workers:
        latencies, errors, server_times = results.get(timeout=seconds + 300)
        for kind, values in latencies.items():
            result.latencies[kind].extend(values)
        for kind, values in server_times.items():
            result.server_times[kind].extend(values)
        for code, messages in errors.items():
            result.errors[code].extend(messages)
    took = time.monotonic() - began
    for worker in workers:
        worker.join()
    return took


def wait_until_serving(url: str, server: subprocess.Popen, log: Path, timeout_s: float = 60.0) -> None:
    """Until the `leasewise serve` process `server` answers at `url` (its log in the error, should it stop
    or stay silent)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with Client(url) as probe:
                probe.whoami()
            return
        except RemoteError:
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"the server did not start: {log.read_text()}") from None
            time.sleep(0.2)


def run_load(workdir: Path, *, clients: int, seconds: float, hosts: int = 20,
             think: tuple[float, float] = (0.3, 1.2), processes: int = 1, burst: int = 0, leases: int = 0,
             list_all: bool = False) -> LoadResult:
    """`processes`: how many client processes share the clients; `burst`: how many submit at one instant
    after the steady load; `leases`: how many leases are planned before the server starts (`preload`);
    `list_all`: a list pages through everyone's leases instead of asking for a page of the caller's (see
    the module's docstring)."""
    store_path, config, socket = make_site(workdir, hosts)
    if leases:
        preload(store_path, leases)
    started = time.monotonic()
    log = open(workdir / "serve.log", "w")
    server = subprocess.Popen([*CLI, "serve", "--state", str(store_path), "--config", str(config),
                               "--log-level", "warning"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    result = LoadResult()
    try:
        url = f"unix:{socket}"
        wait_until_serving(url, server, workdir / "serve.log")
        result.startup_s = time.monotonic() - started
        if processes <= 1:
            began, cpu = time.monotonic(), time.process_time()
            _run_clients(url, range(clients), began + seconds, result, think, list_all)
            result.seconds = time.monotonic() - began
            result.client_cpu_s = time.process_time() - cpu
        else:
            cpu = _children_cpu_s()
            result.seconds = _run_client_processes(url, clients, processes, seconds, result, think, list_all)
            result.client_cpu_s = _children_cpu_s() - cpu   # (the server is not waited for yet: not in it)
        if burst:
            _burst(url, burst, result)
    finally:
        result.server_cpu_s = _cpu_seconds(server.pid)
        result.server_peak_mib = _peak_mib(server.pid)
        server.terminate()
        try:
            server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
        result.server_log = (workdir / "serve.log").read_text()
        socket.parent.rmdir() if socket.parent.exists() and not any(socket.parent.iterdir()) else None
    result.overbooked = overbooked(store_path)
    with Store.open(store_path) as store:
        result.leases = len(store.leases())
    return result


def _children_cpu_s() -> float:
    """User + system CPU time of this process's children that have ended and been waited for."""
    times = os.times()
    return times.children_user + times.children_system


def _cpu_seconds(pid: int) -> float | None:
    """A process's user + system CPU time (None where /proc does not say)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _peak_mib(pid: int) -> float | None:
    """A process's peak resident memory, MiB (None where /proc does not say)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def summary(result: LoadResult) -> str:
    cpu = "" if result.server_cpu_s is None else f", server CPU {result.server_cpu_s:.1f} s (its start included)"
    if result.server_peak_mib is not None:
        cpu += f", server peak RSS {result.server_peak_mib:.0f} MiB"
    cpu += f", server start (store loaded, plan rebuilt) {result.startup_s:.2f} s"
    if result.client_cpu_s is not None:
        cpu += f", clients' CPU {result.client_cpu_s:.1f} s"
    lines = [f"{result.requests()} requests in {result.seconds:.1f} s ({result.requests() / result.seconds:.1f}/s), "
             f"{result.leases} leases{cpu}"]
    for kind in ("submit", "list", "cancel", "burst"):
        values = result.latencies.get(kind)
        if values:
            lines.append(f"  {kind:6s} n={len(values):5d}  p50 {1000 * statistics.median(values):7.1f} ms  "
                         f"p90 {1000 * result.percentile(kind, 90):7.1f} ms  p99 {1000 * result.percentile(kind, 99):7.1f} ms  "
                         f"max {1000 * max(values):7.1f} ms")
    for of, title in (("server", "the server's own time (Server-Timing)"),
                      ("outside", "outside the server's app (each latency less its server's own time)")):
        shares = [f"{kind} {' / '.join(f'{1000 * result.percentile(kind, p, of):.1f}' for p in (50, 90, 99))}"
                  for kind in ("submit", "list", "cancel", "burst") if result.percentile(kind, 50, of) is not None]
        if shares:
            lines.append(f"  {title}, p50 / p90 / p99 ms: " + "; ".join(shares))
    for code, messages in sorted(result.errors.items()):
        lines.append(f"  exit {code}: {len(messages)} (e.g. {messages[0]})")
    lines.append(f"  over capacity: {len(result.overbooked)}")
    return "\n".join(lines)
