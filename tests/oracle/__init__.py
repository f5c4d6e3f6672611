"""A plain scheduler to check the fast one against: the same rules, written to be read.

It plans leases the way `orchestrator.planning` does (Haizea's rules, and leasewise's deliberate
differences from them: docs/scheduling.md) through the same slot table, asking it only plain questions
(what a host uses at an instant, whether a request fits over an interval, until when it fits, which
reservations end when). It keeps no cache, memo, snapshot or shortcut: every question is asked afresh,
every host looked at, every lease of the queue tried at every step. It is laid out like Haizea's:
`mapper` (where the VMs go), `vm_scheduler` (when, and with which overheads), `evacuation` (live
migration as a planning move), `lease_scheduler` (the queue, preemption, events, re-planning), and
`simulation` (the clock and the records compared).

It shares with the fast scheduler only what is plain arithmetic and data: the model (leases, reservations,
states), the slot table it asks, the policies' rules, the overheads' sums and layouts (`Overheads`) and
the pre-copy model. What it leaves out: drains, cancellation and the operations a daemon asks for (none of
them are in a simulated workload), and enactment (a simulation enacts nothing).
"""
