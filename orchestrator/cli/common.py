"""What the store-backed commands share: their four options, defined once, and what those options select.

`@store_options()` adds `--state`, `--config`, `--wait` and `--server` to a command (after its own, so
`leasewise lease list --state X` reads as it always did) and hands the command one `StoreOptions`: the
configuration it names, and the backend to call, the configured server's client or the local store
(`orchestrator.service.backend`). A command is then parse, one call on the backend, render.

A command that works on the local store is run again while another process holds the store's write lock,
for up to `--wait` seconds, then exits 75 (`orchestrator.cli.busy`).
"""

from __future__ import annotations

import functools
import inspect
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from drivers.clock import RealClock
from orchestrator.cli.application import EXIT_BUSY, fail
from orchestrator.cli.busy import DEFAULT_WAIT_S, call_waiting, parse_wait
from orchestrator.config import Config, load_config
from orchestrator.model.errors import StoreBusy
from orchestrator.model.numbers import ascii_whole
from orchestrator.model.timeutil import UTC

if TYPE_CHECKING:
    from orchestrator.service.backend import Backend

#: where the commands that a server can answer send them (else they work on the local store)
ServerOption = typer.Option(None, "--server", metavar="URL",
                            help="A leasewise server: unix:PATH or https://HOST:PORT (default: $LEASEWISE_SERVER, "
                                 "else [client] server; none: the local store)")
StateOption = typer.Option(None, "--state", metavar="FILE",
                           help="SQLite store (default: [daemon] store, else under $XDG_DATA_HOME/leasewise)")
ConfigOption = typer.Option(None, "--config", "-c", metavar="FILE", help="TOML configuration")
WaitOption = typer.Option(f"{DEFAULT_WAIT_S:g}", "--wait", metavar="SECONDS",
                          help="While another process holds the store's write lock, retry for up to this "
                               "long (0: no retry), then exit 75; through a server, retry a refused or reset "
                               "connection (a restart) as long, then exit 1")

#: each shared option: its parameter's type and its typer option
_SHARED: dict[str, tuple[Any, Any]] = {"state": (Path | None, StateOption), "config": (Path | None, ConfigOption),
                                       "wait": (str, WaitOption), "server": (str | None, ServerOption)}
#: the parameter of a command that receives its `StoreOptions`
OPTIONS_PARAMETER = "opts"


class _CommandClock(RealClock):
    """The wall clock as the commands read it (`now`, which tests fix)."""

    def now(self) -> datetime:
        return now()


@dataclass(frozen=True)
class StoreOptions:
    """The shared options as given: `--state`, `--config`, `--wait`, `--server` (None: not given)."""

    state: Path | None = None
    config_file: Path | None = None
    wait: str = f"{DEFAULT_WAIT_S:g}"
    server: str | None = None

    @functools.cached_property
    def config(self) -> Config:
        """The configuration `--config` names (read once, when first needed)."""
        return load(self.config_file)

    @property
    def store_path(self) -> Path:
        return store_path(self.state, self.config)

    @property
    def server_url(self) -> str | None:
        return server_url(self.server, self.config)

    def backend(self) -> Backend:
        """The configured server's client, else the local store: used as `with opts.backend() as b`."""
        remote = client(self.server, self.config, wait=parse_wait(self.wait))
        if remote is not None:
            return remote
        from orchestrator.service.local import LocalBackend  # noqa: PLC0415

        return LocalBackend(self.store_path, self.config, _CommandClock(),
                            named_by="--state" if self.state is not None else None)


def store_options(*names: str, rerun_when_busy: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Adds the shared options `names` (default: all four) to a command whose parameter `opts` takes them
    as one `StoreOptions`. With `--wait` and `rerun_when_busy`, the command is run again while the store is
    busy, for up to `--wait` seconds (a command that must not run twice, such as a measurement campaign,
    says False and waits on its own)."""
    names = names or tuple(_SHARED)

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(func)
        own = [p for p in signature.parameters.values() if p.name != OPTIONS_PARAMETER]
        shared = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=_SHARED[name][1],
                                    annotation=_SHARED[name][0]) for name in names]

        @functools.wraps(func)
        def command(*args: Any, **kwargs: Any) -> Any:
            given = {name: kwargs.pop(name) for name in names}
            opts = StoreOptions(state=given.get("state"), config_file=given.get("config"),
                                wait=given.get("wait", StoreOptions.wait), server=given.get("server"))
            wait = parse_wait(opts.wait) if "wait" in names else 0.0
            began = time.monotonic()
            try:
                return call_waiting(functools.partial(func, *args, **{OPTIONS_PARAMETER: opts}, **kwargs),
                                    wait if rerun_when_busy else 0.0)
            except StoreBusy as exc:
                raise fail(f"{exc.path}: busy: another process held the store's write lock for "
                           f"{time.monotonic() - began:.0f} s (--wait {wait:g}); nothing was done, try again",
                           EXIT_BUSY) from None

        command.__signature__ = signature.replace(parameters=own + shared)   # type: ignore[attr-defined]
        command.__annotations__ = {**{k: v for k, v in func.__annotations__.items() if k != OPTIONS_PARAMETER},
                                   **{name: _SHARED[name][0] for name in names}}
        return command

    return decorate


def store_path(state: Path | None, config: Config) -> Path:
    """The store a command works on: `--state`, else `[daemon] store`, else the user's default."""
    from orchestrator.service.local import store_path as path_of  # noqa: PLC0415

    return path_of(state, config)


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


def client(server: str | None, config: Config, wait: float = 0.0):
    """A client of the configured server, or None (work on the local store); `wait`: for how long a
    refused connection (a server restarting) is tried again."""
    url = server_url(server, config)
    if url is None:
        return None
    from orchestrator.service.client import Client, token_for  # noqa: PLC0415

    token = token_for(config.client.token_file) if not url.startswith("unix:") else None
    return Client(url, token=token, ca=config.client.ca, wait=wait)


def load(config_path: Path | None) -> Config:
    return load_config(config_path)


def now() -> datetime:
    """The current time to whole seconds: plans are made in whole seconds (as the reference's)."""
    return datetime.now(UTC).replace(microsecond=0)


def write_png(render_png, what, png: Path, console) -> None:
    """Draw `what` into `png` with `render_png`; a drawing or writing failure is one line naming --png."""
    from orchestrator.analysis.timeline import PlotUnavailable, TimelineError  # noqa: PLC0415

    try:
        written = render_png(what, png)
    except PlotUnavailable:
        raise
    except TimelineError as exc:
        raise fail(f"--png: {exc}") from None
    console.print(f"wrote {written}", markup=False)
