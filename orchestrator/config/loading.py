"""The whole configuration (`Config`), and reading it: a TOML file read once into the frozen tables, with
one `ConfigError` naming the dotted key (or the file and line) of anything wrong. Also the site a run
simulates (`resolve_site`: the configuration's, else the workload's)."""

from __future__ import annotations

import dataclasses
import difflib
import re
import tomllib

from drivers.files import UserFileError, read_user_file
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from orchestrator.config.daemon import DaemonConfig
from orchestrator.config.notices import CommandConfig, EmailConfig, NotifyConfig
from orchestrator.config.scheduling import SchedulingConfig
from orchestrator.config.service import AuthConfig, ClientConfig, ServeConfig
from orchestrator.config.simulation import SimulationConfig, SWFConfig
from orchestrator.config.values import value_kind
from orchestrator.model.errors import ConfigError
from orchestrator.model.resources import Resources
from orchestrator.model.workload import Workload


@dataclass(frozen=True)
class Config:
    """The whole configuration: one frozen table per TOML table, each checked when it was built."""

    scheduling: SchedulingConfig = field(default_factory=SchedulingConfig)
    simulation: SimulationConfig = field(default_factory=SimulationConfig)
    swf: SWFConfig = field(default_factory=SWFConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)
    client: ClientConfig = field(default_factory=ClientConfig)
    notify: NotifyConfig = field(default_factory=NotifyConfig)


# table path -> dataclass built from it
_TABLES: dict[str, type] = {
    "scheduling": SchedulingConfig,
    "simulation": SimulationConfig,
    "workload.swf": SWFConfig,
    "daemon": DaemonConfig,
    "auth": AuthConfig,
    "serve": ServeConfig,
    "client": ClientConfig,
    "notify": NotifyConfig,
}
# tables that only group other tables
_GROUPS = {"workload": ("swf",)}
# tables with keys of their own and tables inside them: name -> member -> dataclass (the member's field)
_SUBTABLES: dict[str, dict[str, type]] = {"notify": {"email": EmailConfig, "command": CommandConfig}}


#: the largest configuration (or sweep) file read: a few KiB in practice
MAX_CONFIG_BYTES = 1 << 20

def _keys(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.init]


def _suggest(word: str, options: list[str]) -> str:
    hint = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f" (did you mean {hint[0]}?)" if hint else ""


def _table(path: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(path, f"must be a table, written [{path}] (got {value_kind(value)})")
    return value


def _home_of(key: str) -> str | None:
    for table, cls in _TABLES.items():
        if key in _keys(cls):
            return table
    return None


def config_from_dict(data: Mapping[str, Any], source: str | None = None) -> Config:
    """Build a Config from a parsed TOML document; `source` (a file name) prefixes error messages."""
    try:
        return _build(data)
    except ConfigError as exc:
        if source is None or exc.where:
            raise
        raise ConfigError(exc.field, exc.problem, where=source) from None


def _build(data: Mapping[str, Any]) -> Config:
    if not isinstance(data, Mapping):
        raise ConfigError("config", f"must be a table of tables (got {value_kind(data)})")
    top_level = list(_TABLES) + list(_GROUPS)
    top_level = [t for t in top_level if "." not in t]
    for key, value in data.items():
        if key in top_level:
            continue
        home = _home_of(key)
        if home is not None and not isinstance(value, dict):
            raise ConfigError(key, f"unknown key at the top level (it belongs in [{home}])")
        kind = "table" if isinstance(value, dict) else "key"
        raise ConfigError(key, f"unknown {kind}{_suggest(key, top_level)}")

    tables: dict[str, Mapping[str, Any]] = {}
    for group, members in _GROUPS.items():
        if group not in data:
            continue
        body = _table(group, data[group])
        for key, value in body.items():
            if key in members:
                tables[f"{group}.{key}"] = _table(f"{group}.{key}", value)
                continue
            if not isinstance(value, dict):
                home = next((f"{group}.{m}" for m in members if key in _keys(_TABLES[f"{group}.{m}"])), None)
                where = f" (it belongs in [{home}])" if home else ""
                raise ConfigError(f"{group}.{key}", f"unknown key{where}")
            hint = difflib.get_close_matches(key, list(members), n=1, cutoff=0.6)
            extra = f" (did you mean {group}.{hint[0]}?)" if hint else ""
            raise ConfigError(f"{group}.{key}", f"unknown table{extra}")
    for name in _TABLES:
        if "." not in name and name in data:
            tables[name] = _table(name, data[name])

    built: dict[str, Any] = {}   # (each table's own config class)
    for name, cls in _TABLES.items():
        body = dict(tables.get(name, {}))
        for member, member_cls in _SUBTABLES.get(name, {}).items():
            if member in body:
                body[member] = _make(f"{name}.{member}", member_cls, _table(f"{name}.{member}", body[member]))
        built[name] = _make(name, cls, body)
    return Config(scheduling=built["scheduling"], simulation=built["simulation"], swf=built["workload.swf"],
                  daemon=built["daemon"], notify=built["notify"], auth=built["auth"], serve=built["serve"],
                  client=built["client"])


def _make(name: str, cls: type, body: Mapping[str, Any]) -> Any:
    """The dataclass of table `name` built from its keys, after refusing keys it does not have."""
    allowed = _keys(cls)
    for key in body:
        if key not in allowed:
            hint = _suggest(key, allowed)
            if not hint and "-" in key and key.replace("-", "_") in allowed:
                hint = f" (did you mean {key.replace('-', '_')}?)"
            raise ConfigError(f"{name}.{key}", f"unknown key{hint}")
    return cls(**body)


_TOML_LINE = re.compile(r"\(at line (\d+), column (\d+)\)")


def load_config(path: str | Path | None) -> Config:
    """Read a TOML configuration file; None gives every default."""
    if path is None:
        return Config()
    return config_from_dict(read_toml(path), source=str(path))


def read_toml(path: str | Path) -> dict[str, Any]:
    """A TOML file parsed, or one `ConfigError` naming the file (and the line of a syntax error)."""
    path = Path(path)
    try:
        raw = read_user_file(path, MAX_CONFIG_BYTES)
    except UserFileError as exc:
        raise ConfigError(str(path), f"cannot read the configuration file ({exc.problem})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad_line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{bad_line}", "not valid UTF-8") from None
    try:
        data = tomllib.loads(text)
    except RecursionError:   # (arrays nested thousands deep: no configuration is)
        raise ConfigError(str(path), "not valid TOML (nested too deeply)") from None
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = _TOML_LINE.search(message)
        line = match.group(1) if match else "?"
        reason = _TOML_LINE.sub("", message).strip() or "syntax error"
        raise ConfigError(f"{path}:{line}", f"not valid TOML ({reason})") from None
    return data


def resolve_site(workload: Workload, config: Config | None) -> list[tuple[str, Resources]]:
    """The hosts to simulate: the configuration's site if it names one, else the workload's."""
    if config is not None and config.simulation.site is not None:
        return config.simulation.hosts  # type: ignore[return-value]
    if workload.site is not None:
        return list(workload.site)
    raise ConfigError("simulation.site",
                      f"no site to simulate: the configuration names none and {workload.source or 'the workload'} describes none "
                      '(set e.g. site = "4 CPU:100,Memory:1024" in [simulation])')
