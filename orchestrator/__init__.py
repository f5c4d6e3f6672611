"""leasewise: plan VM leases on a timeline of host capacity, then enact the plan through a driver."""

from orchestrator import compiled as _compiled

# (before any module of the compiled group is imported: from source when asked, or when the build is stale)
_compiled.choose()
