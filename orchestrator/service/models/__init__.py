"""The API's requests (`requests`), its answers (`responses`) and a lease as it sends one (`leases`), as
named, typed fields (pydantic, as FastAPI takes them), so `/openapi.json` says exactly what the service
accepts and answers; the CLI's client, its own store's backend and the tests use the same models."""

from orchestrator.service.models.leases import *   # noqa: F401,F403
from orchestrator.service.models.requests import *   # noqa: F401,F403
from orchestrator.service.models.responses import *   # noqa: F401,F403
