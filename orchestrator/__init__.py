"""leasewise: plan VM leases on a timeline of host capacity, then enact the plan through a driver."""
