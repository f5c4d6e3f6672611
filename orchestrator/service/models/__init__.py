"""The API's requests (`requests`), its answers (`responses`) and a lease as it sends one (`leases`), as
named, typed fields (pydantic, as FastAPI takes them), so `/openapi.json` says exactly what the service
accepts and answers; the CLI's client, its own store's backend and the tests use the same models."""

from orchestrator.service.models.leases import LeasePage, LeaseRecord
from orchestrator.service.models.requests import (
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
    HostSettings,
    ImageAddition,
    ImageSync,
    LeaseSubmission,
    Migration,
    QuotaChange,
    Shortening,
    TokenRequest,
    error_line,
    error_parts,
    model_of,
    submission_of,
)

__all__ = ["IDEMPOTENCY_KEY", "MAX_LEASE_ID", "MAX_PATH", "MAX_WINDOWS", "PRINTABLE", "TIME", "USER_NAME", "Drain",
           "EndChange", "Extension", "FreeQuery", "HostAddition", "HostImport", "HostPropertyChange",
           "HostSettings", "ImageAddition", "ImageSync",
           "LeasePage", "LeaseRecord", "LeaseSubmission", "Migration", "QuotaChange", "Shortening", "TokenRequest",
           "error_line", "error_parts", "model_of", "submission_of"]
