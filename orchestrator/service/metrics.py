"""The server's own measure of its requests, in Prometheus' text format (`GET /metrics`).

Each request is timed from the moment the app is handed it to its last byte of answer, and counted in a
histogram per method, route (its template: `/v1/leases/{lease_id}`, so ids do not make new series) and
status. An operator's Prometheus scrapes it. Each answer also says its own time, in a `Server-Timing`
header (`app;dur=MS`, from the request's arrival at the app to the start of its answer: browsers' developer
tools show it, and the load benchmark reads it to tell the server's share of a latency from the client's).
The registry is the app's own (no process-wide state), so two servers in one process (the tests) count apart.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest

#: bucket bounds, seconds: fine where the API's targets are (tens to hundreds of milliseconds)
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0)

CONTENT_TYPE = CONTENT_TYPE_LATEST


class RequestMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.seconds = Histogram("leasewise_api_request_seconds", "Time from a request's arrival at the app to "
                                 "the end of its answer", ["method", "route", "status"], buckets=BUCKETS,
                                 registry=self.registry)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.seconds.labels(method, route, str(status)).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class TimedApp:
    """ASGI middleware: every HTTP request into `metrics`, under its route's template (FastAPI puts the
    matched route on the scope) or `unmatched`."""

    def __init__(self, app: Any, metrics: RequestMetrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        began = time.perf_counter()
        status = 500

        async def sending(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                took = f"app;dur={1000 * (time.perf_counter() - began):.1f}".encode()
                message = {**message, "headers": [*message.get("headers", ()), (b"server-timing", took)]}
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = scope.get("route")
            self.metrics.observe(scope["method"], getattr(route, "path", None) or "unmatched", status,
                                 time.perf_counter() - began)
