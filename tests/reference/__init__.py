"""Plain references for the compiled code: `core` (the slot table's core, `core.pyx`, written naively).

`CORES` names the cores a slot table can run on (`SlotTable(core=...)`): the tests that exercise the
table, the host states and the mapper's walk run on each and must get the same answers."""

from types import ModuleType

from orchestrator.planning.slottable import core as compiled
from tests.reference import core as reference

CORES: dict[str, ModuleType] = {"compiled": compiled, "reference": reference}
