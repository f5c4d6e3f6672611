"""Which core a slot table runs on: the compiled one (`ctimeline`, built by `pip install` where a C
compiler is) when it was built, else the reference in Python (`timeline` and `hoststates`). A core is a
host timeline class and the host states' row refresh that reads it; both cores have one interface and give
the same answers, and the table's tests and property tests run against each."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from orchestrator.planning.slottable import hoststates, timeline

try:
    from orchestrator.planning.slottable import ctimeline
except ImportError:   # (not built: no C compiler where it was installed)
    ctimeline = None


class Core(NamedTuple):
    """A kind of host timeline and the `hoststates.refresh_rows` for it."""

    timeline: type
    refresh_rows: Callable


REFERENCE = Core(timeline.HostTimeline, hoststates.refresh_rows)
COMPILED = Core(ctimeline.HostTimeline, ctimeline.refresh_rows) if ctimeline is not None else None

#: the cores by name: what a test or a benchmark may ask a `SlotTable` for (None: not built)
CORES: dict[str, Core | None] = {"compiled": COMPILED, "reference": REFERENCE}

#: what a `SlotTable` runs on unless told otherwise
DEFAULT_CORE: Core = COMPILED or REFERENCE
