"""The slot table: each host's capacity over time, and the host states that rank hosts for the mapper.

Modules: `keys` (integer times and usage codes, their sentinels), `shared_usage` (the distinct usage
vectors under their codes), `excluding` (queries that treat reservations as gone), `core` (compiled from
`core.pyx`: each host's usage as a step function, and the loops over many hosts), `hoststates` (every
host's state at a query time, kept valid incrementally) and `table` (`SlotTable`, what the schedulers call).
"""

from orchestrator import compiled as _compiled

# (before `core` is imported: a core not built, or built from other sources, stops here, saying what to run)
_compiled.check()
