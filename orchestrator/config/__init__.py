"""Configuration: a TOML file read once into frozen dataclasses that are passed around (no singleton).

Tables and keys follow Haizea's option names in snake_case (`[scheduling] backfilling`, `suspend_rate`, ...).
Every value is checked when the dataclass is built, so `SchedulingConfig(backfilling="sometimes")` fails
the same way a bad TOML file does, and a `Config` that exists is a valid one. Errors are `ConfigError`s
whose field is the dotted key (`scheduling.backfilling`) and whose problem lists the allowed values.

A layer of its own, above the model and below planning: the model never reads the configuration, and
every layer above takes what it needs from it. Its modules, one table (or a few close ones) each:
`values` (the readers every table shares: durations, rates, names, paths), `scheduling`, `simulation`
([simulation], [workload.swf]), `daemon`, `service` ([serve], [auth], [client]), `notices` ([notify] and
its notifiers), and `loading` (`Config`, `config_from_dict`, `load_config`, `read_toml`, `resolve_site`).
"""

from __future__ import annotations

from orchestrator.config.daemon import DRIVERS, ON_LOST_VM, DaemonConfig
from orchestrator.config.loading import Config, config_from_dict, load_config, read_toml, resolve_site
from orchestrator.config.notices import (
    MAX_NOTICE_OFFSET,
    NOTIFIER_NAMES,
    CommandConfig,
    EmailConfig,
    NotifyConfig,
    offset_label,
)
from orchestrator.config.scheduling import (
    BACKFILLING,
    EXCLUSION,
    MAX_FACTOR,
    MIGRATION,
    ON_ENACTMENT_ERROR,
    PREEMPTION_MODE,
    SUSPENSION,
    SchedulingConfig,
)
from orchestrator.config.service import AuthConfig, ClientConfig, ServeConfig
from orchestrator.config.simulation import DEFAULT_START, MAX_SITE_HOSTS, SimulationConfig, SWFConfig, parse_site
from orchestrator.config.values import RATES, value_kind

__all__ = [
    "BACKFILLING", "DEFAULT_START", "DRIVERS", "EXCLUSION", "MAX_FACTOR", "MAX_NOTICE_OFFSET", "MAX_SITE_HOSTS",
    "MIGRATION", "NOTIFIER_NAMES", "ON_ENACTMENT_ERROR", "ON_LOST_VM", "PREEMPTION_MODE", "RATES", "SUSPENSION",
    "AuthConfig", "ClientConfig", "CommandConfig", "Config", "DaemonConfig", "EmailConfig", "NotifyConfig",
    "SWFConfig", "SchedulingConfig", "ServeConfig", "SimulationConfig", "config_from_dict", "load_config",
    "offset_label", "parse_site", "read_toml", "resolve_site", "value_kind",
]
