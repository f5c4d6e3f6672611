"""The `leasewise` command line (typer + rich).

The app and its error handling are in `orchestrator.cli.app`; each command group lives in its own module
and registers itself on that app when imported, which is all this package does: import them, so that
`main` (the console script) and `app` (for typer's test runner) have every command.
"""

from orchestrator.cli import (  # noqa: F401  (each module adds its commands to `app`)
    access,
    calibrate,
    hosts,
    images,
    leases,
    migrate,
    plan,
    quotas,
    report,
    run,
    serve,
    simulate,
    sweep,
    tokens,
)
from orchestrator.cli.app import app, main

__all__ = ["app", "main"]
