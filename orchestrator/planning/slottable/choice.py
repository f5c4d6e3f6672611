"""Which core a slot table runs on: the compiled one (`ctimeline`, built by `pip install` where a C
compiler is) when it was built, else the reference in Python (`timeline`, `hoststates` and the mapper). A
core is a host timeline class, the host states' row refresh that reads it and the mapper's walk of alike
nodes over it; both cores have one interface and give
the same answers, and the table's tests and property tests run against each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from orchestrator.planning.slottable import hoststates, timeline

try:
    from orchestrator.planning.slottable import ctimeline
except ImportError:   # (not built: no C compiler where it was installed)
    ctimeline = None


class Core(NamedTuple):
    """A kind of host timeline, the `hoststates.refresh_rows` for it, and the mapper's walk of alike
    nodes over it (None: the mapper's own, `mapper._AlikePacking._walk`, the reference)."""

    timeline: Any   # (the class: `timeline.HostTimeline` or the compiled one, alike in interface)
    refresh_rows: Callable
    alike_walk: Callable | None


REFERENCE = Core(timeline.HostTimeline, hoststates.refresh_rows, None)
try:
    COMPILED = (Core(ctimeline.HostTimeline, ctimeline.refresh_rows, ctimeline.alike_walk)
                if ctimeline is not None else None)
except AttributeError as missing:   # (an editable install built from an older ctimeline.pyx)
    raise ImportError(f"{ctimeline.__file__} was built from an older ctimeline.pyx ({missing}): "
                      "run `pip install -e .` again") from None

#: the cores by name: what a test or a benchmark may ask a `SlotTable` for (None: not built)
CORES: dict[str, Core | None] = {"compiled": COMPILED, "reference": REFERENCE}

#: what a `SlotTable` runs on unless told otherwise
DEFAULT_CORE: Core = COMPILED or REFERENCE
