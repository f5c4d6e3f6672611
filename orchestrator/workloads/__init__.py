"""Workloads: lease requests read from a file (Haizea's LWF, the Parallel Workloads Archive's SWF) or generated.

`load_workload(path, config)` picks the format from the file name (`.lwf`/`.xml`, `.swf`, either optionally
`.gz`) or, failing that, from the content, and returns a `Workload`: the requests in submit order, each with
the workload's own lease id, plus the site the file describes (if any).

The `Workload` type and `resolve_site` live in `orchestrator.model.workload` (the simulator runs one
without knowing the file formats); they are re-exported here for the readers and their callers.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.model.errors import WorkloadError
from orchestrator.model.workload import Workload, check_fits_site, resolve_site
from orchestrator.workloads.files import read_workload_file

if TYPE_CHECKING:  # pragma: no cover
    from orchestrator.model.config import Config

__all__ = ["Workload", "load_workload", "resolve_site", "check_fits_site"]


def load_workload(path: str | Path, config: "Config | None" = None) -> Workload:
    """Read an LWF or SWF workload (gzip-compressed or not) into a `Workload`."""
    from orchestrator.model.config import Config
    from orchestrator.workloads import lwf, swf

    config = config or Config()
    path = Path(path)
    data = read_workload_file(path)
    name = path.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.endswith((".lwf", ".xml")):
        return lwf.parse_lwf(data, config, source=str(path))
    if name.endswith(".swf"):
        return swf.parse_swf(data, config, source=str(path))
    head = data.lstrip()[:1]
    if head == b"<":
        return lwf.parse_lwf(data, config, source=str(path))
    if head == b";" or head.isdigit():
        return swf.parse_swf(data, config, source=str(path))
    raise WorkloadError(str(path), "unknown workload format (expected an LWF .lwf/.xml or an SWF .swf file, optionally .gz)")
