"""Lease requests from a YAML lease file or from `leasewise lease submit` flags.

Both go through `request_from_fields`, so a file and the equivalent flags give the same `LeaseRequest` and
the same errors: each names the key (`nodes`, `start`, ...) or the flag (`--nodes`, `--start`, ...) it is
about, as one `InvalidRequest` line. Nothing here touches the store.

A lease file is one YAML mapping, read with `yaml.safe_load` (no tags, no objects), e.g.::

    nodes: 2
    cpus: 2
    memory: 4096          # MiB per node
    duration: 2h          # 90, 90s, 15m, 2h, 1h30m, 01:30:00
    start: 2026-05-04T14:00:00Z   # omit: best-effort; "now": immediate; a time: advance reservation
    preemptible: false
    image: /var/lib/libvirt/images/debian.qcow2    # or kernel / initrd / cmdline
    user: alice
    name: experiment-7
    dirty_rate: 20        # MiB/s, for live-migration predictions

`type` (advance-reservation | best-effort | immediate, or AR | BE | IM) is optional: it is inferred from
`start` and, when given, must agree with it. Unknown keys are refused by name.
"""

from __future__ import annotations

import difflib
import getpass
import math
import posixpath
from collections.abc import Callable, Mapping
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from orchestrator.model.errors import InvalidRequest
from orchestrator.model.lease import LeaseRequest, LeaseType, VMImage
from orchestrator.model.resources import Resources
from orchestrator.model.timeutil import as_utc, iso, parse_duration, parse_time

#: every key a lease file may have, in the order they are documented
KEYS = ("type", "nodes", "cpus", "memory", "duration", "start", "preemptible", "image", "kernel", "initrd",
        "cmdline", "user", "name", "dirty_rate")
MAX_FILE_BYTES = 1 << 20

_TYPES = {
    "advance-reservation": LeaseType.ADVANCE_RESERVATION, "ar": LeaseType.ADVANCE_RESERVATION,
    "best-effort": LeaseType.BEST_EFFORT, "be": LeaseType.BEST_EFFORT,
    "immediate": LeaseType.IMMEDIATE, "im": LeaseType.IMMEDIATE,
}


def flag_label(key: str) -> str:
    """The `lease submit` flag that sets `key` (`dirty_rate` -> `--dirty-rate`)."""
    return "--" + key.replace("_", "-")


def _shown(value: Any) -> str:
    """A bad value as quoted in an error: short scalars as themselves, containers by their kind only
    (a YAML alias bomb must not be printed)."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        text = repr(value)
    elif isinstance(value, str):
        text = repr(value)
    elif isinstance(value, (datetime, date)):
        text = value.isoformat()
    elif isinstance(value, Mapping):
        return "a mapping"
    elif isinstance(value, (list, tuple, set)):
        return "a list"
    else:
        return f"a {type(value).__name__}"
    return text if len(text) <= 60 else text[:57] + "..."


class _Fields:
    """Reads one value at a time out of the raw mapping, raising InvalidRequest with the right label."""

    def __init__(self, values: Mapping[str, Any], label: Callable[[str], str], where: str | None):
        self.values = values
        self.label = label
        self.where = where

    def error(self, key: str, problem: str) -> InvalidRequest:
        return InvalidRequest(self.label(key), problem, where=self.where)

    def get(self, key: str) -> Any:
        return self.values.get(key)

    def present(self, key: str) -> bool:
        return self.values.get(key) is not None

    def whole(self, key: str, default: int | None = None) -> int:
        value = self.get(key)
        if value is None:
            if default is None:
                raise self.error(key, "is required")
            return default
        number: int | None = None
        if isinstance(value, bool):
            number = None
        elif isinstance(value, int):
            number = value
        elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
            number = int(value)
        elif isinstance(value, str) and value.strip().lstrip("+-").isdigit():
            number = int(value.strip())
        if number is None:
            raise self.error(key, f"must be a whole number (got {_shown(value)})")
        if number <= 0:
            raise self.error(key, f"must be greater than zero (got {number})")
        if number > 2**31:
            raise self.error(key, f"is too large (got {number})")
        return number

    def number(self, key: str) -> float | None:
        value = self.get(key)
        if value is None:
            return None
        number: float | None = None
        if isinstance(value, bool):
            number = None
        elif isinstance(value, (int, float)):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                number = None
        if number is None or not math.isfinite(number):
            raise self.error(key, f"must be a number (got {_shown(value)})")
        if number < 0:
            raise self.error(key, f"must not be negative (got {number:g})")
        return number

    def duration(self, key: str) -> timedelta:
        value = self.get(key)
        if value is None:
            raise self.error(key, "is required")
        try:
            if isinstance(value, bool):
                raise self.error(key, f"must be a duration such as 90s, 15m, 2h or 01:30:00 (got {_shown(value)})")
            if isinstance(value, (int, float)):   # a YAML number: seconds (YAML reads 1:30:00 as 5400)
                if not math.isfinite(value):
                    raise self.error(key, f"must be a finite duration (got {_shown(value)})")
                result = timedelta(seconds=value)
            elif isinstance(value, str):
                try:
                    result = parse_duration(value, self.label(key))
                except InvalidRequest as exc:
                    raise InvalidRequest(exc.field, exc.problem, where=self.where) from None
            else:
                raise self.error(key, f"must be a duration such as 90s, 15m, 2h or 01:30:00 (got {_shown(value)})")
        except OverflowError:
            raise self.error(key, f"is too long (got {_shown(value)})") from None
        if result <= timedelta(0):
            raise self.error(key, f"must be greater than zero (got {_shown(value)})")
        return result

    def boolean(self, key: str) -> bool | None:
        value = self.get(key)
        if value is None or isinstance(value, bool):
            return value
        raise self.error(key, f"must be true or false (got {_shown(value)})")

    def text(self, key: str) -> str | None:
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, f"must be a non-empty string (got {_shown(value)})")
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
            raise self.error(key, "must not contain control characters (newlines, tabs, ...)")
        if len(value) > 4096:
            raise self.error(key, "is too long (more than 4096 characters)")
        return value

    def path(self, key: str) -> str | None:
        value = self.text(key)
        if value is not None and not posixpath.isabs(value):
            raise self.error(key, f"must be an absolute path on the hosts (got {_shown(value)})")
        return value

    def start(self, key: str, now: datetime) -> datetime | str | None:
        """None (no start), the string "now", or an aware UTC time."""
        value = self.get(key)
        if value is None:
            return None
        if isinstance(value, str) and value.strip().lower() == "now":
            return "now"
        if isinstance(value, datetime):   # YAML reads an unquoted ISO time itself
            try:
                return as_utc(value, self.label(key))
            except InvalidRequest as exc:
                raise InvalidRequest(exc.field, exc.problem, where=self.where) from None
        if isinstance(value, date):
            raise self.error(key, f"{value.isoformat()} has no time of day (give e.g. {value.isoformat()}T14:00:00Z)")
        if not isinstance(value, str):
            raise self.error(key, f"must be an ISO 8601 time or 'now' (got {_shown(value)})")
        try:
            return parse_time(value, self.label(key))
        except InvalidRequest as exc:
            raise InvalidRequest(exc.field, exc.problem, where=self.where) from None


def request_from_fields(values: Mapping[str, Any], now: datetime, *, label: Callable[[str], str] = str,
                        where: str | None = None, default_user: str | None = None) -> LeaseRequest:
    """Build and validate a request from raw values keyed by `KEYS` (None = not given).

    `label` turns a key into the name used in errors (the key itself for files, the flag for the CLI);
    `where` (a file name) prefixes them. The start decides the type: none = best-effort, "now" =
    immediate, a time = advance reservation (which must not be in the past)."""
    f = _Fields(values, label, where)
    unknown = sorted(k for k in values if k not in KEYS)
    if unknown:
        hint = difflib.get_close_matches(unknown[0], KEYS, n=1, cutoff=0.6)
        others = f" (also unknown: {', '.join(map(str, unknown[1:]))})" if len(unknown) > 1 else ""
        raise f.error(unknown[0], "unknown key" + (f" (did you mean {hint[0]}?)" if hint else "") + others
                      + f"; known keys: {', '.join(KEYS)}")

    nodes = f.whole("nodes", default=1)
    cpus = f.whole("cpus")
    memory = f.whole("memory")
    duration = f.duration("duration")
    start = f.start("start", now)

    declared = values.get("type")
    if declared is None:
        kind = (LeaseType.BEST_EFFORT if start is None
                else LeaseType.IMMEDIATE if start == "now" else LeaseType.ADVANCE_RESERVATION)
    else:
        if not isinstance(declared, str) or declared.strip().lower() not in _TYPES:
            raise f.error("type", f"must be advance-reservation, best-effort or immediate (got {_shown(declared)})")
        kind = _TYPES[declared.strip().lower()]
        if kind is LeaseType.ADVANCE_RESERVATION and (start is None or start == "now"):
            raise f.error("start", "an advance reservation needs a start time (ISO 8601, e.g. 2026-05-04T14:00:00Z)")
        if kind is LeaseType.BEST_EFFORT and start is not None:
            raise f.error("start", "a best-effort lease has no start time (omit it, or make it an advance reservation)")
        if kind is LeaseType.IMMEDIATE and start not in (None, "now"):
            raise f.error("start", "an immediate lease starts now (omit start or give 'now')")
    start_time = start if isinstance(start, datetime) else None
    if start_time is not None and start_time < now:
        raise f.error("start", f"{iso(start_time)} is in the past (now {iso(now.replace(microsecond=0))})")

    image_path = f.path("image")
    kernel = f.path("kernel")
    initrd = f.path("initrd")
    cmdline = f.text("cmdline")
    if image_path is not None and (kernel or initrd or cmdline):
        other = "kernel" if kernel else "initrd" if initrd else "cmdline"
        raise f.error("image", f"give either {label('image')} or {label('kernel')}/{label('initrd')}/"
                               f"{label('cmdline')}, not both ({label(other)} is set too)")
    if kernel is None and (initrd or cmdline):
        raise f.error("kernel", f"is required with {label('initrd') if initrd else label('cmdline')}")
    image = None
    if image_path is not None:
        image = VMImage(disk=image_path)
    elif kernel is not None:
        image = VMImage(kernel=kernel, initrd=initrd, cmdline=cmdline)

    preemptible = f.boolean("preemptible")
    user = f.text("user")
    if user is None:
        user = default_user if default_user is not None else _current_user()
    name = f.text("name") or ""
    dirty_rate = f.number("dirty_rate")

    try:
        return LeaseRequest(
            type=kind,
            nodes=(Resources.of(cpus, memory),) * nodes,
            duration=duration,
            submit_time=now,
            start=start_time,
            preemptible=True if preemptible is None else preemptible,
            image=image,
            user=user,
            name=name,
            dirty_rate_mib_s=dirty_rate,
        )
    except InvalidRequest as exc:   # everything above should have caught it; keep the one-line form anyway
        raise InvalidRequest(exc.field, exc.problem, where=where) from None


def _current_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):   # no passwd entry and no $USER (some containers)
        return ""


def load_lease_file(path: str | Path, now: datetime, default_user: str | None = None) -> LeaseRequest:
    """Read a YAML lease file (safe_load only) into a validated request; errors name the file and key."""
    where = str(path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise InvalidRequest("file", "not found", where=where) from None
    except IsADirectoryError:
        raise InvalidRequest("file", "is a directory", where=where) from None
    except OSError as exc:
        raise InvalidRequest("file", f"cannot be read ({exc.strerror or exc})", where=where) from None
    if len(raw) > MAX_FILE_BYTES:
        raise InvalidRequest("file", f"is larger than {MAX_FILE_BYTES // 1024} KiB: not a lease file", where=where)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InvalidRequest(f"line {line}", "not valid UTF-8", where=where) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        field = f"line {mark.line + 1}" if mark is not None else "yaml"
        raise InvalidRequest(field, f"not valid YAML ({problem})", where=where) from None
    if data is None:
        raise InvalidRequest("file", "is empty (a lease file is a YAML mapping: nodes, cpus, memory, duration, ...)",
                             where=where)
    if not isinstance(data, Mapping):
        raise InvalidRequest("file", f"must be a YAML mapping of keys ({', '.join(KEYS)}), not {_shown(data)}",
                             where=where)
    bad_keys = [k for k in data if not isinstance(k, str)]
    if bad_keys:
        raise InvalidRequest(_shown(bad_keys[0]), "unknown key (keys are names such as nodes, cpus, memory)",
                             where=where)
    return request_from_fields(data, now, where=where, default_user=default_user)
