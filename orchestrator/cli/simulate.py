"""`leasewise simulate`: run a workload on the simulated clock (filled in by the scheduler work)."""

from . import app  # noqa: F401
