"""What the store-backed commands share: where the store is, and one transaction per command.

A command opens the store, takes the write lock (`BEGIN IMMEDIATE`), rebuilds the cluster, does its work,
writes back and commits; on any error nothing is written. Two commands at once are serialised by SQLite;
one that waits longer than the busy timeout is run again for up to `--wait` seconds, then exits 75
(`orchestrator.cli.busy`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import typer

from orchestrator.cli.application import fail
from orchestrator.cli.busy import DEFAULT_WAIT_S
from orchestrator.config import Config, load_config
from orchestrator.model.numbers import ascii_whole
from orchestrator.model.timeutil import UTC
from orchestrator.state.cluster import Cluster
from orchestrator.state.store import Store, default_store_path

#: where the commands that a server can answer send them (else they work on the local store)
ServerOption = typer.Option(None, "--server", metavar="URL",
                            help="A leasewise server: unix:PATH or https://HOST:PORT (default: $LEASEWISE_SERVER, "
                                 "else \\[client] server; none: the local store)")

#: options every store-backed command takes
StateOption = typer.Option(None, "--state", help="SQLite store (default: \\[daemon] store, else under $XDG_DATA_HOME/leasewise)")
ConfigOption = typer.Option(None, "--config", "-c", help="TOML configuration")
#: (the app runs a command that has it again while the store is busy: orchestrator.cli.busy)
WaitOption = typer.Option(f"{DEFAULT_WAIT_S:g}", "--wait", metavar="SECONDS",
                          help="While another process holds the store's write lock, retry for up to this "
                               "long (0: no retry), then exit 75")


def store_path(state: Path | None, config: Config) -> Path:
    if state is not None:
        return Path(state)
    if config.daemon.store:
        return Path(config.daemon.store)
    return default_store_path()


def simulated_hosts_path(state: Path | None, config: Config) -> Path:
    """Where the simulated driver keeps its hosts between commands (next to the store), so `run` and
    `lease show` / `lease ssh` see the same simulated VMs."""
    return store_path(state, config).with_suffix(".hosts.json")


def store_exists(state: Path | None, config: Config) -> bool:
    """Read-only commands do not create a store: False when there is none yet (an error if --state names
    a file that does not exist, which is a typo more often than not)."""
    path = store_path(state, config)
    if path.exists():
        return True
    if state is not None:
        raise fail(f"--state: {path} does not exist")
    return False


#: the largest id SQLite stores (a signed 64-bit INTEGER)
MAX_LEASE_ID = 2**63 - 1


def parse_lease_id(text: str, label: str = "lease") -> int:
    """A lease id as typed (ASCII digits, from 1 to `MAX_LEASE_ID`), or one error line naming `label`."""
    number = ascii_whole(text)
    if number is None or not 0 < number <= MAX_LEASE_ID or not text.strip()[:1].isdigit():
        raise fail(f"{label}: {text!r} is not a lease id (a positive whole number)")
    return number


def server_url(server: str | None, config: Config, env: Mapping[str, str] | None = None) -> str | None:
    """The server to send commands to: --server, else $LEASEWISE_SERVER, else [client] server."""
    env = os.environ if env is None else env
    url = server if server is not None else env.get("LEASEWISE_SERVER") or config.client.server
    return url or None


def refuse_server(server: str | None, config: Config, why: str) -> None:
    """For the commands no server can run (`run`, `calibrate`): one line naming the configured server and
    `why` (a `{url}` in it is the server), exit 2, before anything is touched. `--server ''` means none."""
    url = server_url(server, config)
    if url is not None:
        raise fail(why.format(url=url))


def client(server: str | None, config: Config):
    """A client of the configured server, or None (work on the local store)."""
    url = server_url(server, config)
    if url is None:
        return None
    from orchestrator.service.client import Client, token_for

    token = token_for(config.client.token_file) if not url.startswith("unix:") else None
    return Client(url, token=token, ca=config.client.ca)


def load(config_path: Path | None) -> Config:
    return load_config(config_path)


def now() -> datetime:
    """The current time to whole seconds: plans are made in whole seconds (as the reference's)."""
    return datetime.now(UTC).replace(microsecond=0)


@contextmanager
def open_cluster(state: Path | None, config: Config, write: bool = True) -> Iterator[Cluster]:
    """The cluster rebuilt from the store inside one transaction; saved and committed on success."""
    with Store.open(store_path(state, config)) as store:
        if not write:   # a read transaction: one consistent snapshot, and writers go on
            with store.snapshot():
                yield Cluster(store, config)
            return
        with store.transaction():
            cluster = Cluster(store, config)
            yield cluster
            cluster.save(now())


@contextmanager
def open_store(state: Path | None, config: Config) -> Iterator[Store]:
    with Store.open(store_path(state, config)) as store:
        yield store


def write_png(render_png, what, png: Path, console) -> None:
    """Draw `what` into `png` with `render_png`; a drawing or writing failure is one line naming --png."""
    from orchestrator.analysis.timeline import PlotUnavailable, TimelineError

    try:
        written = render_png(what, png)
    except PlotUnavailable:
        raise
    except TimelineError as exc:
        raise fail(f"--png: {exc}") from None
    console.print(f"wrote {written}", markup=False)
