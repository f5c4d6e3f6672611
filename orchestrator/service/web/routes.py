"""The pages and the actions of the web face, each through the `LeaseService` use case the API calls.

Pages (GET) are served from FastAPI's thread pool, as the API's routes are; actions (POST) read their form
on the event loop, then run in the pool. A visitor who is not signed in is sent to the sign-in page; an
action refused by a use case shows its one line (the CLI's), with the HTTP status the API gives it.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup
from starlette.concurrency import run_in_threadpool

from drivers.errors import DriverError
from orchestrator.analysis.report import build_report, nothing_text
from orchestrator.analysis.timeline import plot_available
from orchestrator.model.errors import InvalidRequest, LeasewiseError
from orchestrator.model.states import FINAL_STATES
from orchestrator.model.text import printable
from orchestrator.service.api import TokenCheck, error_response, exit_code_of, status_for
from orchestrator.service.identity import NotAuthenticated
from orchestrator.service.limits import RateLimited
from orchestrator.service.operations import LeaseService
from orchestrator.service.web import forms, views
from orchestrator.service.web.access import Doorkeeper, Visitor
from orchestrator.service.web.sessions import COOKIE, Session, Sessions

#: headers of every page: nothing from another origin, no framing, no sniffing, no caching of what a user sees
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
#: the lease table's longest page (the newest first)
MAX_ROWS = 500
#: the widest window the calendar's data is asked for (a month is the widest view)
MAX_WINDOW = timedelta(days=62)



def _shown(value: Any) -> Any:
    """Every value a page prints, through `printable`: Jinja2 escapes HTML, not control or bidi characters
    (a lease name holding U+202E would turn the rest of its row around)."""
    if isinstance(value, Markup):
        return Markup(printable(str(value)))
    return printable(value) if isinstance(value, str) else value


_templates = Environment(loader=PackageLoader("orchestrator.service.web", "templates"),
                         autoescape=select_autoescape(["html"]), undefined=StrictUndefined,
                         trim_blocks=True, lstrip_blocks=True, finalize=_shown)


def web_router(service: LeaseService, admin_group: str, check_token: TokenCheck | None,
               sessions: Sessions | None = None) -> APIRouter:
    door = Doorkeeper(service, admin_group, check_token, sessions or Sessions(service.now))
    router = APIRouter(include_in_schema=False)

    # -- rendering ------------------------------------------------------------------------------------------
    def page(visitor: Visitor | None, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        html = _templates.get_template(template).render(
            visitor=visitor, csrf=visitor.session.csrf if visitor and visitor.session else "", **context)
        response = HTMLResponse(html, status_code=status, headers=PAGE_HEADERS)
        if visitor is not None and visitor.new_session and visitor.session is not None:
            _set_cookie(response, visitor.session, service)
        return response

    def failed(visitor: Visitor | None, exc: Exception, **context: Any) -> HTMLResponse:
        code = exit_code_of(exc)
        return page(visitor, "message.html", status_for(code), heading="Not done" if code != 3 else "Refused",
                    lines=[str(exc)], problem=True, **context)

    def shown(request: Request, make: Callable[[Visitor], Response]) -> Response:
        """A page for the visitor; the sign-in page for someone not signed in."""
        try:
            visitor = door.visitor(request)
        except NotAuthenticated as exc:
            return _to_login(request, str(exc))
        except LeasewiseError as exc:
            return failed(None, exc)
        try:
            return make(visitor)
        except (LeasewiseError, DriverError) as exc:
            return failed(visitor, exc)

    async def acted(request: Request, make: Callable[[Visitor, dict[str, str]], Response]) -> Response:
        """An action: its form read and shown to be the visitor's own, then `make` in the thread pool."""
        visitor = None
        try:
            form = await forms.read_form(request)
            visitor = await run_in_threadpool(door.acting, request, form)
            return await run_in_threadpool(make, visitor, form)
        except NotAuthenticated as exc:
            return page(None, "message.html", 401, heading="Signed out", problem=True,
                        lines=[str(exc), "Sign in again; nothing was done."])
        except (LeasewiseError, DriverError) as exc:
            return failed(visitor, exc)

    # -- signing in and out ---------------------------------------------------------------------------------
    @router.get("/")
    def home() -> Response:
        return RedirectResponse("/calendar", 303)

    @router.get("/login")
    def login_page(request: Request, next: str = "/calendar", why: str = "") -> Response:
        try:
            door.visitor(request)
        except NotAuthenticated:
            return page(None, "login.html", next=_local(next), why=why, error="")
        except LeasewiseError as exc:
            return failed(None, exc)
        return RedirectResponse(_local(next), 303)

    @router.post("/login")
    async def login(request: Request) -> Response:
        try:
            form = await forms.read_form(request)
            door.same_origin(request)
            token = form.get("token", "").strip()
            if not token:
                raise InvalidRequest("token", "is required (make one with `leasewise token create`)")
            session = await run_in_threadpool(door.sign_in, token)
        except NotAuthenticated as exc:
            return page(None, "login.html", 401, next=_local(request.query_params.get("next")), why="", error=str(exc))
        except LeasewiseError as exc:
            return page(None, "login.html", status_for(exit_code_of(exc)), next="/calendar", why="", error=str(exc))
        response = RedirectResponse(_local(form.get("next")), 303)
        _set_cookie(response, session, service)
        return response

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        def end(visitor: Visitor, form: dict[str, str]) -> Response:
            door.sessions.close(visitor.session.id if visitor.session else None)
            response = RedirectResponse("/login?why=" + quote("signed out"), 303)
            response.delete_cookie(COOKIE, path="/", secure=True, httponly=True, samesite="strict")
            return response

        return await acted(request, end)

    # -- the calendar ---------------------------------------------------------------------------------------
    def window_data(visitor: Visitor, view: str | None, day: str | None) -> dict[str, Any]:
        window = views.Window.of(view, day, service.now().date())
        found = service.calendar(visitor.caller, window.start, window.end)
        return views.calendar_data(window, found, visitor.caller.user)

    @router.get("/calendar")
    def calendar(request: Request, view: str | None = None, date: str | None = None) -> Response:
        def make(visitor: Visitor) -> Response:
            data = window_data(visitor, view, date)
            return page(visitor, "calendar.html", nav="calendar", data=data, data_json=views.embedded_json(data),
                        views=views.VIEWS, kinds=data["kinds"])

        return shown(request, make)

    @router.get("/calendar.json")
    def calendar_json(request: Request, view: str | None = None, date: str | None = None) -> Response:
        try:
            visitor = door.visitor(request)
            body = json.dumps(window_data(visitor, view, date), separators=(",", ":"))
        except NotAuthenticated as exc:
            return error_response(4, str(exc), 401)
        except LeasewiseError as exc:
            return error_response(exit_code_of(exc), str(exc))
        return Response(body, media_type="application/json", headers={"Cache-Control": "no-store"})

    # -- leases ---------------------------------------------------------------------------------------------
    @router.get("/leases")
    def leases(request: Request, scope: str = "all", state: str | None = None) -> Response:
        def make(visitor: Visitor) -> Response:
            mine = scope == "mine"
            choice, states = views.listed_states(state)
            who = visitor.caller
            found = service.listed(lambda: service.leases(who, states, who.user if mine else None, everyone=not mine))[::-1]
            return page(visitor, "leases.html", nav="leases", mine=mine, state=choice,
                        states=views.STATE_CHOICES, rows=[views.lease_row(l) for l in found[:MAX_ROWS]],
                        total=len(found), shown=min(len(found), MAX_ROWS))

        return shown(request, make)

    def submit_form(visitor: Visitor, status: int = 200, values: dict[str, str] | None = None,
                    error: str = "", field: str = "", free: dict[str, Any] | None = None) -> HTMLResponse:
        return page(visitor, "submit.html", status, nav="new", values=values or {}, error=error, bad_field=field,
                    images=service.images(visitor.caller), free=None if free is None else views.free_rows(free))

    async def asked_by_the_form(request: Request, ask: Callable[[Visitor, dict[str, str]], dict[str, Any]],
                                answered: Callable[[Visitor, dict[str, str], dict[str, Any]], Response]) -> Response:
        """An action of the submit form: `ask` the service, then show its answer; refused, the form again as
        filled in, with the one line that says what is wrong (and its field marked)."""
        def make(visitor: Visitor, form: dict[str, str]) -> Response:
            try:
                answer = ask(visitor, form)
            except LeasewiseError as exc:
                field = exc.field if isinstance(exc, InvalidRequest) else ""
                status = 429 if isinstance(exc, RateLimited) else status_for(exit_code_of(exc))
                return submit_form(visitor, status, form, str(exc), field)
            return answered(visitor, form, answer)

        return await acted(request, make)

    @router.get("/leases/new")
    def new_lease(request: Request) -> Response:
        return shown(request, lambda visitor: submit_form(visitor))

    @router.post("/leases/free")
    async def free(request: Request) -> Response:
        """The submit form again, listing when a lease of its size and placement would fit (`plan --free`)."""
        return await asked_by_the_form(
            request, lambda visitor, form: service.free_windows(visitor.caller, forms.free_query(form)),
            lambda visitor, form, answer: submit_form(visitor, 200, form, free=answer))

    @router.post("/leases")
    async def submit(request: Request) -> Response:
        def answered(visitor: Visitor, form: dict[str, str], answer: dict[str, Any]) -> Response:
            outcome, lines = views.submit_lines(answer)
            return page(visitor, "answer.html", 201 if outcome != "rejected" else 409, nav="new", outcome=outcome,
                        lines=lines, answer=answer, day=answer["start"][:10] if answer["start"] else "")

        return await asked_by_the_form(
            request, lambda visitor, form: service.submit(visitor.caller, forms.lease_submission(form)), answered)

    @router.get("/leases/{lease_id}")
    def lease(request: Request, lease_id: int) -> Response:
        def make(visitor: Visitor) -> Response:
            found, events, vms = service.lease(visitor.caller, lease_id)
            report = build_report(events, lease_id)
            shown_lease = views.lease_page(found)
            return page(visitor, "lease.html", nav="leases", lease=shown_lease,
                        may_change=visitor.caller.may_act_for(found.request.user) and not found.is_final,
                        vms=[vm.to_json() for vm in vms or ()], vms_known=vms is not None,
                        events=[(e.id, views.when(e.time), e.kind, views.event_text(e.kind, e.detail)) for e in events],
                        report=views.report_rows(report), png=plot_available(),
                        day=(shown_lease["start"] or service.now()).date().isoformat())

        return shown(request, make)

    @router.get("/leases/{lease_id}/report.png")
    def lease_report_png(request: Request, lease_id: int) -> Response:
        def make(visitor: Visitor) -> Response:
            from orchestrator.analysis.report import render_png
            from orchestrator.analysis.timeline import PlotUnavailable

            report = build_report(service.events(visitor.caller, lease_id), lease_id)
            if report.empty:
                return Response(nothing_text(lease_id), 404, media_type="text/plain")
            with tempfile.TemporaryDirectory(prefix="leasewise-report-") as tmp:
                try:
                    path = render_png(report, Path(tmp) / "report.png")
                except PlotUnavailable as exc:
                    return Response(str(exc), 501, media_type="text/plain")
                return Response(path.read_bytes(), media_type="image/png", headers={"Cache-Control": "no-store"})

        return shown(request, make)

    @router.post("/leases/{lease_id}/extend")
    async def extend(request: Request, lease_id: int) -> Response:
        def make(visitor: Visitor, form: dict[str, str]) -> Response:
            done = service.extend(visitor.caller, lease_id, forms.extension(form))
            return page(visitor, "message.html", heading=f"Lease {lease_id} extended", lines=views.extend_lines(done),
                        back=f"/leases/{lease_id}", problem=False)

        return await acted(request, make)

    @router.get("/leases/{lease_id}/cancel")
    def cancel_page(request: Request, lease_id: int) -> Response:
        def make(visitor: Visitor) -> Response:
            found, _, _ = service.lease(visitor.caller, lease_id, with_vms=False)
            return page(visitor, "cancel.html", nav="leases", lease=views.lease_row(found),
                        may_change=visitor.caller.may_act_for(found.request.user) and found.state not in FINAL_STATES)

        return shown(request, make)

    @router.post("/leases/{lease_id}/cancel")
    async def cancel(request: Request, lease_id: int) -> Response:
        def make(visitor: Visitor, form: dict[str, str]) -> Response:
            done = service.cancel(visitor.caller, lease_id)
            return page(visitor, "message.html", heading=f"Lease {lease_id} cancelled", lines=views.cancel_lines(done),
                        back=f"/leases/{lease_id}", problem=False)

        return await acted(request, make)

    # -- hosts ----------------------------------------------------------------------------------------------
    @router.get("/hosts")
    def hosts(request: Request) -> Response:
        def make(visitor: Visitor) -> Response:
            rows = service.hosts(visitor.caller, 3.0)
            now = service.now()
            found = service.calendar(visitor.caller, now, now + timedelta(seconds=1))
            shown_rows = views.host_rows(rows, found)
            return page(visitor, "hosts.html", nav="hosts", rows=shown_rows,
                        properties=any(r["properties"] for r in shown_rows))

        return shown(request, make)

    @router.post("/hosts/{name}/drain")
    async def drain(request: Request, name: str) -> Response:
        def make(visitor: Visitor, form: dict[str, str]) -> Response:
            done = service.drain(visitor.caller, name, forms.drain_deadline(form, service.now()))
            return page(visitor, "message.html", heading=f"Host {name} drained", lines=views.drain_lines(done),
                        back="/hosts", problem=False)

        return await acted(request, make)

    @router.post("/hosts/{name}/undrain")
    async def undrain(request: Request, name: str) -> Response:
        def make(visitor: Visitor, form: dict[str, str]) -> Response:
            service.undrain(visitor.caller, name)
            return page(visitor, "message.html", heading=f"Host {name} undrained",
                        lines=[f"host {name} is available again"], back="/hosts", problem=False)

        return await acted(request, make)

    return router


def _set_cookie(response: Response, session: Session, service: LeaseService) -> None:
    seconds = max(1, int((session.expires - service.now()).total_seconds()))
    response.set_cookie(COOKIE, session.id, max_age=seconds, path="/", secure=True, httponly=True, samesite="strict")


def _local(target: str | None) -> str:
    """Where to go after signing in: a path of this site only (never another site's address)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/calendar"
    parts = urlsplit(target)
    return "/calendar" if parts.scheme or parts.netloc else target


def _to_login(request: Request, why: str) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/login?next={quote(target)}&why={quote(why)}", 303)
