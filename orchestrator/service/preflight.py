"""What `leasewise serve --check` looks at before a server is started: the store, the socket's directory
and group, the TLS files, every host's pre-flight checks (`runtime.host_admin.run_checks`) and every pair of
hosts, both ways (`run_pair_checks`: a live migration's path from one to the other). The rates the pairs'
probe migrations measured are kept as their first learned ones, as `host check` keeps them: the server's
first plans time live migrations at the links measured, not at the configured rate."""

from __future__ import annotations

import grp
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.config import Config
from orchestrator.model.timeutil import UTC
from orchestrator.runtime.host_admin import run_checks, run_pair_checks, seed_links
from orchestrator.state.store import Store

#: how long each host contact may take
HOST_TIMEOUT_S = 10.0


@dataclass
class Preflight:
    """The store's hosts, each host's failed checks (name, uri, rows, the transport row's detail), the pairs
    checked and those that failed, the pairs' link rates kept as learned ones, and every problem in one line
    each."""

    hosts: int = 0
    checked: list[tuple[str, str, list[dict[str, Any]], str]] = field(default_factory=list)
    pairs: int = 0
    failed_pairs: list[dict[str, Any]] = field(default_factory=list)
    seeded: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def preflight(config: Config, path: Path) -> Preflight:
    """The configuration was read; now the store, the socket's directory and group, and every host."""
    found = Preflight()
    with Store.open(path) as store:
        records = store.hosts()
        images = store.images()
    found.hosts = len(records)
    sock_dir = Path(config.serve.socket).parent
    if not sock_dir.is_dir() or not os.access(sock_dir, os.W_OK):
        found.problems.append(f"serve.socket: {sock_dir} is not a directory this user can write")
    if config.serve.socket_group:
        try:
            grp.getgrnam(config.serve.socket_group)
        except KeyError:
            found.problems.append(f"serve.socket_group: no group named {config.serve.socket_group!r}")
    for name in ("tls_cert", "tls_key"):
        value = getattr(config.serve, name)
        if value and not os.access(value, os.R_OK):
            found.problems.append(f"serve.{name}: {value} cannot be read")
    for record in records:
        rows = run_checks(record, config.daemon.driver, HOST_TIMEOUT_S, images)
        failed = [r for r in rows if r["status"] == "FAIL"]
        transport = next((r["detail"] for r in rows if r["check"] == "transport"), "")
        found.checked.append((record.name, record.config.uri, failed, transport))
        found.problems += [f"host {record.name}: {r['check']}" for r in failed]
    pair_rows = run_pair_checks(records, config.daemon.driver, HOST_TIMEOUT_S)
    found.pairs = len({(r["source"], r["destination"]) for r in pair_rows})
    found.failed_pairs = [r for r in pair_rows if r["status"] == "FAIL"]
    found.problems += [f"hosts {r['source']} -> {r['destination']}: {r['check']}" for r in found.failed_pairs]
    if any(row.get("link_mib_s") for row in pair_rows):
        with Store.open(path) as store:
            found.seeded = seed_links(store, pair_rows, datetime.now(UTC))
    return found
