"""Injected leases: the reference's older whitespace format, one lease a line, and merging such a file into a
trace.

    # comment
    submit start duration realduration numnodes cpu memory disk image image_size

Times are seconds from `simulation.start` (the trace's start); `start` = -1 is a best-effort, preemptible
lease, anything else an advance reservation starting then (not preemptible). A start before the lease's
submission is read as it is, and the scheduler rejects that reservation, as the reference's did (four
lines of the shipped Blue files start before the trace). `cpu` counts whole CPUs per node
(1 = 100%), `memory`, `disk` and `image_size` are MB (read as MiB); `image` may be quoted ('NONE.img').

The reference's experiments injected such a file of advance reservations into a best-effort trace, one file
per run; `inject` does that merge, so `simulate --inject` and a sweep run the same workload.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from orchestrator.config import MAX_SITE_HOSTS
from orchestrator.model.errors import InvalidRequest, WorkloadError
from orchestrator.model.lease import LeaseRequest, LeaseType, VMImage
from orchestrator.model.resources import MAX_AMOUNT, Resources
from orchestrator.model.timeutil import MAX_DURATION
from orchestrator.model.workload import Workload, check_fits_site

if TYPE_CHECKING:  # pragma: no cover
    from orchestrator.config import Config

FIELDS = ("submit", "start", "duration", "realduration", "numnodes", "cpu", "memory", "disk", "image",
          "image_size")
BEST_EFFORT_START = -1
#: the largest time or duration a line may give, in seconds; the most VMs a lease may have
MAX_SECONDS = MAX_DURATION.total_seconds()
#: the prefix of an injected lease's id once merged into a trace (the trace keeps its own ids)
INJECTED_ID = "injected-"


def _number(token: str, name: str, where: str, *, positive: bool = False, signed: bool = False,
            maximum: float = MAX_SECONDS) -> float:
    """A finite number of at most `maximum` (a time or a duration in seconds, by default: so no later sum
    or timedelta overflows)."""
    try:
        value = float(token)
    except ValueError:
        raise WorkloadError(name, f"{token!r} is not a number", where=where) from None
    if value != value or value in (float("inf"), float("-inf")):
        raise WorkloadError(name, f"{token!r} is not a finite number", where=where)
    if abs(value) > maximum:
        raise WorkloadError(name, f"is too large (got {token}; at most {maximum:g})", where=where)
    if positive and value <= 0:
        raise WorkloadError(name, f"must be greater than zero (got {token})", where=where)
    if value < 0 and not signed:
        raise WorkloadError(name, f"must not be negative (got {token})", where=where)
    return value


def _is_best_effort(token: str) -> bool:
    try:
        return float(token) == BEST_EFFORT_START
    except ValueError:
        return False


def looks_injected(data: bytes) -> bool:
    """Whether the first line that is neither blank nor a comment has the format's ten fields."""
    for line in data.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith(b"#"):
            return len(stripped.split()) == len(FIELDS)
    return False


def parse_injected(data: bytes | str, config: "Config | None" = None, source: str = "<injected>") -> Workload:
    """Parse the whitespace format into a Workload; lease ids are the leases' numbers in the file (1, 2, ...)."""
    from orchestrator.config import Config

    config = config or Config()
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    start = config.simulation.start
    hosts = config.simulation.hosts
    fit_cache: dict = {}
    requests: list[tuple[str, LeaseRequest]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        where = f"{source}:{lineno}"
        fields = stripped.split()
        if len(fields) != len(FIELDS):
            raise WorkloadError("fields", f"expected {len(FIELDS)} whitespace-separated fields "
                                          f"({' '.join(FIELDS)}), got {len(fields)}", where=where)
        submit = _number(fields[0], "submit", where)
        begin = None if _is_best_effort(fields[1]) else _number(fields[1], "start", where, signed=True)
        duration = _number(fields[2], "duration", where, positive=True)
        real = _number(fields[3], "realduration", where, positive=True)
        count = _number(fields[4], "numnodes", where, positive=True, maximum=MAX_SITE_HOSTS)
        if not count.is_integer():
            raise WorkloadError("numnodes", f"must be a whole number (got {fields[4]})", where=where)
        cpu = _number(fields[5], "cpu", where, positive=True, maximum=MAX_AMOUNT / 100)
        memory = _number(fields[6], "memory", where, positive=True, maximum=MAX_AMOUNT)
        disk = _number(fields[7], "disk", where, maximum=MAX_AMOUNT)
        image = fields[8].strip("'\"")
        if not image:
            raise WorkloadError("image", "must not be empty", where=where)
        image_size = _number(fields[9], "image_size", where, maximum=MAX_AMOUNT)
        node = Resources(cpu=cpu * 100, memory=memory, disk=disk)
        try:
            request = LeaseRequest(
                type=LeaseType.BEST_EFFORT if begin is None else LeaseType.ADVANCE_RESERVATION,
                nodes=(node,) * int(count),
                duration=timedelta(seconds=duration),
                submit_time=start + timedelta(seconds=submit),
                start=None if begin is None else start + timedelta(seconds=begin),
                preemptible=begin is None,
                real_duration=timedelta(seconds=real),
                image=VMImage(disk=image, size_mib=image_size),
            )
        except InvalidRequest as exc:
            raise WorkloadError(exc.field, exc.problem, where=where) from None
        except OverflowError:   # (a time from the trace's start past the year 9998)
            raise WorkloadError("submit", "the times of this line are past the year 9998", where=where) from None
        if hosts is not None:
            check_fits_site(request, hosts, where, fit_cache)
        requests.append((str(len(requests) + 1), request))
    requests.sort(key=lambda item: item[1].submit_time)
    return Workload(requests=requests, site=None, source=source)


def inject(trace: Workload, injected: Workload) -> Workload:
    """The trace with the injected leases merged in by submit time (the trace's first at equal times); the
    injected leases' ids become `injected-N`."""
    requests = trace.requests + [(f"{INJECTED_ID}{lease_id}", request) for lease_id, request in injected.requests]
    requests.sort(key=lambda item: item[1].submit_time)
    skipped = dict(trace.skipped)
    for reason, count in injected.skipped.items():
        skipped[reason] = skipped.get(reason, 0) + count
    return Workload(requests=requests, site=trace.site if trace.site is not None else injected.site,
                    source=f"{trace.source} + {injected.source}", skipped=skipped, name=trace.name,
                    description=trace.description)
