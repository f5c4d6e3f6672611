"""The HTTP/JSON API of `leasewise serve` (FastAPI; its OpenAPI schema is served at /openapi.json, its
requests' times in Prometheus' format at /metrics).

Every route names its caller first: on the Unix socket the connection's peer credentials (set on the
ASGI scope by the server, `PEER_KEY`), on TCP a bearer token. Errors are JSON
`{"error": {"code": EXIT, "message": LINE}}` with the CLI's exit code, so a client prints the same line
and exits with the same code as the CLI on a local store.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from fastapi import Body, Depends, FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response

from drivers.errors import DriverError
from orchestrator.model.errors import InvalidRequest, LeasewiseError
from orchestrator.model.timeutil import parse_duration, parse_time
from orchestrator.service.backend import MAX_PAGE, PAGE
from orchestrator.service.inputs import host_config
from orchestrator.service.identity import Caller, NotAllowed, NotAuthenticated, caller_for_uid
from orchestrator.service.limits import RateLimited, SubmissionRate
from orchestrator.service.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from orchestrator.service.metrics import RequestMetrics, TimedApp
from orchestrator.service.operations import LeaseService
from orchestrator.state.codec import event_to_json, lease_to_json, request_from_json
from orchestrator.state.store import StoreBusy

#: where the server puts a Unix-socket connection's (pid, uid, gid) on the ASGI scope
PEER_KEY = "leasewise.peer"

EXIT_BAD_INPUT, EXIT_REJECTED, EXIT_NOT_ALLOWED, EXIT_BUSY = 2, 3, 4, 75
_STATUS = {EXIT_BAD_INPUT: 400, EXIT_REJECTED: 409, EXIT_NOT_ALLOWED: 403, EXIT_BUSY: 503}

#: authenticate(token text) -> Caller, for callers on TCP
TokenCheck = Callable[[str], Caller]


def error_response(code: int, message: str, status: int | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status or _STATUS.get(code, 500))


def exit_code_of(exc: BaseException) -> int:
    """The CLI's exit code for an error (one table for the CLI and the API)."""
    if isinstance(exc, NotAllowed):
        return EXIT_NOT_ALLOWED
    if isinstance(exc, StoreBusy):
        return EXIT_BUSY
    if getattr(exc, "exit_code", None) is not None:   # (errors that carry their own: over quota is 3)
        return int(exc.exit_code)
    return EXIT_BAD_INPUT


def make_app(service: LeaseService, admin_group: str, check_token: TokenCheck | None = None,
             submissions: SubmissionRate | None = None) -> FastAPI:
    """`submissions`: each user's rate of lease submissions (admins are not limited); None: no limit."""
    app = FastAPI(title="leasewise", version="1", summary="Lease scheduler for lab KVM clusters")

    @app.exception_handler(LeasewiseError)
    async def _leasewise_error(request: Request, exc: LeasewiseError) -> JSONResponse:
        code = exit_code_of(exc)
        if isinstance(exc, RateLimited):
            response = error_response(code, str(exc), 429)
            response.headers["Retry-After"] = str(exc.retry_after_s)
            return response
        return error_response(code, str(exc), 401 if isinstance(exc, NotAuthenticated) else None)

    @app.exception_handler(DriverError)
    async def _driver_error(request: Request, exc: DriverError) -> JSONResponse:
        return error_response(EXIT_BAD_INPUT, str(exc))

    def caller(request: Request) -> Caller:
        peer = request.scope.get(PEER_KEY)
        if peer is not None:
            return caller_for_uid(peer[1], admin_group)
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise NotAuthenticated("no credentials: present an API token (Authorization: Bearer TOKEN)")
        if check_token is None:
            raise NotAuthenticated("this server takes no tokens")
        return check_token(token.strip())

    Who = Depends(caller)

    @app.get("/v1/whoami")
    def whoami(who: Caller = Who) -> dict[str, Any]:
        return {"user": who.user, "admin": who.admin, "groups": sorted(who.groups), "via": who.via}

    @app.get("/v1/health")
    def health() -> dict[str, Any]:
        return {"ok": True, "time": service.now().isoformat()}

    # -- leases ---------------------------------------------------------------------------------------------
    @app.post("/v1/leases", status_code=201)
    def submit(body: dict[str, Any] = Body(...), who: Caller = Who) -> JSONResponse:
        if submissions is not None and not who.admin:
            submissions.take(who.user)
        request = request_from_json(body.get("request"))
        return JSONResponse({"answer": service.submit(who, request)}, status_code=201)

    @app.get("/v1/leases")
    def list_leases(status: list[str] | None = Query(None), user: str | None = None, everyone: bool = Query(False, alias="all"),
                    after: int | None = Query(None, ge=0), limit: int = Query(PAGE, ge=1, le=MAX_PAGE),
                    who: Caller = Who) -> Response:
        """A page of leases by id (the caller's own unless `user` or `all`), and `next`: the id to ask for
        the next page `after`, or null when this page is the last."""
        # (encoded by the store, under the service's listing gate: sent as it is, without FastAPI's
        # validation of every value)
        body = service.listed(lambda: service.lease_page_json(who, status, user, everyone, after, limit))
        return Response(body, media_type="application/json")

    @app.get("/v1/leases/{lease_id}")
    def show(lease_id: int, vms: bool = True, who: Caller = Who) -> JSONResponse:
        lease, events, found = service.lease(who, lease_id, with_vms=vms)
        return JSONResponse({"lease": lease_to_json(lease), "events": [event_to_json(e) for e in events],
                             "vms": None if found is None else [v.to_json() for v in found]})

    @app.post("/v1/leases/{lease_id}/cancel")
    def cancel(lease_id: int, who: Caller = Who) -> dict[str, Any]:
        return service.cancel(who, lease_id)

    @app.post("/v1/leases/{lease_id}/extend")
    def extend(lease_id: int, body: dict[str, Any] = Body(...), who: Caller = Who) -> dict[str, Any]:
        by = _duration(body.get("by"), "--by")
        return service.extend(who, lease_id, by)

    @app.get("/v1/leases/{lease_id}/access")
    def access(lease_id: int, node: int | None = None, who: Caller = Who) -> dict[str, Any]:
        return service.access(who, lease_id, node)

    # -- hosts and images --------------------------------------------------------------------------------------
    @app.get("/v1/hosts")
    def hosts(timeout: float = Query(3.0, gt=0, le=3600), who: Caller = Who) -> dict[str, Any]:
        return {"hosts": service.hosts(who, timeout)}

    @app.post("/v1/hosts/{host}/drain")
    def drain(host: str, body: dict[str, Any] = Body(default={}), who: Caller = Who) -> dict[str, Any]:
        by = parse_time(body["by"], "--by") if body.get("by") else None
        return service.drain(who, host, by)

    @app.post("/v1/hosts/{host}/undrain")
    def undrain(host: str, who: Caller = Who) -> dict[str, Any]:
        return service.undrain(who, host)

    @app.post("/v1/hosts", status_code=201)
    def host_add(body: dict[str, Any] = Body(...), who: Caller = Who) -> dict[str, Any]:
        return service.host_add(who, _host_config(body.get("config")), _whole(body, "cpus", "--cpus"),
                                _whole(body, "memory", "--memory"), _seconds(body, "timeout", "--timeout"))

    @app.post("/v1/hosts/import", status_code=201)
    def host_import(body: dict[str, Any] = Body(...), who: Caller = Who) -> dict[str, Any]:
        hosts = body.get("hosts")
        if not isinstance(hosts, list):
            raise InvalidRequest("hosts", "must be a list of host settings")
        return service.host_import(who, [_host_config(h) for h in hosts], _whole(body, "cpus", "--cpus"),
                                   _whole(body, "memory", "--memory"), _seconds(body, "timeout", "--timeout"),
                                   str(body.get("source") or "the inventory"))

    @app.delete("/v1/hosts/{host}")
    def host_remove(host: str, drain: bool = False, who: Caller = Who) -> dict[str, Any]:
        return service.host_remove(who, host, drain)

    @app.get("/v1/hosts/{host}/check")
    def host_check(host: str, timeout: float = Query(10.0, gt=0, le=3600), who: Caller = Who) -> dict[str, Any]:
        return service.host_check(who, host, timeout)

    @app.post("/v1/images", status_code=201)
    def image_add(body: dict[str, Any] = Body(...), who: Caller = Who) -> dict[str, Any]:
        return service.image_add(who, dict(body))

    @app.post("/v1/vms/{vm}/migrate")
    def migrate(vm: str, body: dict[str, Any] = Body(...), who: Caller = Who) -> dict[str, Any]:
        to = body.get("to")
        if not isinstance(to, str) or not to:
            raise InvalidRequest("--to", "is required (a host name)")
        on_timeout = body.get("on_timeout", "abort")
        if on_timeout not in ("abort", "force"):
            raise InvalidRequest("--on-timeout", f"must be 'abort' or 'force': got {on_timeout!r}")
        bandwidth = body.get("bandwidth_mib_s")
        return service.migrate(who, vm, to, _number(body, "max_downtime_ms", "--max-downtime"),
                               None if bandwidth is None else _number(body, "bandwidth_mib_s", "--bandwidth"),
                               _number(body, "timeout_s", "--timeout"), on_timeout)

    @app.get("/v1/images")
    def images(who: Caller = Who) -> dict[str, Any]:
        return {"images": service.images(who)}

    @app.delete("/v1/images/{name}")
    def image_remove(name: str, who: Caller = Who) -> dict[str, Any]:
        service.image_remove(who, name)
        return {"name": name}

    @app.get("/v1/events")
    def events(lease: int | None = None, who: Caller = Who) -> JSONResponse:
        return JSONResponse({"events": [event_to_json(e) for e in service.events(who, lease)]})

    @app.get("/v1/plan")
    def plan(start: str | None = None, end: str | None = None, who: Caller = Who) -> JSONResponse:
        pairs, hosts, labels = service.plan(who, parse_time(start, "--from") if start else None,
                                            parse_time(end, "--to") if end else None)
        leases = {lease.id: lease for lease, _ in pairs}
        return JSONResponse({"hosts": hosts, "leases": [lease_to_json(l) for l in leases.values()],
                             "pairs": [[lease.id, rr.id] for lease, rr in pairs],
                             "labels": {str(k): v for k, v in labels.items()}})

    # -- quotas and tokens -----------------------------------------------------------------------------------
    @app.put("/v1/quotas/{subject}")
    def quota_set(subject: str, body: dict[str, Any] = Body(...), who: Caller = Who) -> dict[str, Any]:
        return service.quota_set(who, subject, _quota_changes(body))

    @app.delete("/v1/quotas/{subject}")
    def quota_remove(subject: str, who: Caller = Who) -> dict[str, Any]:
        service.quota_remove(who, subject)
        return {"subject": subject}

    @app.get("/v1/quotas")
    def quota_list(who: Caller = Who) -> dict[str, Any]:
        return {"quotas": service.quota_list(who)}

    @app.get("/v1/quotas/{user}")
    def quota_show(user: str, who: Caller = Who) -> dict[str, Any]:
        return service.quota_show(who, user)

    @app.post("/v1/tokens", status_code=201)
    def token_create(body: dict[str, Any] = Body(default={}), who: Caller = Who) -> dict[str, Any]:
        seconds = body.get("expires_s")
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0):
            raise InvalidRequest("--expires", f"must be a positive number of seconds (got {seconds!r})")
        return service.token_create(who, body.get("user"), bool(body.get("admin", False)),
                                    None if seconds is None else timedelta(seconds=seconds), str(body.get("note", "")))

    @app.get("/v1/tokens")
    def token_list(user: str | None = None, who: Caller = Who) -> dict[str, Any]:
        return {"tokens": service.token_list(who, user)}

    @app.delete("/v1/tokens/{token_id}")
    def token_revoke(token_id: int, who: Caller = Who) -> dict[str, Any]:
        return service.token_revoke(who, token_id)

    measured = RequestMetrics()
    app.add_middleware(TimedApp, metrics=measured)

    @app.get("/metrics", include_in_schema=False)
    def metrics(who: Caller = Who) -> Response:
        """Every request's time, per method, route and status, in Prometheus' text format."""
        return Response(content=measured.render(), media_type=METRICS_CONTENT_TYPE)

    return app


_AMOUNTS = ("vcpus", "memory_mib", "vms")
_SPANS = ("max_duration", "max_ahead")


def _quota_changes(body: dict[str, Any]) -> dict[str, Any]:
    """A quota change as JSON: amounts as whole numbers, spans as seconds (`max_duration_s`), null removes."""
    changes: dict[str, Any] = {}
    for key, value in body.items():
        if key in _AMOUNTS:
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise InvalidRequest(key, f"must be a whole number >= 0 or null (got {value!r})")
            changes[key] = value
        elif key.endswith("_s") and key[:-2] in _SPANS:
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
                raise InvalidRequest(key, f"must be seconds >= 0 or null (got {value!r})")
            changes[key[:-2]] = None if value is None else timedelta(seconds=value)
        else:
            raise InvalidRequest(key, f"unknown quota limit (one of {', '.join(_AMOUNTS)}, max_duration_s, max_ahead_s)")
    if not changes:
        raise InvalidRequest("quota", "give at least one limit to set")
    return changes


def _duration(value: Any, label: str) -> timedelta:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = f"{value}s"
    if not isinstance(value, str):
        raise InvalidRequest(label, "is required (e.g. 30m)")
    amount = parse_duration(value, label)
    if amount.total_seconds() <= 0:
        raise InvalidRequest(label, f"must be greater than zero (got {value!r})")
    return amount


def _host_config(value: Any):
    """A host's settings as JSON (HostConfig's fields), checked as `host add` checks its options."""
    if not isinstance(value, dict):
        raise InvalidRequest("config", "must be a host's settings (name, uri, ...)")
    return host_config(value)


def _whole(body: dict[str, Any], key: str, label: str) -> int | None:
    value = body.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 2**31 - 1):
        raise InvalidRequest(label, f"must be a whole number > 0 (got {value!r})")
    return value


def _number(body: dict[str, Any], key: str, label: str) -> float:
    value = body.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise InvalidRequest(label, f"must be a number > 0 (got {value!r})")
    return float(value)


def _seconds(body: dict[str, Any], key: str, label: str) -> float:
    value = _number(body, key, label)
    if value > 3600:
        raise InvalidRequest(label, f"must be at most 3600 seconds (got {value!r})")
    return value
