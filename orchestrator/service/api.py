"""The HTTP/JSON API of `leasewise serve` (FastAPI; its OpenAPI schema is served at /openapi.json).

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
from fastapi.responses import JSONResponse

from drivers.errors import DriverError
from orchestrator.model.errors import InvalidRequest, LeasewiseError
from orchestrator.model.timeutil import parse_duration, parse_time
from orchestrator.service.identity import Caller, NotAllowed, NotAuthenticated, caller_for_uid
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


def make_app(service: LeaseService, admin_group: str, check_token: TokenCheck | None = None) -> FastAPI:
    app = FastAPI(title="leasewise", version="1", summary="Lease scheduler for lab KVM clusters")

    @app.exception_handler(LeasewiseError)
    async def _leasewise_error(request: Request, exc: LeasewiseError) -> JSONResponse:
        code = exit_code_of(exc)
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
    def submit(body: dict[str, Any] = Body(...), who: Caller = Who) -> dict[str, Any]:
        request = request_from_json(body.get("request"))
        answer = service.submit(who, request)
        return {"answer": answer}

    @app.get("/v1/leases")
    def list_leases(status: list[str] | None = Query(None), user: str | None = None,
                    who: Caller = Who) -> dict[str, Any]:
        leases = service.leases(who, status, user)
        return {"leases": [lease_to_json(l) for l in leases]}

    @app.get("/v1/leases/{lease_id}")
    def show(lease_id: int, vms: bool = True, who: Caller = Who) -> dict[str, Any]:
        lease, events, found = service.lease(who, lease_id, with_vms=vms)
        return {"lease": lease_to_json(lease), "events": [event_to_json(e) for e in events],
                "vms": None if found is None else [v.to_json() for v in found]}

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
    @app.post("/v1/hosts/{host}/drain")
    def drain(host: str, body: dict[str, Any] = Body(default={}), who: Caller = Who) -> dict[str, Any]:
        by = parse_time(body["by"], "--by") if body.get("by") else None
        return service.drain(who, host, by)

    @app.post("/v1/hosts/{host}/undrain")
    def undrain(host: str, who: Caller = Who) -> dict[str, Any]:
        return service.undrain(who, host)

    @app.get("/v1/images")
    def images(who: Caller = Who) -> dict[str, Any]:
        return {"images": [_image_json(i) for i in service.images(who)]}

    return app


def _duration(value: Any, label: str) -> timedelta:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = f"{value}s"
    if not isinstance(value, str):
        raise InvalidRequest(label, "is required (e.g. 30m)")
    amount = parse_duration(value, label)
    if amount.total_seconds() <= 0:
        raise InvalidRequest(label, f"must be greater than zero (got {value!r})")
    return amount


def _image_json(image) -> dict[str, Any]:
    from dataclasses import asdict

    data = asdict(image)
    return {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in data.items()}
