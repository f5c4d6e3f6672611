"""`leasewise serve`: the shared service (orchestrator/service/server.py); `leasewise whoami`.

Exit codes: 0 stopped cleanly (SIGTERM, Ctrl-C); 1 `--check` found a problem, or the daemon failed; 2 bad
configuration.
"""

# No `from __future__ import annotations`: typer reads the option types at runtime.

import logging
from pathlib import Path

import typer
from rich.markup import escape

from orchestrator.cli.application import EXIT_FAILED, app, fail
from orchestrator.cli.common import StoreOptions, store_options
from orchestrator.cli.logs import configure_logging
from orchestrator.cli.output import emit_json, make_console


@app.command()
@store_options("state", "config")
def serve(
    opts: StoreOptions,
    log_level: str = typer.Option("info", "--log-level", metavar="LEVEL", help="debug, info, warning or error"),
    check: bool = typer.Option(False, "--check", help="Check the configuration, the store and every host, then exit"),
) -> None:
    """Run the shared service: the API on [serve] socket (and HTTPS on [serve] listen), enacting the plan."""
    restore = configure_logging(log_level)
    try:
        _serve(opts, check)
    finally:
        restore()


def _serve(opts: StoreOptions, check: bool) -> None:
    cfg = opts.config
    path = opts.store_path
    if not path.exists():
        raise fail(f"--state: no store at {path} (add hosts with `leasewise host add` first)")
    if check:
        _check(path, cfg)
        return
    from orchestrator.service.server import Server
    from orchestrator.service.identity import token_checker

    server = Server(cfg, path, say=lambda line: logging.getLogger("leasewise.serve").info("%s", line),
                    token_check=lambda store: token_checker(store, cfg.auth.admin_group), freeze_gc=True)
    code = server.serve()
    if code:
        raise typer.Exit(code)


def _check(path: Path, cfg) -> None:
    """The configuration was read; now the store, the socket's directory and group, and every host."""
    from orchestrator.service.preflight import preflight

    console = make_console()
    found = preflight(cfg, path)
    console.print(f"store {path}: {found.hosts} host(s), schema version ok", soft_wrap=True)
    for name, uri, failed, transport in found.checked:
        console.print(f"host {escape(name)} ({escape(uri)}): {'FAIL' if failed else 'ok'}"
                      + (f"; transport: {escape(transport)}" if transport and not failed else "")
                      + "".join(f"; {escape(r['check'])}: {escape(r['detail'])}" for r in failed), soft_wrap=True)
    for row in found.failed_pairs:
        console.print(f"hosts {escape(row['source'])} -> {escape(row['destination'])}: FAIL; {escape(row['check'])}: "
                      f"{escape(row['detail'])}", soft_wrap=True)
    if found.pairs:
        console.print(f"host pairs: {found.pairs} checked both ways (peer link, migration port, cpu)", soft_wrap=True)
    if found.seeded:
        console.print(f"link rates: {len(found.seeded)} pair(s) measured, kept as their first plans' rates "
                      f"(leasewise calibrate show)", soft_wrap=True)
    for line in found.problems:
        console.print(f"[bold red]problem:[/] {escape(line)}", soft_wrap=True)
    if found.problems:
        raise typer.Exit(EXIT_FAILED)
    console.print("ready to serve", soft_wrap=True)


@app.command()
@store_options("config", "server")
def whoami(
    opts: StoreOptions,
    json_out: bool = typer.Option(False, "--json", help="Print JSON"),
) -> None:
    """Who the server takes you for (your Unix user on its socket, a token's holder on HTTPS), and whether you are an admin."""
    if opts.server_url is None:
        raise fail("--server: no server configured (give --server, $LEASEWISE_SERVER or [client] server)")
    with opts.backend() as backend:
        me = backend.whoami()
    if json_out:
        emit_json(me)
        return
    make_console().print(f"{escape(me['user'])}{' (admin)' if me['admin'] else ''} via {me['via']}", soft_wrap=True)
