"""The web face of `leasewise serve`: the cluster's calendar, leases and hosts in a browser, on the same
listeners as the API (HTTPS, and the Unix socket for a user who forwards it with `ssh -L`).

Server-rendered HTML (Jinja2 templates, `templates/`) with a little JavaScript of our own (`static/`: the
calendar drawn on a canvas, a confirmation); nothing is loaded from another origin. Every page and action
goes through the same `LeaseService` use cases, with the same identities and rights, as the API: the pages
only show what a use case answers, and the server refuses what a caller may not do whatever a page shows.
`access.py` says who is signed in and how (sessions, bearer tokens, the socket's peer credentials) and
checks that a form comes from its own page (CSRF); `routes.py` has the pages and actions.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "static"


def mount_web(app: FastAPI, service, admin_group: str, check_token) -> None:
    """The pages on `app` (at /, beside /v1/), and their scripts and styles at /static/."""
    from orchestrator.service.web.routes import web_router

    app.include_router(web_router(service, admin_group, check_token))
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
