"""The slot table: each host's capacity over time, and the host states that rank hosts for the mapper.

Modules, each importing only those before it: `keys` (integer times and usage codes, their sentinels),
`blocks` (the layout of a run of breakpoints in one integer array, and its lookup), `shared_usage` (the
distinct usage vectors under their codes), `excluding` (queries that treat reservations as gone),
`timeline` (one host's usage as a step function), `hoststates` (every host's state at a query time, kept
valid incrementally) and `table` (`SlotTable`, what the schedulers call).
"""
