"""Which host timeline a slot table uses: the compiled one (`ctimeline`, built by `pip install` where a C
compiler is) when it was built, else the reference in Python (`timeline`). Both have one interface and
give the same answers; the table's tests and property tests run against each."""

from __future__ import annotations

from orchestrator.planning.slottable.timeline import HostTimeline as ReferenceTimeline

try:
    from orchestrator.planning.slottable.ctimeline import HostTimeline as CompiledTimeline
except ImportError:   # (not built: no C compiler where it was installed)
    CompiledTimeline = None

#: the timelines by name: what a test or a benchmark may ask a `SlotTable` for
TIMELINES: dict[str, type | None] = {"compiled": CompiledTimeline, "reference": ReferenceTimeline}

#: what a `SlotTable` uses unless told otherwise
DEFAULT_TIMELINE: type = CompiledTimeline or ReferenceTimeline
