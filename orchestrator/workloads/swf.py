"""The Parallel Workloads Archive's Standard Workload Format (SWF): one job per line, 18 fields.

Header lines start with `;` (`; MaxNodes: 100`, `; MaxProcs: 100` are read). Data lines give, by field:

     1 job number            -> lease id          10 requested memory      (ignored: memory_per_vm)
     2 submit time (s)       -> submit time        11 status               (5 = cancelled: skipped)
     3 wait time             (ignored)             12 user id              -> LeaseRequest.user
     4 run time (s)          -> real_duration      13..18 group, app, queue, partition, preceding job, think time
     5 allocated processors  (used if 8 is -1)
     6 average CPU time      (ignored)
     7 used memory           (ignored)
     8 requested processors  -> number of VMs
     9 requested time (s)    -> duration (run time if -1)

Every job becomes a best-effort lease (preemptible per `[workload.swf] preemptible`) of
ceil(processors / processors_per_node) VMs, each of processors_per_node CPUs and memory_per_vm MiB.

The requested duration is max(requested time, run time): a job that ran longer than it asked for (a few
percent of the jobs in most logs, 475 in KTH-SP2) would otherwise be killed at its requested time by the
scheduler, and the simulation would no longer replay the trace's work.

Submit times are offsets from `simulation.start`; with `window_start` the window's start maps to
`simulation.start` (jobs submitted in [window_start, window_end) are kept). `first` keeps the first N jobs
that become leases. Jobs skipped (cancelled, no run time, no processors, larger than the site) are counted
in `Workload.skipped` by reason.

The site, when the configuration names none, comes from the header: MaxProcs (else MaxNodes) processors,
grouped processors_per_node per host, each host with memory_per_vm MiB (one VM per host).
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

from orchestrator.config import MAX_SITE_HOSTS
from orchestrator.model.errors import InvalidRequest, WorkloadError
from orchestrator.model.lease import LeaseRequest, LeaseType
from orchestrator.model.numbers import ascii_decimal, ascii_whole
from orchestrator.model.resources import Resources
from orchestrator.model.tolerance import EPSILON
from orchestrator.model.timeutil import duration_from_seconds, end_of
from orchestrator.model.workload import Workload

if TYPE_CHECKING:  # pragma: no cover
    from orchestrator.config import Config

NFIELDS = 18
FIELD_NAMES = (
    "job_number", "submit_time", "wait_time", "run_time", "allocated_processors", "average_cpu_time",
    "used_memory", "requested_processors", "requested_time", "requested_memory", "status", "user_id",
    "group_id", "executable", "queue", "partition", "preceding_job", "think_time",
)
CANCELLED = 5

SKIP_CANCELLED = "cancelled before start (status 5)"
SKIP_NO_RUNTIME = "run time <= 0"
SKIP_NO_PROCS = "processors <= 0"
SKIP_TOO_LARGE = "more processors than the site"


def _header_site(max_nodes: int | None, max_procs: int | None, config: "Config") -> list[tuple[str, Resources]] | None:
    processors = max_procs if max_procs else max_nodes
    if not processors:
        return None
    ppn = config.swf.processors_per_node
    capacity = Resources(ppn * 100, config.swf.memory_per_vm)
    count = math.ceil(processors / ppn)
    if count > MAX_SITE_HOSTS:
        raise WorkloadError("MaxProcs" if max_procs else "MaxNodes",
                            f"makes {count} hosts (at most {MAX_SITE_HOSTS}); name a smaller site in [simulation]")
    return [(f"host{i}", capacity) for i in range(1, count + 1)]


def _number(token: str, index: int, where: str) -> int | float:   # (an int stays one: a user id is written back)
    if token.isascii() and token.isdigit():   # (nearly every field of a trace: spare it the regular expressions)
        return int(token)
    whole = ascii_whole(token)
    if whole is not None:
        return whole
    value = ascii_decimal(token)
    if value is None:
        raise WorkloadError(f"{FIELD_NAMES[index]} (field {index + 1})", f"{token!r} is not a number", where=where)
    return value


def parse_swf(data: bytes | str, config: "Config | None" = None, source: str = "<swf>") -> Workload:
    """Parse SWF text into a Workload (see the module docstring for the mapping)."""
    from orchestrator.config import Config

    config = config or Config()
    opts = config.swf
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    start = config.simulation.start
    shift = opts.window_start or 0.0
    lo, hi = opts.window_start, opts.window_end
    ppn = opts.processors_per_node
    node = Resources(ppn * 100, opts.memory_per_vm)
    node.validate("workload.swf")
    preemptible = opts.preemptible
    first = opts.first
    configured = config.simulation.hosts if config.simulation.site is not None else None

    max_nodes: int | None = None
    max_procs: int | None = None
    site: list[tuple[str, Resources]] | None = None
    limit_vms: int | None = None     # VMs a job may ask for before it is larger than the site
    site_known = False
    skipped: dict[str, int] = {}
    seen: dict[int | float, int] = {}
    requests: list[tuple[str, LeaseRequest]] = []
    best_effort = LeaseType.BEST_EFFORT
    nodes_for: dict[int, tuple[Resources, ...]] = {}

    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped[0] == ";":
            if not site_known:
                key, sep, value = stripped[1:].partition(":")
                key = key.strip().lower()
                if sep and key in ("maxnodes", "maxprocs"):
                    number = ascii_whole(value.split()[0]) if value.split() else None
                    if value.split() and number is None:
                        raise WorkloadError(key == "maxnodes" and "MaxNodes" or "MaxProcs",
                                            f"{value.strip()!r} is not a whole number", where=f"{source}:{lineno}")
                    if key == "maxnodes":
                        max_nodes = number
                    else:
                        max_procs = number
            continue
        where = f"{source}:{lineno}"
        if not site_known:
            site = _header_site(max_nodes, max_procs, config)
            hosts = configured if configured is not None else site
            if hosts is not None:
                fitting = [cap for _, cap in hosts if cap[0] + EPSILON >= node[0] and cap[1] + EPSILON >= node[1]]
                limit_vms = len(fitting)
            site_known = True
        fields = stripped.split()
        if len(fields) != NFIELDS:
            raise WorkloadError("fields", f"expected {NFIELDS} whitespace-separated fields, got {len(fields)}", where=where)
        job = _number(fields[0], 0, where)
        submit_s = _number(fields[1], 1, where)
        run = _number(fields[3], 3, where)
        allocated = _number(fields[4], 4, where)
        req_procs = _number(fields[7], 7, where)
        req_time = _number(fields[8], 8, where)
        status = _number(fields[10], 10, where)
        user = _number(fields[11], 11, where)

        if job in seen:
            raise WorkloadError("job_number (field 1)", f"job {fields[0]} appears twice (first on line {seen[job]})", where=where)
        seen[job] = lineno
        if lo is not None and submit_s < lo:
            continue
        if hi is not None and submit_s >= hi:
            continue
        if status == CANCELLED:
            skipped[SKIP_CANCELLED] = skipped.get(SKIP_CANCELLED, 0) + 1
            continue
        if run <= 0:
            skipped[SKIP_NO_RUNTIME] = skipped.get(SKIP_NO_RUNTIME, 0) + 1
            continue
        procs = req_procs if req_procs > 0 else allocated
        if procs <= 0:
            skipped[SKIP_NO_PROCS] = skipped.get(SKIP_NO_PROCS, 0) + 1
            continue
        nvms = math.ceil(procs / ppn)
        if nvms > (limit_vms if limit_vms is not None else MAX_SITE_HOSTS):
            skipped[SKIP_TOO_LARGE] = skipped.get(SKIP_TOO_LARGE, 0) + 1
            continue
        if submit_s < 0:
            raise WorkloadError("submit_time (field 2)", f"must not be negative (got {fields[1]})", where=where)
        requested = req_time if req_time > 0 else run
        nodes = nodes_for.get(nvms)
        if nodes is None:
            nodes = nodes_for[nvms] = (node,) * nvms
        try:
            request = LeaseRequest(
                type=best_effort,
                nodes=nodes,
                duration=duration_from_seconds(max(requested, run),
                                               "requested_time (field 9)" if requested > run else "run_time (field 4)"),
                submit_time=end_of(start, duration_from_seconds(submit_s - shift, "submit_time (field 2)"),
                                  "submit_time (field 2)"),
                preemptible=preemptible,
                real_duration=duration_from_seconds(run, "run_time (field 4)"),
                user=str(user) if user >= 0 else "",
            )
        except InvalidRequest as exc:   # a time past the year 9998
            raise WorkloadError(exc.field, exc.problem, where=where) from None
        requests.append((fields[0], request))
        if first is not None and len(requests) >= first:
            break

    if not site_known:
        site = _header_site(max_nodes, max_procs, config)
    requests.sort(key=lambda item: item[1].submit_time)
    return Workload(requests=requests, site=site, source=source, skipped=skipped)


def load_swf(path: str | os.PathLike[str], config: Config | None = None) -> Workload:
    """Read an SWF file, gzip-compressed or not."""
    from pathlib import Path

    from orchestrator.workloads.files import read_workload_file

    return parse_swf(read_workload_file(Path(path)), config, source=str(path))
