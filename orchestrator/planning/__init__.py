"""Planning: when and where each lease runs, with its overheads planned as reservations.

The slot table (capacity over time), the mapper and its policies, the lease and VM schedulers, the
overheads, evacuation by live migration and the pre-copy model that times it. Planning depends only on
`orchestrator.model`; it never calls a driver (the runtime enacts what it plans).
"""
