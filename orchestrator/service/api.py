"""The HTTP/JSON API of `leasewise serve` (FastAPI; its OpenAPI schema is served at /openapi.json, its
requests' times in Prometheus' format at /metrics). The server adds the web pages beside it
(`orchestrator.service.web`).

Every route declares the model of its answer (`models.responses`), so the schema states what each holds;
the answers that may be large (a lease list, encoded by SQLite; a lease, the events, the plan) are sent as
encoded, without FastAPI's check of every value, and the tests hold them to their models (schemathesis).

Every route names its caller first: on the Unix socket the connection's peer credentials (set on the
ASGI scope by the server, `PEER_KEY`), on TCP a bearer token. Errors are JSON
`{"error": {"code": EXIT, "message": LINE}}` with the CLI's exit code, so a client prints the same line
and exits with the same code as the CLI on a local store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from enum import Enum
from typing import Annotated

from fastapi import Depends, FastAPI, Header, Path, Query, Request
from fastapi.dependencies.utils import field_annotation_is_sequence
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from fastapi.responses import JSONResponse, Response

from drivers.errors import DriverError
from orchestrator.model.errors import InvalidRequest, LeasewiseError, shown
from orchestrator.model.numbers import MAX_WHOLE
from orchestrator.model.states import LeaseState
from orchestrator.model.text import printable
from orchestrator.model.timeutil import duration_from_seconds, parse_time, positive_duration
from orchestrator.service.backend import MAX_PAGE, PAGE
from orchestrator.service.inputs import host_config
from orchestrator.service.identity import Caller, NotAllowed, NotAuthenticated, caller_for_uid
from orchestrator.service.limits import RateLimited
from orchestrator.service.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from orchestrator.service.metrics import RequestMetrics, TimedApp
from orchestrator.model.placement import MAX_PROPERTIES
from orchestrator.service.models import (
    IDEMPOTENCY_KEY,
    MAX_LEASE_ID,
    MAX_PATH,
    PRINTABLE,
    TIME,
    USER_NAME,
    MAX_WINDOWS,
    Drain,
    EndChange,
    Extension,
    FreeQuery,
    HostAddition,
    HostImport,
    HostPropertyChange,
    ImageAddition,
    ImageSync,
    LeaseSubmission,
    Migration,
    QuotaChange,
    Shortening,
    TokenRequest,
    error_line,
    model_of,
)
from orchestrator.service.models.leases import LeasePage
from orchestrator.service.models import responses as answers
from orchestrator.service.operations import LeaseService
from orchestrator.state.codec import event_to_json, lease_to_json
from orchestrator.state.store import StoreBusy

#: where the server puts a Unix-socket connection's (pid, uid, gid) on the ASGI scope
PEER_KEY = "leasewise.peer"

EXIT_BAD_INPUT, EXIT_REJECTED, EXIT_NOT_ALLOWED, EXIT_BUSY = 2, 3, 4, 75
_STATUS = {EXIT_BAD_INPUT: 400, EXIT_REJECTED: 409, EXIT_NOT_ALLOWED: 403, EXIT_BUSY: 503}

#: authenticate(token text) -> Caller, for callers on TCP
TokenCheck = Callable[[str], Caller]


def status_for(code: int) -> int:
    """The HTTP status of an exit code (500: none of the known ones)."""
    return _STATUS.get(code, 500)


def error_response(code: int, message: str, status: int | None = None, field: str | None = None,
                   problem: str | None = None) -> JSONResponse:
    """The API's error: the CLI's exit code and its one line (what a client sent, quoted in it, printable);
    for bad input, the field it is about and the problem apart, so a client can name the field its way."""
    error: dict[str, Any] = {"code": code, "message": printable(message)}
    if field is not None and problem is not None:
        error.update(field=printable(field), problem=printable(problem))
    return JSONResponse({"error": error}, status_code=status or status_for(code))


def exit_code_of(exc: BaseException) -> int:
    """The CLI's exit code for an error (one table for the CLI and the API)."""
    if isinstance(exc, NotAllowed):
        return EXIT_NOT_ALLOWED
    if isinstance(exc, StoreBusy):
        return EXIT_BUSY
    own = getattr(exc, "exit_code", None)
    if own is not None:   # (errors that carry their own: over quota is 3)
        return int(own)
    return EXIT_BAD_INPUT


def make_app(service: LeaseService, admin_group: str, check_token: TokenCheck | None = None) -> FastAPI:
    """The API over `service` (whose use cases check every request; `service.submissions` rate-limits
    submissions for every client of the server)."""
    # (no /docs or /redoc: FastAPI's pages load their scripts from a CDN; the schema is at /openapi.json)
    app = FastAPI(title="leasewise", version="1", summary="Lease scheduler for lab KVM clusters",
                  docs_url=None, redoc_url=None, responses=_ERRORS, dependencies=[Depends(_known_query)])

    @app.exception_handler(LeasewiseError)
    async def _leasewise_error(request: Request, exc: LeasewiseError) -> JSONResponse:
        code = exit_code_of(exc)
        if isinstance(exc, RateLimited):
            response = error_response(code, str(exc), 429)
            response.headers["Retry-After"] = str(exc.retry_after_s)
            return response
        if isinstance(exc, InvalidRequest) and exc.where is None:
            return error_response(code, str(exc), None, exc.field, exc.problem)
        return error_response(code, str(exc), 401 if isinstance(exc, NotAuthenticated) else None)

    @app.exception_handler(DriverError)
    async def _driver_error(request: Request, exc: DriverError) -> JSONResponse:
        return error_response(EXIT_BAD_INPUT, str(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        """FastAPI's and Starlette's own refusals (a body that is not JSON, no such route), as the API's
        error, one line."""
        if exc.status_code >= 500:
            return error_response(1, f"server: {exc.detail}", exc.status_code)
        return error_response(EXIT_BAD_INPUT, f"request: {str(exc.detail)[:200]}", exc.status_code, "request",
                              str(exc.detail)[:200])

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        """A request the models refused: one line, in the service's words where its own check refused it."""
        field, problem = error_line(list(exc.errors()))
        if field in _ID_WORDS:   # (as the CLI says it of an id it cannot read)
            got = next((e.get("input") for e in exc.errors()), None)
            field, problem = _ID_WORDS[field], f"{shown(got)} is not {_ID_WORDS[field]} id (a positive whole number)"
            field = field.split()[-1]
        return error_response(EXIT_BAD_INPUT, f"{field}: {problem}", None, field, problem)

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

    @app.get("/v1/whoami", response_model=answers.Whoami)
    def whoami(who: Caller = Who) -> dict[str, Any]:
        return {"user": who.user, "admin": who.admin, "groups": sorted(who.groups), "via": who.via}

    @app.get("/v1/health", response_model=answers.Health)
    def health() -> dict[str, Any]:
        return {"ok": True, "time": service.now().isoformat()}

    # -- leases ---------------------------------------------------------------------------------------------
    @app.post("/v1/leases", status_code=201, response_model=answers.SubmitAnswer)
    def submit(body: LeaseSubmission, who: Caller = Who,
               key: IdempotencyKey = None) -> JSONResponse:   # type: ignore[assignment]
        """Submit a lease. With an `Idempotency-Key`, a retried submission (the same key and body) is
        answered with the lease the first attempt made."""
        return JSONResponse(service.submit(who, body, key=key), status_code=201)

    @app.get("/v1/leases", response_model=LeasePage)
    def list_leases(status: list[LeaseStateName] | None = Query(None, max_length=len(LeaseState)),
                    user: UserQuery = None, everyone: bool = Query(False, alias="all"),
                    after: LeaseAfter = None, limit: int = Query(PAGE, ge=1, le=MAX_PAGE),
                    who: Caller = Who) -> Response:   # type: ignore[assignment]
        """A page of leases by id (the caller's own unless `user` or `all`), and `next`: the id to ask for
        the next page `after`, or null when this page is the last."""
        # (encoded by the store, under the service's listing gate: sent as it is, without FastAPI's
        # validation of every value)
        states = None if status is None else [s.value for s in status]
        body = service.listed(lambda: service.lease_page_json(who, states, user, everyone, after, limit))
        return Response(body, media_type="application/json")

    @app.get("/v1/leases/{lease_id}", response_model=answers.LeaseShown)
    def show(lease_id: LeaseId, vms: bool = True, who: Caller = Who) -> JSONResponse:
        lease, events, found = service.lease(who, lease_id, with_vms=vms)
        return JSONResponse({"lease": lease_to_json(lease), "events": [event_to_json(e) for e in events],
                             "vms": None if found is None else [v.to_json() for v in found]})

    @app.post("/v1/leases/{lease_id}/cancel", response_model=answers.Cancelled)
    def cancel(lease_id: LeaseId, who: Caller = Who) -> dict[str, Any]:
        return service.cancel(who, lease_id)

    @app.post("/v1/leases/{lease_id}/extend", response_model=answers.Extended)
    def extend(lease_id: LeaseId, body: Extension, who: Caller = Who) -> dict[str, Any]:
        return service.extend(who, lease_id, positive_duration(body.by, "by"))

    @app.post("/v1/leases/{lease_id}/shorten", response_model=answers.Reshaped)
    def shorten(lease_id: LeaseId, body: Shortening, who: Caller = Who) -> dict[str, Any]:
        """Make a lease shorter by `by`, or to end at `to`: what it frees is planned at once."""
        return service.shorten(who, lease_id, body)

    @app.patch("/v1/leases/{lease_id}", response_model=answers.Reshaped)
    def update(lease_id: LeaseId, body: EndChange, who: Caller = Who) -> dict[str, Any]:
        """Move a lease's planned end, earlier or later (refused with the reason when it does not fit)."""
        return service.update(who, lease_id, body)

    @app.get("/v1/free", response_model=answers.FreeWindows)
    def free_windows(nodes: int = Query(1, ge=1, le=MAX_WHOLE), cpus: int | None = Query(None, ge=1, le=MAX_WHOLE),
                     memory: int | None = Query(None, ge=1, le=MAX_WHOLE), duration: str = Query(max_length=64),
                     count: int = Query(5, ge=1, le=MAX_WINDOWS), not_before: TimeQuery = None,
                     not_after: TimeQuery = None,
                     where: list[str] | None = Query(None, max_length=MAX_PROPERTIES),
                     spread: bool | None = None, pack: bool | None = None, exclusive: bool | None = None,
                     who: Caller = Who) -> dict[str, Any]:   # type: ignore[assignment]
        """The next `count` windows in which a lease of this size would fit as an advance reservation
        (`plan --free`): each a start, the latest end (null: none) and the hosts."""
        query = model_of(FreeQuery, {"nodes": nodes, "cpus": cpus, "memory": memory, "duration": duration,
                                     "count": count, "not_before": not_before, "not_after": not_after,
                                     "where": where, "spread": spread, "pack": pack, "exclusive": exclusive})
        return service.free_windows(who, query)

    @app.get("/v1/leases/{lease_id}/access", response_model=answers.AccessAnswer)
    def access(lease_id: LeaseId, node: int | None = Query(None, ge=0, le=MAX_WHOLE),
               who: Caller = Who) -> dict[str, Any]:
        return service.access(who, lease_id, node)

    # -- hosts and images --------------------------------------------------------------------------------------
    @app.get("/v1/hosts", response_model=answers.HostList, **_AS_GIVEN)
    def hosts(timeout: float = Query(3.0, gt=0, le=3600), who: Caller = Who) -> dict[str, Any]:
        return {"hosts": service.hosts(who, timeout)}

    @app.post("/v1/hosts/{host}/drain", response_model=answers.Drained)
    def drain(host: HostPath, body: Drain | None = None, who: Caller = Who) -> dict[str, Any]:
        by = parse_time(body.by, "by") if body is not None and body.by else None
        return service.drain(who, host, by)

    @app.post("/v1/hosts/{host}/undrain", response_model=answers.Undrained)
    def undrain(host: HostPath, who: Caller = Who) -> dict[str, Any]:
        return service.undrain(who, host)

    @app.post("/v1/hosts", status_code=201, response_model=answers.HostAdded)
    def host_add(body: HostAddition, who: Caller = Who) -> dict[str, Any]:
        return service.host_add(who, host_config(body.config.values()), body.cpus, body.memory, float(body.timeout))

    @app.post("/v1/hosts/import", status_code=201, response_model=answers.HostsImported)
    def host_import(body: HostImport, who: Caller = Who) -> dict[str, Any]:
        configs = [host_config(h.values(), _in_hosts(i)) for i, h in enumerate(body.hosts)]
        return service.host_import(who, configs, body.cpus, body.memory, float(body.timeout), body.source)

    @app.patch("/v1/hosts/{host}/properties", response_model=answers.HostPropertiesSet)
    def host_set(host: HostPath, body: HostPropertyChange, who: Caller = Who) -> dict[str, Any]:
        return service.host_set(who, host, body.set, body.unset)

    @app.delete("/v1/hosts/{host}", response_model=answers.HostRemoved)
    def host_remove(host: HostPath, drain: bool = False, who: Caller = Who) -> dict[str, Any]:
        return service.host_remove(who, host, drain)

    @app.get("/v1/hosts/{host}/check", response_model=answers.HostChecked)
    def host_check(host: HostPath, timeout: float = Query(10.0, gt=0, le=3600), who: Caller = Who) -> dict[str, Any]:
        return service.host_check(who, host, timeout)

    @app.post("/v1/images", status_code=201, response_model=answers.ImageAdded)
    def image_add(body: ImageAddition, who: Caller = Who) -> dict[str, Any]:
        return service.image_add(who, body.values())

    @app.post("/v1/images/{name}/sync", response_model=answers.ImageSynced)
    def image_sync(name: NamePath, body: ImageSync, who: Caller = Who) -> dict[str, Any]:
        return service.image_sync(who, name, body.host)

    @app.post("/v1/vms/{vm}/migrate", response_model=answers.Migrated)
    def migrate(vm: NamePath, body: Migration, who: Caller = Who) -> dict[str, Any]:
        return service.migrate(who, vm, body.to, float(body.max_downtime_ms),
                               None if body.bandwidth_mib_s is None else float(body.bandwidth_mib_s),
                               float(body.timeout_s), body.on_timeout)

    @app.get("/v1/images", response_model=answers.ImageList)
    def images(who: Caller = Who) -> dict[str, Any]:
        return {"images": service.images(who)}

    @app.delete("/v1/images/{name}", response_model=answers.ImageRemoved)
    def image_remove(name: NamePath, who: Caller = Who) -> dict[str, Any]:
        service.image_remove(who, name)
        return {"name": name}

    @app.get("/v1/events", response_model=answers.EventList)
    def events(lease: LeaseQuery = None, who: Caller = Who) -> JSONResponse:   # type: ignore[assignment]
        return JSONResponse({"events": [event_to_json(e) for e in service.events(who, lease)]})

    @app.get("/v1/plan", response_model=answers.Plan)
    def plan(start: TimeQuery = None, end: TimeQuery = None, who: Caller = Who) -> JSONResponse:  # type: ignore
        pairs, hosts, labels = service.plan(who, parse_time(start, "start") if start else None,
                                            parse_time(end, "end") if end else None)
        leases = {lease.id: lease for lease, _ in pairs}
        return JSONResponse({"hosts": hosts, "leases": [lease_to_json(l) for l in leases.values()],
                             "pairs": [{"lease": lease.id, "reservation": rr.id} for lease, rr in pairs],
                             "labels": {str(k): v for k, v in labels.items()}})

    # -- quotas and tokens -----------------------------------------------------------------------------------
    @app.put("/v1/quotas/{subject}", response_model=answers.QuotaSet)
    def quota_set(subject: SubjectPath, body: QuotaChange, who: Caller = Who) -> dict[str, Any]:
        return service.quota_set(who, subject, body.changes())

    @app.delete("/v1/quotas/{subject}", response_model=answers.QuotaRemoved)
    def quota_remove(subject: SubjectPath, who: Caller = Who) -> dict[str, Any]:
        service.quota_remove(who, subject)
        return {"subject": subject}

    @app.get("/v1/quotas", response_model=answers.QuotaList)
    def quota_list(who: Caller = Who) -> dict[str, Any]:
        return {"quotas": service.quota_list(who)}

    @app.get("/v1/quotas/{user}", response_model=answers.QuotaShown)
    def quota_show(user: SubjectPath, who: Caller = Who) -> dict[str, Any]:
        return service.quota_show(who, user)

    @app.post("/v1/tokens", status_code=201, response_model=answers.TokenMade)
    def token_create(body: TokenRequest | None = None, who: Caller = Who) -> dict[str, Any]:
        body = body or TokenRequest()
        expires = None if body.expires_s is None else duration_from_seconds(body.expires_s, "expires_s")
        return service.token_create(who, body.user, body.admin, expires, body.note)

    @app.get("/v1/tokens", response_model=answers.TokenList)
    def token_list(user: UserQuery = None, who: Caller = Who) -> dict[str, Any]:   # type: ignore[assignment]
        return {"tokens": service.token_list(who, user)}

    @app.delete("/v1/tokens/{token_id}", response_model=answers.TokenRevoked)
    def token_revoke(token_id: TokenId, who: Caller = Who) -> dict[str, Any]:
        return service.token_revoke(who, token_id)

    measured = RequestMetrics()
    app.add_middleware(TimedApp, metrics=measured)
    app.openapi = _without_422(app)   # type: ignore[method-assign]

    @app.get("/metrics", include_in_schema=False)
    def metrics(who: Caller = Who) -> Response:
        """Every request's time, per method, route and status, in Prometheus' text format."""
        return Response(content=measured.render(), media_type=METRICS_CONTENT_TYPE)

    return app


def _in_hosts(i: int) -> Callable[[str], str]:
    """How an import's host `i` names its fields in errors (`hosts[i].uri`)."""
    return lambda field: f"hosts[{i}].{field}"


def _without_422(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """The app's schema without FastAPI's own 422 answer, which it adds to every route that takes input: a
    request the models refuse is answered 400 with the API's error (`ErrorBody`), never 422."""
    made = app.openapi

    def schema() -> dict[str, Any]:
        if app.openapi_schema is None:
            found = made()
            for item in found["paths"].values():
                for operation in item.values():
                    operation.get("responses", {}).pop("422", None)
            for name in ("HTTPValidationError", "ValidationError"):
                found.get("components", {}).get("schemas", {}).pop(name, None)
        return app.openapi_schema   # type: ignore[return-value]

    return schema


async def _known_query(request: Request) -> None:   # (no I/O: on the event loop, not a request thread)
    """A query parameter the route does not take is refused by name, as an unknown key of a body is (a typo
    such as `?stauts=active` would otherwise be ignored, and every lease listed)."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    fields = [*dependant.query_params, *(p for sub in dependant.dependencies for p in sub.query_params)]
    known = {p.alias: field_annotation_is_sequence(p.field_info.annotation) for p in fields}
    for name in request.query_params:
        if name not in known:
            raise InvalidRequest(name, "unknown query parameter" + (f" (this route takes {', '.join(sorted(known))})"
                                                                    if known else " (this route takes none)"))
        if not known[name] and len(request.query_params.getlist(name)) > 1:
            raise InvalidRequest(name, "is given more than once: give it once")


#: the answers every route may give besides its own (the API's error body)
_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": answers.ErrorBody, "description": what} for status, what in (
        (400, "Bad input (exit code 2): one line naming the field"), (401, "No or a bad token"),
        (403, "Not allowed (exit code 4)"), (408, "The request's body came too slowly"),
        (409, "Well-formed, but refused (exit code 3)"), (413, "The request's body is too large"),
        (429, "Too many submissions: try again after Retry-After seconds (exit code 75)"),
        (503, "The store stayed busy: try again (exit code 75)"))}
#: an answer with the fields its use case gave (a host list's rows have `reachable` only where hosts were asked)
_AS_GIVEN: dict[str, Any] = {"response_model_exclude_unset": True}
#: path parameters: ids, names
LeaseId = Annotated[int, Path(ge=1, le=MAX_LEASE_ID, description="A lease's id")]
TokenId = Annotated[int, Path(ge=1, le=MAX_LEASE_ID, description="A token's id")]
HostPath = Annotated[str, Path(min_length=1, max_length=253, pattern=PRINTABLE)]
NamePath = Annotated[str, Path(min_length=1, max_length=MAX_PATH, pattern=PRINTABLE)]
SubjectPath = Annotated[str, Path(min_length=1, max_length=257, pattern=PRINTABLE)]
LeaseQuery = Annotated[int | None, Query(ge=1, le=MAX_LEASE_ID)]
LeaseAfter = Annotated[int | None, Query(ge=0, le=MAX_LEASE_ID)]
UserQuery = Annotated[str | None, Query(min_length=1, max_length=64, pattern=USER_NAME)]
TimeQuery = Annotated[str | None, Query(max_length=40, pattern=TIME)]
IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", pattern=IDEMPOTENCY_KEY,
                                              description="Makes a retried submission answer with the lease the "
                                                          "first attempt made (printable ASCII, at most 255)")]
LeaseStateName = Enum("LeaseStateName", {s.name: s.value for s in LeaseState}, type=str)   # type: ignore[misc]
#: how a refused id is named, as the CLI names it
_ID_WORDS = {"lease_id": "a lease", "lease": "a lease", "token_id": "a token"}
