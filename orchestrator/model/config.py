"""Configuration: a TOML file read once into frozen dataclasses that are passed around (no singleton).

Tables and keys follow Haizea's option names in snake_case (`[scheduling] backfilling`, `suspend_rate`, ...).
Every value is checked when the dataclass is built, so `SchedulingConfig(backfilling="sometimes")` fails
the same way a bad TOML file does, and a `Config` that exists is a valid one. Errors are `ConfigError`s
whose field is the dotted key (`scheduling.backfilling`) and whose problem lists the allowed values.

Durations accept a number of seconds, a string such as "30s", "5m", "1h30m", "01:00:00", or a TOML
local time (`shutdown_time = 00:00:30`).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import tomllib
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import Any, Mapping

from drivers.downtime import DowntimeSchedule
from orchestrator.model.errors import ConfigError, InvalidRequest
from orchestrator.model.resources import Resources, parse_capacity
from orchestrator.model.lease import MAX_DIRTY_RATE_MIB_S
from orchestrator.model.numbers import ascii_whole, plain
from orchestrator.model.timeutil import UTC, ZERO, duration_from_seconds, in_range, parse_duration, parse_time

DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)
#: the range of a rate (MB/s or MiB/s: suspend, resume, migration): from a 100 kB/s link to 1 TiB/s, so an
#: overhead (memory / rate) always fits a duration
RATES = (0.1, 1024.0 * 1024.0)
#: the most hosts a simulated site may have, so the most VMs one lease of a workload may ask for (the
#: benchmarks use 1,000): more is a typo, and making the list would exhaust memory
MAX_SITE_HOSTS = 100_000
#: the largest factor (scheduling_threshold_factor, live_migration_dirty_factor) that means anything
MAX_FACTOR = 1000.0

BACKFILLING = ("off", "aggressive", "conservative")
SUSPENSION = ("none", "serial", "all")
EXCLUSION = ("local", "global")
MIGRATION = ("no", "yes", "yes-notransfer")
ON_ENACTMENT_ERROR = ("fail-lease", "stop")
PREEMPTION_MODE = ("migrate-first", "suspend-only")


# -- value coercion (each names the dotted key it is checking) -------------------------------------------
def value_kind(value: object) -> str:
    """How a wrong value is described in an error: its TOML type, and the value itself when short."""
    if isinstance(value, str):
        return f"the string {value!r}" if len(value) <= 40 else "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, datetime):
        return "a date-time"
    if isinstance(value, date):
        return "a date"
    if isinstance(value, time):
        return "a time"
    return type(value).__name__


def _choice(key: str, value: object, allowed: tuple[str, ...]) -> str:
    listed = ", ".join(f'"{a}"' for a in allowed)
    if not isinstance(value, str):
        raise ConfigError(key, f"must be one of {listed} (got {value_kind(value)})")
    if value not in allowed:
        hint = difflib.get_close_matches(value, allowed, n=1)
        extra = f"; did you mean {hint[0]!r}?" if hint else ""
        raise ConfigError(key, f"must be one of {listed} (got {value!r}{extra})")
    return value


def _number(key: str, value: object, *, positive: bool = False, minimum: float = 0.0,
            maximum: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(key, f"must be a number {'greater than zero' if positive else '>= 0'} (got {value_kind(value)})")
    number = float(value)
    if math.isnan(number) or math.isinf(number):
        raise ConfigError(key, f"must be a finite number (got {value})")
    if positive and number <= 0:
        raise ConfigError(key, f"must be greater than zero (got {value})")
    if not positive and number < 0:
        raise ConfigError(key, f"must not be negative (got {value})")
    if number < minimum:
        raise ConfigError(key, f"is too small (got {value}; at least {plain(minimum)})")
    if number > maximum:
        raise ConfigError(key, f"is too large (got {value}; at most {plain(maximum)})")
    return number


def _rate(key: str, value: object) -> float:
    return _number(key, value, positive=True, minimum=RATES[0], maximum=RATES[1])


def _integer(key: str, value: object, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ConfigError(key, f"must be an integer >= {minimum} (got {value_kind(value)} {value!r})")
    if value < minimum:
        raise ConfigError(key, f"must be an integer >= {minimum} (got {value})")
    return value


def _duration(key: str, value: object) -> timedelta:
    """Seconds, a duration string, a TOML local time or a timedelta; never negative."""
    if isinstance(value, timedelta):
        result = value
    elif isinstance(value, bool):
        raise ConfigError(key, "must be a duration such as 30, \"30s\", \"5m\" or \"01:00:00\" (got a boolean)")
    elif isinstance(value, (int, float)):
        try:
            result = duration_from_seconds(value, key)
        except InvalidRequest as exc:
            raise ConfigError(key, exc.problem) from None
    elif isinstance(value, time) and not isinstance(value, datetime):
        if value.tzinfo is not None:
            raise ConfigError(key, "a duration cannot have a time zone")
        result = timedelta(hours=value.hour, minutes=value.minute, seconds=value.second,
                           microseconds=value.microsecond)
    elif isinstance(value, str):
        try:
            result = parse_duration(value, key)
        except InvalidRequest as exc:
            raise ConfigError(key, exc.problem) from None
    else:
        raise ConfigError(key, f"must be a duration such as 30, \"30s\", \"5m\" or \"01:00:00\" (got {value_kind(value)})")
    if result < ZERO:
        raise ConfigError(key, f"must not be negative (got {value!r})")
    return result


def _optional_duration(key: str, value: object) -> timedelta | None:
    return None if value is None else _duration(key, value)


def _name(key: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(key, f"must be a non-empty string (got {value_kind(value)})")
    return value.strip()


def _bool(key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(key, f"must be true or false (got {value_kind(value)})")
    return value


def _set(obj: object, name: str, value: object) -> None:
    object.__setattr__(obj, name, value)


# -- [scheduling] -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SchedulingConfig:
    """How the scheduler plans: backfilling depth, suspension, migration and their costs, policies."""

    backfilling: str | int = "aggressive"
    suspension: str = "all"
    suspend_rate: float = 32.0               # MB/s a memory image is written at
    resume_rate: float = 32.0                # MB/s it is read back at
    suspendresume_exclusion: str = "local"
    migration: str = "yes"
    migration_bandwidth: float = 12.5        # MB/s (100 Mbit/s)
    shutdown_time: timedelta = ZERO
    enactment_overhead: timedelta = ZERO
    scheduling_threshold_factor: float = 1.0
    force_scheduling_threshold: timedelta | None = None
    override_suspend_time: timedelta | None = None
    override_resume_time: timedelta | None = None
    non_schedulable_interval: timedelta = ZERO
    policy_admission: str = "accept-all"
    policy_preemption: str = "ar-preempts-be"
    policy_host_selection: str = "greedy"
    on_enactment_error: str = "fail-lease"
    # live migration as a planning move (preemption by evacuation, drain): the pre-copy model's parameters
    preemption_mode: str = "migrate-first"
    live_migration_bandwidth: float | None = None   # MiB/s effective; None = migration_bandwidth
    live_migration_overhead: timedelta = ZERO       # fixed setup time of one live migration
    live_migration_dirty_factor: float = 1.0        # measured dirtying / declared dirty rate
    max_downtime_ms: float = 300.0                  # the stop-and-copy may pause a guest this long
    live_migration_switchover_ms: float = 0.0       # fixed part of every pause (device state, takeover)
    live_migration_downtime_steps: int = 1          # Nova-style steps up to the downtime limit
    live_migration_downtime_delay: float = 75.0     # seconds per GiB of guest between two steps
    dirty_rate: float = 0.0                         # MiB/s a VM dirties when its lease does not say
    dirty_rate_margin: float = 1.25                 # a measured dirty rate is planned with this factor
    live_migration_margin: timedelta = timedelta(seconds=30)   # evacuations end this long before the AR

    def __post_init__(self) -> None:
        p = "scheduling."
        bf = self.backfilling
        if isinstance(bf, str) and ascii_whole(bf) is not None:
            bf = ascii_whole(bf)
        if isinstance(bf, int) and not isinstance(bf, bool):
            if bf < 0:
                raise ConfigError(p + "backfilling", f'must be "off", "aggressive", "conservative" or an integer >= 0 (got {bf})')
        elif isinstance(bf, str) and bf in BACKFILLING:
            pass
        else:
            shown = repr(bf) if isinstance(bf, str) else value_kind(bf)
            hint = difflib.get_close_matches(bf, BACKFILLING, n=1) if isinstance(bf, str) else []
            extra = f"; did you mean {hint[0]!r}?" if hint else ""
            raise ConfigError(p + "backfilling",
                              f'must be "off", "aggressive", "conservative" or an integer >= 0 (got {shown}{extra})')
        _set(self, "backfilling", bf)
        _set(self, "suspension", _choice(p + "suspension", self.suspension, SUSPENSION))
        _set(self, "suspend_rate", _rate(p + "suspend_rate", self.suspend_rate))
        _set(self, "resume_rate", _rate(p + "resume_rate", self.resume_rate))
        _set(self, "suspendresume_exclusion", _choice(p + "suspendresume_exclusion", self.suspendresume_exclusion, EXCLUSION))
        _set(self, "migration", _choice(p + "migration", self.migration, MIGRATION))
        _set(self, "migration_bandwidth", _rate(p + "migration_bandwidth", self.migration_bandwidth))
        for name in ("shutdown_time", "enactment_overhead", "non_schedulable_interval"):
            _set(self, name, _duration(p + name, getattr(self, name)))
        for name in ("force_scheduling_threshold", "override_suspend_time", "override_resume_time"):
            _set(self, name, _optional_duration(p + name, getattr(self, name)))
        _set(self, "scheduling_threshold_factor",
             _number(p + "scheduling_threshold_factor", self.scheduling_threshold_factor, maximum=MAX_FACTOR))
        for name in ("policy_admission", "policy_preemption", "policy_host_selection"):
            _set(self, name, _name(p + name, getattr(self, name)))
        _set(self, "on_enactment_error", _choice(p + "on_enactment_error", self.on_enactment_error, ON_ENACTMENT_ERROR))
        _set(self, "preemption_mode", _choice(p + "preemption_mode", self.preemption_mode, PREEMPTION_MODE))
        if self.live_migration_bandwidth is not None:
            _set(self, "live_migration_bandwidth", _rate(p + "live_migration_bandwidth", self.live_migration_bandwidth))
        for name in ("live_migration_overhead", "live_migration_margin"):
            _set(self, name, _duration(p + name, getattr(self, name)))
        _set(self, "live_migration_dirty_factor",
             _number(p + "live_migration_dirty_factor", self.live_migration_dirty_factor, maximum=MAX_FACTOR))
        _set(self, "max_downtime_ms", _number(p + "max_downtime_ms", self.max_downtime_ms, positive=True))
        _set(self, "live_migration_switchover_ms",
             _number(p + "live_migration_switchover_ms", self.live_migration_switchover_ms,
                     maximum=3_600_000.0))
        _set(self, "live_migration_downtime_steps",
             _integer(p + "live_migration_downtime_steps", self.live_migration_downtime_steps, minimum=1))
        if self.live_migration_downtime_steps > 1000:
            raise ConfigError(p + "live_migration_downtime_steps",
                              f"is too large (got {self.live_migration_downtime_steps}; at most 1000)")
        _set(self, "live_migration_downtime_delay",
             _number(p + "live_migration_downtime_delay", self.live_migration_downtime_delay,
                     maximum=86_400.0))
        _set(self, "dirty_rate", _number(p + "dirty_rate", self.dirty_rate, maximum=MAX_DIRTY_RATE_MIB_S))
        _set(self, "dirty_rate_margin", _number(p + "dirty_rate_margin", self.dirty_rate_margin, maximum=1000.0))
        if self.dirty_rate_margin < 1:
            raise ConfigError(p + "dirty_rate_margin", f"must be at least 1 (got {self.dirty_rate_margin:g})")

    @property
    def downtime_schedule(self) -> DowntimeSchedule:
        """How the allowed downtime rises during a live migration (the driver's and the model's)."""
        return DowntimeSchedule(self.live_migration_downtime_steps, self.live_migration_downtime_delay)

    @property
    def live_bandwidth(self) -> float:
        """MiB/s a live migration gets: its own setting, else the memory-image migration bandwidth."""
        return self.live_migration_bandwidth if self.live_migration_bandwidth is not None else self.migration_bandwidth

    @property
    def max_in_future(self) -> int:
        """How many future reservations backfilling may make: 0 off, 1 aggressive, -1 unlimited, else N."""
        bf = self.backfilling
        if bf == "off":
            return 0
        if bf == "aggressive":
            return 1
        if bf == "conservative":
            return -1
        return int(bf)


# -- [simulation] -----------------------------------------------------------------------------------------
_SITE = re.compile(r"^\s*([0-9]+)\s+(\S.*)$")


def parse_site(text: str, field: str = "simulation.site") -> list[tuple[str, Resources]]:
    """Parse Haizea's resources string `N CPU:100,Memory:1024` (commas or spaces between the pairs)."""
    if not isinstance(text, str):
        raise ConfigError(field, f'must be a string such as "4 CPU:100,Memory:1024" (got {value_kind(text)})')
    match = _SITE.match(text)
    if not match:
        raise ConfigError(field, f'{text!r} is not "NUMHOSTS CPU:amount,Memory:amount[,...]" (e.g. "4 CPU:100,Memory:1024")')
    count = int(match.group(1))
    if count < 1:
        raise ConfigError(field, f"needs at least one host (got {count})")
    if count > MAX_SITE_HOSTS:
        raise ConfigError(field, f"has too many hosts (got {count}; at most {MAX_SITE_HOSTS})")
    spec = ",".join(match.group(2).split())
    try:
        capacity = parse_capacity(spec, field)
        capacity.validate(field)
    except InvalidRequest as exc:
        raise ConfigError(exc.field, exc.problem) from None
    return [(f"host{i}", capacity) for i in range(1, count + 1)]


@dataclass(frozen=True)
class SimulationConfig:
    """Where a simulation starts and, optionally, the simulated site."""

    start: datetime = DEFAULT_START
    site: str | None = None
    _hosts: tuple[tuple[str, Resources], ...] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        start = self.start
        if isinstance(start, str):
            try:
                start = parse_time(start, "simulation.start")
            except InvalidRequest as exc:
                raise ConfigError("simulation.start", exc.problem) from None
        elif isinstance(start, datetime):
            if start.tzinfo is None or start.utcoffset() is None:
                raise ConfigError("simulation.start",
                                  f"{start.isoformat()} has no time zone (write e.g. 2026-01-01T00:00:00Z)")
            try:
                start = in_range(start, "simulation.start")
            except InvalidRequest as exc:
                raise ConfigError("simulation.start", exc.problem) from None
        else:
            raise ConfigError("simulation.start",
                              f"must be a date-time with a time zone such as 2026-01-01T00:00:00Z (got {value_kind(start)})")
        _set(self, "start", start)
        if self.site is not None:
            _set(self, "_hosts", tuple(parse_site(self.site)))

    @property
    def hosts(self) -> list[tuple[str, Resources]] | None:
        """The site as `[("host1", capacity), ...]`, or None when the configuration names no site."""
        return None if self._hosts is None else list(self._hosts)


# -- [workload.swf] ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SWFConfig:
    """How an SWF trace (Parallel Workloads Archive) becomes leases."""

    processors_per_node: int = 1
    memory_per_vm: int = 1024
    first: int | None = None
    window_start: float | None = None
    window_end: float | None = None
    preemptible: bool = True

    def __post_init__(self) -> None:
        p = "workload.swf."
        _set(self, "processors_per_node", _integer(p + "processors_per_node", self.processors_per_node, minimum=1))
        _set(self, "memory_per_vm", _integer(p + "memory_per_vm", self.memory_per_vm, minimum=1))
        if self.first is not None:
            _set(self, "first", _integer(p + "first", self.first, minimum=1))
        for name in ("window_start", "window_end"):
            value = getattr(self, name)
            if value is not None:
                _set(self, name, _duration(p + name, value).total_seconds())
        if self.window_start is not None and self.window_end is not None and self.window_end <= self.window_start:
            raise ConfigError(p + "window_end",
                              f"must be after window_start ({self.window_end:g} s <= {self.window_start:g} s)")
        _set(self, "preemptible", _bool(p + "preemptible", self.preemptible))


# -- [daemon] ----------------------------------------------------------------------------------------------
DRIVERS = ("simulated", "libvirt")
ON_LOST_VM = ("fail", "requeue")


@dataclass(frozen=True)
class DaemonConfig:
    """How `leasewise run` and the lease/host commands reach the store and the hosts."""

    store: str | None = None                 # SQLite file; default under the XDG data dir
    driver: str = "simulated"                # simulated | libvirt
    inventory: str | None = None             # host inventory (libvirt driver) when hosts come from a file
    poll_interval: timedelta = timedelta(seconds=2)   # how often the daemon looks at the store and the hosts
    on_lost_vm: str = "fail"                 # a VM the plan says runs but is gone: fail the lease or requeue it
    graceful_timeout: timedelta = timedelta(seconds=30)   # shutdown before destroy
    host_timeout: timedelta = timedelta(minutes=5)   # a host silent this long loses its leases (on_lost_vm)
    state_dir: str = "/var/lib/libvirt/images/leasewise-state"  # where suspended VMs' memory images go
    dirty_rate_interval: timedelta = timedelta(minutes=5)   # how often a running VM's dirty rate is measured
    dirty_rate_sample: timedelta = timedelta(seconds=5)     # how long one measurement samples the guest
    parallel_operations: int = 8             # operations on the hosts at once (one at a time on each host)

    def __post_init__(self) -> None:
        p = "daemon."
        for name in ("store", "inventory"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigError(p + name, f"must be a file path (got {value_kind(value)})")
        _set(self, "driver", _choice(p + "driver", self.driver, DRIVERS))
        _set(self, "on_lost_vm", _choice(p + "on_lost_vm", self.on_lost_vm, ON_LOST_VM))
        for name in ("poll_interval", "graceful_timeout", "host_timeout"):
            _set(self, name, _duration(p + name, getattr(self, name)))
        if self.poll_interval.total_seconds() <= 0:
            raise ConfigError(p + "poll_interval", "must be greater than zero")
        for name in ("dirty_rate_interval", "dirty_rate_sample"):
            _set(self, name, _duration(p + name, getattr(self, name)))
        sample = self.dirty_rate_sample.total_seconds()
        if sample != int(sample) or not 1 <= sample <= 60:
            raise ConfigError(p + "dirty_rate_sample", f"must be 1 to 60 whole seconds (got {sample:g} s)")
        if not isinstance(self.state_dir, str) or not self.state_dir.startswith("/"):
            raise ConfigError(p + "state_dir", f"must be an absolute path (got {self.state_dir!r})")
        _set(self, "parallel_operations", _integer(p + "parallel_operations", self.parallel_operations, minimum=1))
        if self.parallel_operations > 256:
            raise ConfigError(p + "parallel_operations", f"must be at most 256 (got {self.parallel_operations})")


def _optional_path(key: str, value: object) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not value.startswith("/"):
        raise ConfigError(key, f"must be an absolute file path (got {value_kind(value)})")
    return value


@dataclass(frozen=True)
class AuthConfig:
    """Who may do what on the server: admins are the Unix users of `admin_group` (and root), and the
    holders of admin tokens."""

    admin_group: str = "leasewise-admin"

    def __post_init__(self) -> None:
        _set(self, "admin_group", _name("auth.admin_group", self.admin_group))


@dataclass(frozen=True)
class ServeConfig:
    """Where `leasewise serve` listens: a Unix socket (callers known by their peer credentials) and, when
    `listen` is set, HTTPS on TCP (callers present API tokens)."""

    socket: str = "/run/leasewise/api.sock"
    socket_group: str = "leasewise"          # the socket's group (mode socket_mode); "" keeps the server's own
    socket_mode: int = 0o660
    listen: str = ""                         # host:port for HTTPS, e.g. "0.0.0.0:8443"; "" = Unix socket only
    tls_cert: str | None = None              # PEM certificate (chain) for `listen`
    tls_key: str | None = None               # its PEM private key

    def __post_init__(self) -> None:
        p = "serve."
        _set(self, "socket", _optional_path(p + "socket", self.socket) or "")
        if not self.socket:
            raise ConfigError(p + "socket", "must be an absolute file path")
        if not isinstance(self.socket_group, str):
            raise ConfigError(p + "socket_group", f"must be a group name (got {value_kind(self.socket_group)})")
        mode = self.socket_mode
        if isinstance(mode, str):
            try:
                mode = int(mode, 8)
            except ValueError:
                raise ConfigError(p + "socket_mode", f"must be an octal mode such as \"0660\" (got {mode!r})") from None
        if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o777:
            raise ConfigError(p + "socket_mode", f"must be a mode from 0 to 0777 (got {value_kind(mode)})")
        _set(self, "socket_mode", mode)
        if not isinstance(self.listen, str):
            raise ConfigError(p + "listen", f"must be host:port (got {value_kind(self.listen)})")
        if self.listen:
            host, _, port = self.listen.rpartition(":")
            number = ascii_whole(port)
            if not host or number is None or not 0 < number < 65536:
                raise ConfigError(p + "listen", f"must be host:port with a port from 1 to 65535 (got {self.listen!r})")
            if not self.tls_cert or not self.tls_key:
                raise ConfigError(p + "listen", "needs tls_cert and tls_key: callers on TCP present tokens, "
                                                "which must not cross the network in clear")
        for name in ("tls_cert", "tls_key"):
            _set(self, name, _optional_path(p + name, getattr(self, name)))


@dataclass(frozen=True)
class ClientConfig:
    """Where the CLI sends its commands: a server (`unix:/run/leasewise/api.sock` or `https://head:8443`),
    or none (the CLI works on its local store)."""

    server: str = ""
    ca: str | None = None                    # CA bundle that signed the server's certificate (https)
    token_file: str | None = None            # where the API token is (https); default $LEASEWISE_TOKEN

    def __post_init__(self) -> None:
        p = "client."
        if not isinstance(self.server, str) or (self.server and not self.server.startswith(("unix:", "https://", "http://"))):
            raise ConfigError(p + "server", f"must be unix:PATH or an https:// URL (got {value_kind(self.server)})")
        for name in ("ca", "token_file"):
            _set(self, name, _optional_path(p + name, getattr(self, name)))


# -- [notify] ----------------------------------------------------------------------------------------------
#: the notifiers `[notify] notifiers` may name (orchestrator.runtime.notifiers has one of each)
NOTIFIER_NAMES = ("email", "command")
#: a reminder further ahead than this is a typo (and would be due for nearly every lease)
MAX_NOTICE_OFFSET = timedelta(days=30)


def offset_label(offset: timedelta) -> str:
    """A reminder offset as its notice key writes it: 1h, 10m, 1h30m, 45s (whole seconds)."""
    seconds = int(offset.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n]
    return "".join(parts) or "0s"


def _path(key: str, value: object) -> str:
    if not isinstance(value, str) or not value.startswith("/"):
        raise ConfigError(key, f"must be an absolute path (got {value_kind(value)})")
    return value


def _timeout(key: str, value: object) -> timedelta:
    result = _duration(key, value)
    if not timedelta(0) < result <= timedelta(minutes=10):
        raise ConfigError(key, f"must be more than 0 s and at most 10 minutes (got {value!r})")
    return result


@dataclass(frozen=True)
class EmailConfig:
    """How the `email` notifier reaches its SMTP server. The password stays in its file (read at each
    send), so the configuration never holds a secret and may be shown or logged."""

    smtp_host: str = "localhost"
    smtp_port: int = 25
    sender: str = "leasewise@localhost"
    starttls: bool = False
    username: str | None = None
    password_file: str | None = None
    domain: str | None = None                # a user's address is user@domain; None: the sender's domain
    timeout: timedelta = timedelta(seconds=10)

    def __post_init__(self) -> None:
        p = "notify.email."
        _set(self, "smtp_host", _name(p + "smtp_host", self.smtp_host))
        _set(self, "smtp_port", _integer(p + "smtp_port", self.smtp_port, minimum=1))
        if self.smtp_port > 65535:
            raise ConfigError(p + "smtp_port", f"must be a TCP port, 1 to 65535 (got {self.smtp_port})")
        sender = _name(p + "sender", self.sender)
        if sender.count("@") != 1 or not all(sender.split("@")) or any(c.isspace() for c in sender):
            raise ConfigError(p + "sender", f"must be an address such as leasewise@example.org (got {sender!r})")
        _set(self, "sender", sender)
        _set(self, "starttls", _bool(p + "starttls", self.starttls))
        if self.username is not None:
            _set(self, "username", _name(p + "username", self.username))
        if self.password_file is not None:
            _set(self, "password_file", _path(p + "password_file", self.password_file))
        if (self.username is None) != (self.password_file is None):
            missing = "password_file" if self.password_file is None else "username"
            raise ConfigError(p + missing, "is needed too: SMTP authentication takes a username and a password_file")
        if self.domain is not None:
            domain = _name(p + "domain", self.domain)
            if "@" in domain or any(c.isspace() for c in domain):
                raise ConfigError(p + "domain", f"must be a mail domain such as example.org (got {domain!r})")
            _set(self, "domain", domain)
        _set(self, "timeout", _timeout(p + "timeout", self.timeout))

    def address_of(self, user: str) -> str | None:
        """The mail address of a lease's owner (None for a lease that names no user)."""
        user = user.strip()
        if not user:
            return None
        return f"{user}@{self.domain or self.sender.split('@')[1]}"


@dataclass(frozen=True)
class CommandConfig:
    """The program the `command` notifier runs, with a notice and its lease as JSON on stdin."""

    argv: tuple[str, ...] = ("/usr/local/bin/notify-lease",)
    timeout: timedelta = timedelta(seconds=30)

    def __post_init__(self) -> None:
        p = "notify.command."
        argv = self.argv
        if isinstance(argv, str) or not isinstance(argv, (list, tuple)) or not argv:
            raise ConfigError(p + "argv", f"must be a non-empty array of strings (got {value_kind(argv)})")
        if not all(isinstance(a, str) and a for a in argv):
            raise ConfigError(p + "argv", "must hold non-empty strings only")
        _path(p + "argv", argv[0])   # a service's PATH is not the user's shell's: name the program fully
        _set(self, "argv", tuple(argv))
        _set(self, "timeout", _timeout(p + "timeout", self.timeout))


@dataclass(frozen=True)
class NotifyConfig:
    """End-of-lease notices: when they are due and which notifiers send them (none by default)."""

    before_end: tuple[timedelta, ...] = (timedelta(hours=1), timedelta(minutes=10))
    at_end: bool = True
    notifiers: tuple[str, ...] = ()
    email: EmailConfig = field(default_factory=EmailConfig)
    command: CommandConfig = field(default_factory=CommandConfig)

    def __post_init__(self) -> None:
        p = "notify."
        offsets = self.before_end
        if isinstance(offsets, str) or not isinstance(offsets, (list, tuple)):
            raise ConfigError(p + "before_end", f'must be an array of durations such as ["1h", "10m"] '
                                                f"(got {value_kind(offsets)})")
        parsed: dict[str, timedelta] = {}
        for value in offsets:
            offset = _duration(p + "before_end", value)
            if offset.total_seconds() < 1 or offset.total_seconds() != int(offset.total_seconds()):
                raise ConfigError(p + "before_end", f"must be whole seconds, at least 1 s (got {value!r})")
            if offset > MAX_NOTICE_OFFSET:
                raise ConfigError(p + "before_end", f"is too far ahead (got {value!r}; at most 30 days)")
            label = offset_label(offset)
            if label in parsed:
                raise ConfigError(p + "before_end", f"gives {label} twice")
            parsed[label] = offset
        _set(self, "before_end", tuple(sorted(parsed.values(), reverse=True)))
        _set(self, "at_end", _bool(p + "at_end", self.at_end))
        names = self.notifiers
        if isinstance(names, str) or not isinstance(names, (list, tuple)):
            raise ConfigError(p + "notifiers", f'must be an array of names such as ["email"] (got {value_kind(names)})')
        for name in names:
            _choice(p + "notifiers", name, NOTIFIER_NAMES)
        if len(set(names)) != len(names):
            raise ConfigError(p + "notifiers", "names a notifier twice")
        _set(self, "notifiers", tuple(names))
        if not isinstance(self.email, EmailConfig):
            raise ConfigError(p + "email", f"must be a table, written [notify.email] (got {value_kind(self.email)})")
        if not isinstance(self.command, CommandConfig):
            raise ConfigError(p + "command",
                              f"must be a table, written [notify.command] (got {value_kind(self.command)})")

    @property
    def enabled(self) -> bool:
        return bool(self.notifiers)


# -- the whole configuration ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Config:
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

    built: dict[str, object] = {}
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
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(str(path), f"cannot read the configuration file ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}", "not valid UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = _TOML_LINE.search(message)
        line = match.group(1) if match else "?"
        reason = _TOML_LINE.sub("", message).strip() or "syntax error"
        raise ConfigError(f"{path}:{line}", f"not valid TOML ({reason})") from None
    return data
