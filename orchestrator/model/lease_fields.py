"""A lease request from raw field values, the one validation every client's request goes through: a lease
file's keys, `lease submit`'s flags and the web form's fields give the same `LeaseRequest` and the same
errors. Each error names the key (`nodes`, `start`, ...) or the flag (`--nodes`, `--start`, ...) it is about,
as one `InvalidRequest` line. Nothing here touches the store.

What differs between clients is where a lease's guest material comes from (`GuestSources`): the CLI reads
public keys and cloud-config from files on the user's machine (`orchestrator.cli.leasefile`); a form on the
server takes them as text (`InlineGuest`), and never reads a file of the server.

`type` (advance-reservation | best-effort | immediate, or AR | BE | IM) is optional: it is inferred from
`start` and, when given, must agree with it. Unknown keys are refused by name.
"""

from __future__ import annotations

import difflib
import math
import posixpath
import re
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol

from drivers.cloudinit import parse_user_data, read_ssh_public_key
from orchestrator.model.errors import InvalidRequest, shown
from orchestrator.model.guest import GuestSetup
from orchestrator.model.lease import MAX_DIRTY_RATE_MIB_S, LeaseRequest, LeaseType, VMImage
from orchestrator.model.placement import Placement, placement_of
from orchestrator.model.numbers import MAX_WHOLE, parse_decimal, parse_whole
from orchestrator.model.quota import check_user
from orchestrator.model.resources import Resources
from orchestrator.model.text import check_printable
from orchestrator.model.timeutil import duration_from_seconds, in_range, iso, parse_duration, parse_time

#: every key a lease file may have, in the order they are documented
KEYS = ("type", "nodes", "cpus", "memory", "duration", "start", "not_before", "not_after", "preemptible", "image",
        "kernel", "initrd", "cmdline", "user", "name", "dirty_rate", "disk_size", "ssh_key", "user_data", "hostname_prefix", "network",
        "keep_disks", "where", "spread", "pack", "exclusive")
#: the keys that make up a lease's guest setup (they need an image with a disk)
GUEST_KEYS = ("disk_size", "ssh_key", "user_data", "hostname_prefix", "network", "keep_disks")
MAX_USER_DATA_BYTES = 64 * 1024   # what fits a NoCloud seed comfortably; cloud-init's own limit is larger
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]i?B?|[KMGT])?", re.IGNORECASE | re.ASCII)
_SIZE_MIB = {"": 1, "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}
MAX_DISK_MIB = 64 * 1024 * 1024   # a VM's disk: 64 TiB
MAX_INLINE_KEYS = 64
#: the longest path, and the longest of the other texts (a name is shown in every `lease list`)
MAX_PATH = 4096
MAX_NAME = 255
#: the most vCPUs a VM may have (its CPU is kept in percent of a core, as a whole number)
MAX_CPUS = MAX_WHOLE // 100
MAX_WHOLE_OF = {"cpus": MAX_CPUS}
MAX_KEY_BYTES = 16 * 1024
MAX_TEXT = {"name": MAX_NAME, "user": 64, "hostname_prefix": 42, "cmdline": MAX_PATH, "image": MAX_PATH}

_TYPES = {
    "advance-reservation": LeaseType.ADVANCE_RESERVATION, "ar": LeaseType.ADVANCE_RESERVATION,
    "best-effort": LeaseType.BEST_EFFORT, "be": LeaseType.BEST_EFFORT,
    "immediate": LeaseType.IMMEDIATE, "im": LeaseType.IMMEDIATE,
}


def flag_label(key: str) -> str:
    """The `lease submit` flag that sets `key` (`dirty_rate` -> `--dirty-rate`)."""
    return "--" + key.replace("_", "-")


class Fields:
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

    def parsed(self, parse: Callable[..., Any], key: str, **bounds: Any) -> Any:
        """`parse(value, label, **bounds)` (one of the model's parsers), its error naming this file."""
        try:
            return parse(self.get(key), self.label(key), **bounds)
        except InvalidRequest as exc:
            raise InvalidRequest(exc.field, exc.problem, where=self.where) from None

    def whole(self, key: str, default: int | None = None) -> int:
        if self.get(key) is None:
            if default is None:
                raise self.error(key, "is required")
            return default
        return self.parsed(parse_whole, key, maximum=MAX_WHOLE_OF.get(key, MAX_WHOLE))

    def lease_type(self, key: str = "type") -> LeaseType | None:
        declared = self.get(key)
        if declared is None:
            return None
        if not isinstance(declared, str) or declared.strip().lower() not in _TYPES:
            raise self.error(key, f"must be advance-reservation, best-effort or immediate (got {shown(declared)})")
        return _TYPES[declared.strip().lower()]

    def number(self, key: str, maximum: float) -> float | None:
        return None if self.get(key) is None else self.parsed(parse_decimal, key, maximum=maximum)

    def duration(self, key: str) -> timedelta:
        value = self.get(key)
        if value is None:
            raise self.error(key, "is required")
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise self.error(key, f"must be a duration such as 90s, 15m, 2h or 01:30:00 (got {shown(value)})")
        # a YAML number is seconds (YAML reads 1:30:00 as 5400)
        result = self.parsed(parse_duration if isinstance(value, str) else duration_from_seconds, key)
        if result <= timedelta(0):
            raise self.error(key, f"must be greater than zero (got {shown(value)})")
        return result

    def boolean(self, key: str) -> bool | None:
        value = self.get(key)
        if value is None or isinstance(value, bool):
            return value
        raise self.error(key, f"must be true or false (got {shown(value)})")

    def text(self, key: str) -> str | None:
        """A one-line text of at most `MAX_TEXT[key]` printable characters (`orchestrator.model.text`)."""
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, f"must be a non-empty string (got {shown(value)})")
        return self.parsed(check_printable, key, max_length=MAX_TEXT.get(key, MAX_PATH))

    def user(self, key: str) -> str | None:
        """A user name, as the quotas and tokens take them."""
        value = self.text(key)
        return None if value is None else self.parsed(check_user, key)

    def path(self, key: str) -> str | None:
        value = self.text(key)
        if value is not None and not posixpath.isabs(value):
            raise self.error(key, f"must be an absolute path on the hosts (got {shown(value)})")
        return value

    def start(self, key: str, now: datetime) -> datetime | str | None:
        """None (no start), the string "now" or "earliest", or an aware UTC time."""
        value = self.get(key)
        if value is None:
            return None
        if isinstance(value, str) and value.strip().lower() in ("now", "earliest"):
            return value.strip().lower()
        return self.time(key)

    def time(self, key: str) -> datetime | None:
        """An aware UTC time (ISO 8601 with its offset), or None when not given."""
        value = self.get(key)
        if value is None:
            return None
        if isinstance(value, datetime):   # (a request built by a program)
            return self.parsed(in_range, key)
        if not isinstance(value, str):
            words = "an ISO 8601 time, 'now' or 'earliest'" if key == "start" else "an ISO 8601 time"
            raise self.error(key, f"must be {words} (got {shown(value)})")
        return self.parsed(parse_time, key)


#: a catalogued image's name -> what a lease naming it boots (`InvalidRequest` for an unknown name)
ImageResolver = Callable[[str], VMImage]
#: (number of VMs, size of each) -> None, or `InvalidRequest` when the site could never hold them
SiteCheck = Callable[[int, Resources], None]
#: an exclusive lease's placement -> the VM size that takes a whole host it may get (the smallest such host)
WholeHost = Callable[[Placement], Resources]


class GuestSources(Protocol):
    """Where a request's public keys and cloud-config come from (the `ssh_key` and `user_data` values)."""

    def ssh_keys(self, f: Fields) -> tuple[str, ...]:
        """The public key lines to inject (checked), from `f`'s `ssh_key` value (None: the default)."""
        ...

    def user_data(self, f: Fields) -> str:
        """The #cloud-config document (checked), from `f`'s `user_data` value (given)."""
        ...


class InlineGuest:
    """Keys and cloud-config given as text, as a form on the server takes them: `ssh_key` is one or more
    public key lines (a text of lines, or a list of them), `user_data` the document itself. No key is
    added by default: the server reads no file of its own for a request."""

    def ssh_keys(self, f: Fields) -> tuple[str, ...]:
        given = f.get("ssh_key")
        if given is None:
            return ()
        texts = [given] if isinstance(given, str) else given
        if not isinstance(texts, (list, tuple)) or not all(isinstance(t, str) for t in texts):
            raise f.error("ssh_key", f"must be public key lines (got {shown(given)})")
        lines = [line.strip() for text in texts for line in text.splitlines() if line.strip()]
        if len(lines) > MAX_INLINE_KEYS:
            raise f.error("ssh_key", f"at most {MAX_INLINE_KEYS} keys (got {len(lines)})")
        out = []
        for number, line in enumerate(lines, 1):
            try:
                out.append(read_ssh_public_key(line, f"line {number}"))
            except ValueError as exc:
                raise f.error("ssh_key", str(exc)) from None
        return tuple(out)

    def user_data(self, f: Fields) -> str:
        text = f.get("user_data")
        if not isinstance(text, str) or not text.strip():
            raise f.error("user_data", f"must be a #cloud-config document (got {shown(text)})")
        if len(text.encode("utf-8")) > MAX_USER_DATA_BYTES:
            raise f.error("user_data", f"is larger than {MAX_USER_DATA_BYTES // 1024} KiB")
        try:
            return parse_user_data(text.replace("\r\n", "\n"), "user-data")
        except ValueError as exc:
            raise f.error("user_data", str(exc)) from None


def request_from_fields(values: Mapping[str, Any], now: datetime, *, default_user: str,
                        guest: GuestSources | None = None, label: Callable[[str], str] = str,
                        where: str | None = None, images: ImageResolver | None = None,
                        site: SiteCheck | None = None, whole_host: WholeHost | None = None) -> LeaseRequest:
    """Build and validate a request from raw values keyed by `KEYS` (None = not given).

    `label` turns a key into the name used in errors (the key itself for files, the flag for the CLI);
    `where` (a file name) prefixes them. The start decides the type: none = best-effort, "now" =
    immediate, a time = advance reservation (which must not be in the past). `site` checks the size
    against the hosts before the request's list of nodes is made (a million VMs is refused at once).
    `default_user` owns the lease when `user` is not given; `guest` reads the keys and cloud-config
    (default: given as text, `InlineGuest`). An exclusive lease without `cpus` or `memory` takes the host's
    (`whole_host`: the size of the smallest host its placement allows)."""
    f = Fields(values, label, where)
    check_keys(values, label, where)

    nodes = f.whole("nodes", default=1)
    host = None
    if whole_host is not None and f.get("exclusive") is True and not (f.present("cpus") and f.present("memory")):
        placement = _placement(f)
        host = None if placement is None else whole_host(placement)
    cpus = f.whole("cpus") if host is None or f.present("cpus") else max(1, int(host.vcpus))
    memory = f.whole("memory") if host is None or f.present("memory") else int(host.memory)
    duration = f.duration("duration")
    start = f.start("start", now)
    earliest = start == "earliest"
    not_before, not_after = _window(f, earliest, now)

    declared = f.lease_type()
    if declared is None:
        kind = (LeaseType.BEST_EFFORT if start is None
                else LeaseType.IMMEDIATE if start == "now" else LeaseType.ADVANCE_RESERVATION)
    else:
        kind = declared
        if kind is LeaseType.ADVANCE_RESERVATION and (start is None or start == "now"):
            raise f.error("start", "an advance reservation needs a start time (ISO 8601, e.g. 2026-05-04T14:00:00Z)")
        if kind is LeaseType.BEST_EFFORT and start is not None:
            raise f.error("start", "a best-effort lease has no start time (omit it, or make it an advance reservation)")
        if kind is LeaseType.IMMEDIATE and start not in (None, "now"):
            raise f.error("start", "an immediate lease starts now (omit start or give 'now')")
    start_time = start if isinstance(start, datetime) else not_before
    if start_time is not None and start_time < now:
        raise f.error("start", f"{iso(start_time)} is in the past (now {iso(now.replace(microsecond=0))})")

    image_text = f.text("image")
    image_path = image_text if image_text is None or posixpath.isabs(image_text) else None
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
    if image_text is not None and image_path is None:   # a name: the catalogue's image
        if kernel or initrd or cmdline:
            raise f.error("image", f"a catalogued image brings its own boot; drop {label('kernel')}/"
                                   f"{label('initrd')}/{label('cmdline')}")
        if images is None:
            raise f.error("image", f"must be an absolute path here (got {shown(image_text)})")
        try:
            image = images(image_text)
        except InvalidRequest as exc:
            raise f.error("image", exc.problem) from None
    elif image_path is not None:
        image = VMImage(disk=image_path)
    elif kernel is not None:
        image = VMImage(kernel=kernel, initrd=initrd, cmdline=cmdline)
    guest_setup = _guest_setup(f, image, guest or InlineGuest())

    preemptible = f.boolean("preemptible")
    user = f.user("user")
    if user is None:
        user = default_user
    name = f.text("name") or ""
    dirty_rate = f.number("dirty_rate", MAX_DIRTY_RATE_MIB_S)

    placement = _placement(f)

    node = Resources.of(cpus, memory)
    try:
        if site is not None:
            site(nodes, node)
        return LeaseRequest(
            type=kind,
            nodes=(node,) * nodes,
            duration=duration,
            submit_time=now,
            start=start_time,
            preemptible=True if preemptible is None else preemptible,
            image=image,
            user=user,
            name=name,
            dirty_rate_mib_s=dirty_rate,
            guest=guest_setup,
            earliest=earliest,
            not_after=not_after,
            placement=placement,
        )
    except InvalidRequest as exc:   # the site's and the request's own checks (a lease ending after 9998)
        raise f.error(exc.field, exc.problem) if exc.field in KEYS else InvalidRequest(
            exc.field, exc.problem, where=where) from None


def _window(f: Fields, earliest: bool, now: datetime) -> tuple[datetime | None, datetime | None]:
    """With `start: earliest`, the earliest start (`not_before`, default now; one in the past is now) and the
    latest end (`not_after`, None: no limit); they mean nothing with any other start."""
    if not earliest:
        for key in ("not_before", "not_after"):
            if f.present(key):
                raise f.error(key, "is for a lease that starts at the earliest time it fits (start 'earliest')")
        return None, None
    not_before = f.time("not_before")
    not_after = f.time("not_after")
    first = now if not_before is None or not_before < now else not_before
    if not_after is not None and not_after <= first:
        raise f.error("not_after", f"{iso(not_after)} is not after the earliest start ({iso(first)})")
    return first, not_after


def check_keys(values: Mapping[str, Any], label: Callable[[str], str] = str, where: str | None = None) -> None:
    """Unknown keys refused by name (the first, with a guess at what was meant)."""
    unknown = sorted(str(k) for k in values if k not in KEYS)
    if unknown:
        hint = difflib.get_close_matches(unknown[0], KEYS, n=1, cutoff=0.6)
        others = f" (also unknown: {', '.join(unknown[1:])})" if len(unknown) > 1 else ""
        raise InvalidRequest(label(unknown[0]) if unknown[0] in KEYS else unknown[0],
                             "unknown key" + (f" (did you mean {hint[0]}?)" if hint else "") + others
                             + f"; known keys: {', '.join(KEYS)}", where=where)


def _guest_setup(f: Fields, image: VMImage | None, sources: GuestSources) -> GuestSetup | None:
    """The guest side of the request: what each VM's own disk, cloud-init seed and NIC get. A lease whose
    image has a disk always has one (its VMs get a NIC and the submitter's keys by default)."""
    given = [k for k in GUEST_KEYS if f.present(k)]
    if image is None or image.disk is None:
        if given:
            raise f.error(given[0], f"needs an image with a disk ({f.label('image')})")
        return None
    disk_size = _size_mib(f, "disk_size")
    if disk_size is not None and image.size_mib and disk_size < image.size_mib:
        raise f.error("disk_size", f"{disk_size} MiB is smaller than the image ({image.size_mib:.0f} MiB)")
    keys = sources.ssh_keys(f)
    user_data = sources.user_data(f) if f.present("user_data") else None
    prefix = f.text("hostname_prefix")
    network = f.boolean("network")
    keep = f.boolean("keep_disks")
    try:
        return GuestSetup(ssh_keys=keys, user_data=user_data, hostname_prefix=prefix,
                          network=True if network is None else network, disk_size_mib=disk_size,
                          keep_disks=bool(keep))
    except InvalidRequest as exc:
        raise f.error(exc.field, exc.problem) from None


def _placement(f: Fields) -> Placement | None:
    """`where` (a list of constraints, or one), `spread`, `pack`, `exclusive`: None when none is asked for."""
    where = f.get("where")
    if where is not None and not isinstance(where, (str, list, tuple)):
        raise f.error("where", f"must be a list of constraints such as gpu=a100 (got {shown(where)})")
    try:
        return placement_of(where, f.boolean("spread"), f.boolean("pack"), f.boolean("exclusive"), f.label)
    except InvalidRequest as exc:
        raise InvalidRequest(exc.field, exc.problem, where=f.where) from None


def _size_mib(f: Fields, key: str) -> int | None:
    """A size as 20G, 512M, 2048 (MiB), 1.5GiB... in whole MiB."""
    value = f.get(key)
    if value is None:
        return None
    text = str(value).strip() if isinstance(value, (int, str)) and not isinstance(value, bool) else None
    match = _SIZE.fullmatch(text) if text else None
    if match is None:
        raise f.error(key, f"must be a size such as 20G, 512M or 2048 (MiB) (got {shown(value)})")
    unit = (match.group(2) or "")[:1].lower()
    number = float(match.group(1)) * _SIZE_MIB[unit]
    if not math.isfinite(number) or number > MAX_DISK_MIB:
        raise f.error(key, f"is larger than 64 TiB (got {shown(value)})")
    if number <= 0:
        raise f.error(key, f"must be greater than zero (got {shown(value)})")
    if not number.is_integer():   # (a disk is made in whole MiB: 0.5M or 1.0001G is a typo, not a size)
        raise f.error(key, f"must be a whole number of MiB (got {shown(value)}, {number:g} MiB)")
    return int(number)


def _inline_keys(f: Fields, key: str) -> object:
    return InlineGuest().ssh_keys(f)


def _inline_user_data(f: Fields, key: str) -> object:
    return InlineGuest().user_data(f)


def _hostname_prefix(f: Fields, key: str) -> object:
    value = f.text(key)
    try:
        GuestSetup(hostname_prefix=value)
    except InvalidRequest as exc:
        raise f.error(key, exc.problem) from None
    return value


#: each key's check of its value alone, as `request_from_fields` reads it (given as text, as a form or the
#: API gives keys and cloud-config)
_FIELD_CHECKS: dict[str, Callable[[Fields, str], object]] = {
    "type": Fields.lease_type, "nodes": Fields.whole, "cpus": Fields.whole, "memory": Fields.whole,
    "duration": Fields.duration, "start": lambda f, k: f.start(k, datetime.now().astimezone()),
    "not_before": Fields.time, "not_after": Fields.time,
    "preemptible": Fields.boolean, "network": Fields.boolean, "keep_disks": Fields.boolean,
    "image": Fields.text, "kernel": Fields.path, "initrd": Fields.path, "cmdline": Fields.text, "user": Fields.user,
    "name": Fields.text, "dirty_rate": lambda f, k: f.number(k, MAX_DIRTY_RATE_MIB_S),
    "disk_size": lambda f, k: _size_mib(f, k), "ssh_key": _inline_keys, "user_data": _inline_user_data,
    "hostname_prefix": _hostname_prefix, "spread": Fields.boolean, "pack": Fields.boolean,
    "exclusive": Fields.boolean, "where": lambda f, k: _placement(f),
}


def check_field(key: str, value: Any, label: Callable[[str], str] = str) -> None:
    """`value` checked as the value of `key` alone (the cross-key rules are `request_from_fields`'s): an
    `InvalidRequest` naming `label(key)` with the same words a lease file or `lease submit` gets."""
    _FIELD_CHECKS[key](Fields({key: value}, label, None), key)
