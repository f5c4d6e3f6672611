"""`leasewise serve`: the shared service (orchestrator/service/server.py); `leasewise whoami`.

Exit codes: 0 stopped cleanly (SIGTERM, Ctrl-C); 1 `--check` found a problem, or the daemon failed; 2 bad
configuration.
"""

# No `from __future__ import annotations`: typer reads the option types at runtime.

import logging
from pathlib import Path

import typer
from rich.markup import escape

from orchestrator.cli import common
from orchestrator.cli.application import EXIT_FAILED, app, fail
from orchestrator.cli.logs import configure_logging
from orchestrator.cli.output import emit_json, make_console

@app.command()
def serve(
    state: Path | None = common.StateOption,
    config: Path | None = common.ConfigOption,
    log_level: str = typer.Option("info", "--log-level", metavar="LEVEL", help="debug, info, warning or error"),
    check: bool = typer.Option(False, "--check", help="Check the configuration, the store and every host, then exit"),
) -> None:
    """Run the shared service: the API on [serve] socket (and HTTPS on [serve] listen), enacting the plan."""
    restore = configure_logging(log_level)
    try:
        _serve(state, config, check)
    finally:
        restore()


def _serve(state: Path | None, config: Path | None, check: bool) -> None:
    cfg = common.load(config)
    path = common.store_path(state, cfg)
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
    import grp
    import os

    from orchestrator.runtime.host_admin import run_checks, run_pair_checks
    from orchestrator.state.store import Store

    console = make_console()
    problems = []
    with Store.open(path) as store:
        records = store.hosts()
        images = store.images()
    console.print(f"store {path}: {len(records)} host(s), schema version ok", soft_wrap=True)
    sock_dir = Path(cfg.serve.socket).parent
    if not sock_dir.is_dir() or not os.access(sock_dir, os.W_OK):
        problems.append(f"serve.socket: {sock_dir} is not a directory this user can write")
    if cfg.serve.socket_group:
        try:
            grp.getgrnam(cfg.serve.socket_group)
        except KeyError:
            problems.append(f"serve.socket_group: no group named {cfg.serve.socket_group!r}")
    for name in ("tls_cert", "tls_key"):
        value = getattr(cfg.serve, name)
        if value and not os.access(value, os.R_OK):
            problems.append(f"serve.{name}: {value} cannot be read")
    for record in records:
        rows = run_checks(record, cfg.daemon.driver, 10.0, images)
        failed = [r for r in rows if r["status"] == "FAIL"]
        status = "FAIL" if failed else "ok"
        link = next((r for r in rows if r["check"] == "transport" and r not in failed), None)
        console.print(f"host {escape(record.name)} ({escape(record.config.uri)}): {status}"
                      + (f"; transport: {escape(link['detail'])}" if link else "")
                      + "".join(f"; {escape(r['check'])}: {escape(r['detail'])}" for r in failed), soft_wrap=True)
        problems += [f"host {record.name}: {r['check']}" for r in failed]
    pair_rows = run_pair_checks(records, cfg.daemon.driver, 10.0)
    for row in pair_rows:
        if row["status"] == "FAIL":
            pair = f"{row['source']} -> {row['destination']}"
            console.print(f"hosts {escape(pair)}: FAIL; {escape(row['check'])}: {escape(row['detail'])}", soft_wrap=True)
            problems.append(f"hosts {pair}: {row['check']}")
    if pair_rows:
        pairs = len({(r["source"], r["destination"]) for r in pair_rows})
        console.print(f"host pairs: {pairs} checked both ways (peer link, migration port, cpu)", soft_wrap=True)
    for line in problems:
        console.print(f"[bold red]problem:[/] {escape(line)}", soft_wrap=True)
    if problems:
        raise typer.Exit(EXIT_FAILED)
    console.print("ready to serve", soft_wrap=True)


@app.command()
def whoami(
    json_out: bool = typer.Option(False, "--json", help="Print JSON"),
    config: Path | None = common.ConfigOption,
    server: str | None = common.ServerOption,
) -> None:
    """Who the server takes you for (your Unix user on its socket, a token's holder on HTTPS), and whether you are an admin."""
    cfg = common.load(config)
    remote = common.client(server, cfg)
    if remote is None:
        raise fail("--server: no server configured (give --server, $LEASEWISE_SERVER or [client] server)")
    with remote:
        me = remote.whoami()
    if json_out:
        emit_json(me)
        return
    make_console().print(f"{escape(me['user'])}{' (admin)' if me['admin'] else ''} via {me['via']}", soft_wrap=True)
