"""Quotas: how much a user, or a Unix group's users together, may hold, and the checks a request must pass.

A quota limits a *subject*: a user (`alice`) or a Unix group (`@lab`). As in OpenNebula, a user quota limits
what that user holds; a group quota limits the sum of what every user of the group holds (members: users
whose primary or supplementary group it is); both apply, and the first exceeded limit is the one reported.

What a user *holds* is the sum over its live (not final) leases, queued ones included: a queued lease is a
promise of capacity, and counting it only once it runs would let a user queue around the quota. vCPUs are
counted as the drivers boot them (`ceil(cpu / 100)` per VM, at least 1), memory in whole MiB per VM.

Everything here is pure: the caller passes the quotas, the holdings and the group resolver, so the same
checks serve the local commands and the server.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from datetime import datetime, timedelta

from orchestrator.model.errors import InvalidRequest, LeasewiseError, shown
from orchestrator.model.lease import Lease, LeaseRequest
from orchestrator.model.numbers import MAX_WHOLE
from orchestrator.model.resources import Resources
from orchestrator.model.text import unprintable_at
from orchestrator.model.timeutil import ZERO, as_utc, iso
from orchestrator.model.tolerance import EPSILON

#: a user or group name as a subject: no spaces, no control characters, not an option (`-x`)
_NAME = re.compile(r"[^\s@\-\x00-\x1f\x7f][^\s@\x00-\x1f\x7f]{0,255}")


class QuotaExceeded(LeasewiseError):
    """A well-formed request that would take its owner (or one of its groups) over a quota; the message is
    one line with the figure (`alice would hold 40 vCPUs > 32`); exit code 3, as the scheduler's refusals."""

    exit_code = 3

    def __init__(self, subject: str, limit: str, message: str):
        super().__init__(message)
        self.subject = subject
        self.limit = limit


@dataclass(frozen=True)
class Quota:
    """Limits of one subject; None is unlimited. A limit of 0 forbids that resource outright."""

    vcpus: int | None = None
    memory_mib: int | None = None
    vms: int | None = None
    max_duration: timedelta | None = None
    max_ahead: timedelta | None = None

    def __post_init__(self) -> None:
        for name in ("vcpus", "memory_mib", "vms"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not 0 <= value <= MAX_WHOLE):
                raise InvalidRequest(name, f"must be a whole number from 0 to {MAX_WHOLE} or none (got {value!r})")
        for name in ("max_duration", "max_ahead"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, timedelta) or value < ZERO):
                raise InvalidRequest(name, f"must be a duration >= 0 or none (got {value!r})")

    @property
    def unlimited(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self))


@dataclass(frozen=True)
class Holding:
    """What a subject holds (or a request would add): whole vCPUs, MiB of memory, VMs."""

    vcpus: int = 0
    memory_mib: int = 0
    vms: int = 0

    def __add__(self, other: "Holding") -> "Holding":
        return Holding(self.vcpus + other.vcpus, self.memory_mib + other.memory_mib, self.vms + other.vms)


NOTHING = Holding()


# -- subjects ----------------------------------------------------------------------------------------------------
def is_group(subject: str) -> bool:
    return subject.startswith("@")


def check_subject(subject: str, field: str = "subject") -> str:
    """`alice` or `@lab`, else `InvalidRequest` naming `field`."""
    if (not isinstance(subject, str) or not _NAME.fullmatch(subject[1:] if subject.startswith("@") else subject)
            or unprintable_at(subject) is not None):
        raise InvalidRequest(field, f"{shown(subject)} is neither a user name nor @GROUP")
    return subject


def check_user(user: str, field: str = "user") -> str:
    """A user name (not a group), else `InvalidRequest` naming `field`."""
    if not isinstance(user, str) or not _NAME.fullmatch(user) or unprintable_at(user) is not None:
        hint = " (a group: give a user)" if str(user).startswith("@") else ""
        raise InvalidRequest(field, f"{shown(user)} is not a user name{hint}")
    return user


def subject_label(subject: str) -> str:
    """How a subject is named in a refusal: `alice`, `group @lab`."""
    return f"group {subject}" if is_group(subject) else subject


# -- holdings ----------------------------------------------------------------------------------------------------
def vm_vcpus(node: Resources) -> int:
    """Whole vCPUs a VM of this size boots with (as `vm_spec` rounds them)."""
    return max(1, math.ceil(node.cpu / 100 - EPSILON))


def vm_memory_mib(node: Resources) -> int:
    return max(1, math.ceil(node.memory - EPSILON))


def holding_of(request: LeaseRequest, whole: Resources | None = None) -> Holding:
    """What a request holds while it is live. An exclusive one holds whole hosts: `whole` (the largest
    host it may get, when known) per VM."""
    placement = request.placement
    if whole is not None and placement is not None and placement.exclusive:
        n = request.numnodes
        return Holding(vm_vcpus(whole) * n, vm_memory_mib(whole) * n, n)
    return Holding(sum(vm_vcpus(n) for n in request.nodes), sum(vm_memory_mib(n) for n in request.nodes),
                   request.numnodes)


def lease_holding(lease: Lease) -> Holding:
    """What a live lease holds: an exclusive lease planned on hosts, those hosts whole."""
    placement, vm = lease.request.placement, lease.last_vm
    if placement is not None and placement.exclusive and vm is not None and vm.resources:
        held = vm.resources.values()
        return Holding(sum(vm_vcpus(r) for r in held), sum(vm_memory_mib(r) for r in held), lease.numnodes)
    return holding_of(lease.request)


def holdings_by_user(leases: Iterable[Lease]) -> dict[str, Holding]:
    """user -> the sum over their live leases (final ones hold nothing)."""
    out: dict[str, Holding] = {}
    for lease in leases:
        if not lease.is_final:
            user = lease.request.user
            out[user] = out.get(user, NOTHING) + lease_holding(lease)
    return out


def group_holding(group: str, held: Mapping[str, Holding], groups_of: Callable[[str], frozenset[str]]) -> Holding:
    """The sum of what the users of `group` (a name without `@`) hold."""
    total = NOTHING
    for user, holding in held.items():
        if group in groups_of(user):
            total = total + holding
    return total


# -- checks ------------------------------------------------------------------------------------------------------
def duration_text(value: timedelta) -> str:
    """A duration as people set it and `parse_duration` reads it back: `24h`, `30h`, `14d`, `1h30m`;
    days only from 2 days on, so a day-long limit reads `24h`."""
    seconds = math.ceil(value.total_seconds() - 1e-6)
    if seconds <= 0:
        return "0s"
    days, rest = divmod(seconds, 86400)
    if days < 2:
        days, rest = 0, seconds
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return "".join(f"{n}{u}" for n, u in ((days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")) if n)


def check_holding(subject: str, quota: Quota, held: Holding, adding: Holding) -> None:
    """Refuse when `held + adding` goes over a limit (exactly at it is allowed)."""
    after = held + adding
    who = subject_label(subject)
    if quota.vcpus is not None and after.vcpus > quota.vcpus:
        raise QuotaExceeded(subject, "vcpus", f"{who} would hold {after.vcpus} vCPUs > {quota.vcpus}")
    if quota.memory_mib is not None and after.memory_mib > quota.memory_mib:
        raise QuotaExceeded(subject, "memory_mib",
                            f"{who} would hold {after.memory_mib} MiB of memory > {quota.memory_mib}")
    if quota.vms is not None and after.vms > quota.vms:
        raise QuotaExceeded(subject, "vms", f"{who} would hold {after.vms} VMs > {quota.vms}")


def check_duration(subject: str, quota: Quota, duration: timedelta) -> None:
    if quota.max_duration is not None and duration > quota.max_duration:
        raise QuotaExceeded(subject, "max_duration", f"lease of {duration_text(duration)} > "
                                                     f"{subject_label(subject)}'s max duration "
                                                     f"{duration_text(quota.max_duration)}")


def ahead_of(request: LeaseRequest, now: datetime) -> timedelta:
    """How far ahead a request starts: an advance reservation from `now` to its start; a best-effort or
    immediate lease (or a start already past) 0."""
    if request.start is None:
        return ZERO
    return max(ZERO, request.start - as_utc(now, "now"))


def check_ahead(subject: str, quota: Quota, start: datetime | None, ahead: timedelta) -> None:
    if quota.max_ahead is not None and ahead > quota.max_ahead:
        raise QuotaExceeded(subject, "max_ahead", f"start {iso(start)} is {duration_text(ahead)} ahead > "
                                                  f"{subject_label(subject)}'s max ahead "
                                                  f"{duration_text(quota.max_ahead)}")


def applicable(user: str, quotas: Mapping[str, Quota],
               groups_of: Callable[[str], frozenset[str]]) -> list[tuple[str, Quota]]:
    """The quotas that apply to `user`: its own, then those of its groups by name."""
    out = [(user, quotas[user])] if user in quotas else []
    groups = groups_of(user) if any(is_group(s) for s in quotas) else frozenset()
    out.extend((f"@{g}", quotas[f"@{g}"]) for g in sorted(groups) if f"@{g}" in quotas)
    return out


def _held_by(subject: str, held: Mapping[str, Holding], groups_of: Callable[[str], frozenset[str]]) -> Holding:
    return group_holding(subject[1:], held, groups_of) if is_group(subject) else held.get(subject, NOTHING)


def check_request(request: LeaseRequest, now: datetime, quotas: Mapping[str, Quota], held: Mapping[str, Holding],
                  groups_of: Callable[[str], frozenset[str]], whole: Resources | None = None) -> None:
    """Refuse a new request over its owner's quota or one of its owner's groups' (`QuotaExceeded`, the first
    exceeded limit: the user's own before its groups', and vCPUs, memory, VMs, duration, ahead in that order).
    `held`: user -> what they hold now, the request not included; `whole`: see `holding_of`."""
    adding = holding_of(request, whole)
    ahead = ahead_of(request, now)
    for subject, quota in applicable(request.user, quotas, groups_of):
        check_holding(subject, quota, _held_by(subject, held, groups_of), adding)
        check_duration(subject, quota, request.duration)
        check_ahead(subject, quota, request.start, ahead)


def latest_start(request: LeaseRequest, now: datetime, quotas: Mapping[str, Quota],
                 groups_of: Callable[[str], frozenset[str]]) -> datetime | None:
    """The latest start the owner's quotas (and their groups') let a request have: `now` plus the least
    `max ahead` that applies (None: no limit). A lease that starts at the earliest time it fits is
    searched no further."""
    limits = [q.max_ahead for _, q in applicable(request.user, quotas, groups_of) if q.max_ahead is not None]
    return as_utc(now, "now") + min(limits) if limits else None


def check_extension(lease: Lease, by: timedelta, quotas: Mapping[str, Quota], held: Mapping[str, Holding],
                    groups_of: Callable[[str], frozenset[str]]) -> None:
    """Refuse an extension the same way as a request: the longer lease against the max durations, and what
    its owner (and groups) hold, the lease included, against the other limits. An extension adds nothing to a
    holding, so it is refused on those only when a quota was lowered below what is held already. Its start
    does not move, so `max ahead` does not apply."""
    duration = lease.request.duration + by
    for subject, quota in applicable(lease.request.user, quotas, groups_of):
        check_holding(subject, quota, _held_by(subject, held, groups_of), NOTHING)
        check_duration(subject, quota, duration)
