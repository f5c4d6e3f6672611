"""Workloads: lease requests read from a file (Haizea's LWF, the Parallel Workloads Archive's SWF) or generated.

`load_workload(path, config)` picks the format from the file name (`.lwf`/`.xml`, `.swf`, either optionally
`.gz`; an `.lwf` that is not XML holds injected leases, the older one-lease-a-line format) or, failing that,
from the content, and returns a `Workload`: the requests in submit order, each with
the workload's own lease id, plus the site the file describes (if any).

The `Workload` type lives in `orchestrator.model.workload` (the simulator runs one without knowing the
file formats) and `resolve_site` in `orchestrator.config`; both are re-exported here for the readers and
their callers.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.config import resolve_site
from orchestrator.model.errors import WorkloadError
from orchestrator.model.workload import Workload, check_fits_site
from orchestrator.workloads.files import read_workload_file

if TYPE_CHECKING:  # pragma: no cover
    from orchestrator.config import Config

__all__ = ["Workload", "load_workload", "workload_from_bytes", "resolve_site", "check_fits_site"]


def load_workload(path: str | Path, config: "Config | None" = None) -> Workload:
    """Read an LWF, injected-lease or SWF workload (gzip-compressed or not) into a `Workload`."""
    path = Path(path)
    return workload_from_bytes(read_workload_file(path), path.name, config, source=str(path))


def workload_from_bytes(data: bytes, name: str, config: "Config | None" = None, source: str | None = None) -> Workload:
    """Parse a workload file's (decompressed) bytes; `name` (the file's name) picks the format."""
    from orchestrator.config import Config
    from orchestrator.workloads import injected, lwf, swf

    config = config or Config()
    source = source if source is not None else name
    name = name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    head = data.lstrip()[:1]
    if name.endswith(".lwf") and head not in (b"<", b""):
        return injected.parse_injected(data, config, source=source)   # the older, one-lease-a-line LWF
    if name.endswith((".lwf", ".xml")):
        return lwf.parse_lwf(data, config, source=source)
    if name.endswith(".swf"):
        return swf.parse_swf(data, config, source=source)
    if head == b"<":
        return lwf.parse_lwf(data, config, source=source)
    if injected.looks_injected(data):
        return injected.parse_injected(data, config, source=source)
    if head == b";" or head.isdigit():
        return swf.parse_swf(data, config, source=source)
    raise WorkloadError(source, "unknown workload format (expected an LWF .lwf/.xml, injected leases .lwf or an "
                                "SWF .swf file, optionally .gz)")
