"""The server's own request times at /metrics (Prometheus' text format): every request counted once under
its route's template and status, in buckets that tell the API's latency targets apart."""

from __future__ import annotations

import asyncio
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.service.models import submission_of
from orchestrator.service.client import RemoteError, server_ms


def _samples(running) -> dict[tuple, float]:
    transport = httpx.HTTPTransport(uds=str(running.socket))
    with httpx.Client(transport=transport, base_url="http://leasewise") as http:
        answer = http.get("/metrics")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def _count(samples, method: str, route: str, status: str) -> float:
    key = ("leasewise_api_request_seconds_count", (("method", method), ("route", route), ("status", status)))
    return samples.get(key, 0.0)


def test_each_request_is_timed_under_its_route_and_status(running):
    before = _samples(running)
    with running.client() as client:
        ids = [client.submit(submission_of({"cpus": 1, "memory": 512, "duration": "10m"}))["id"]
               for _ in range(3)]
        for lease_id in ids[:2]:
            client.cancel(lease_id)
        try:
            client.cancel(999_999)   # (no such lease: a 400, counted apart)
        except RemoteError:
            pass
        client.leases()
    after = _samples(running)
    assert _count(after, "POST", "/v1/leases", "201") - _count(before, "POST", "/v1/leases", "201") == 3
    assert _count(after, "POST", "/v1/leases/{lease_id}/cancel", "200") - \
           _count(before, "POST", "/v1/leases/{lease_id}/cancel", "200") == 2
    refused = [k for k in after if k[0].endswith("_count") and ("status", "400") in k[1]]
    assert sum(after[k] - before.get(k, 0.0) for k in refused) == 1
    assert _count(after, "GET", "/v1/leases", "200") - _count(before, "GET", "/v1/leases", "200") == 1
    # the buckets: every submission took less than the largest, none less than nothing
    labels = (("le", "+Inf"), ("method", "POST"), ("route", "/v1/leases"), ("status", "201"))
    assert after[("leasewise_api_request_seconds_bucket", labels)] == _count(after, "POST", "/v1/leases", "201")
    assert after[("leasewise_api_request_seconds_sum", labels[1:])] > 0


def test_each_answer_says_the_servers_own_time(running):
    """`Server-Timing: app;dur=MS` on every answer, a refusal's too: the time the client waited includes it."""
    with running.client() as client:
        began = time.perf_counter()
        client.submit(submission_of({"cpus": 1, "memory": 512, "duration": "10m"}))
        waited_ms = 1000 * (time.perf_counter() - began)
        assert client.server_ms is not None and 0 < client.server_ms <= waited_ms
        try:
            client.cancel(999_999)
        except RemoteError:
            pass
        assert client.server_ms is not None and client.server_ms > 0
    transport = httpx.HTTPTransport(uds=str(running.socket))
    with httpx.Client(transport=transport, base_url="http://leasewise") as http:
        header = http.get("/v1/whoami").headers["server-timing"]
    assert header.startswith("app;dur=") and server_ms(header) == float(header.removeprefix("app;dur="))


def test_a_server_timing_header_is_read_for_its_app_duration_only():
    assert server_ms("db;dur=3, app;desc=\"x\";dur=12.5") == 12.5
    assert server_ms("app;dur=abc") is None
    assert server_ms("db;dur=3") is None and server_ms("") is None


def test_metrics_are_for_known_callers_only(running):
    """On TCP without a token the caller is unknown: /metrics answers 401 like every other route."""
    async def get():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=running.server.app),
                                     base_url="http://leasewise") as http:
            return await http.get("/metrics")

    assert asyncio.run(get()).status_code == 401
