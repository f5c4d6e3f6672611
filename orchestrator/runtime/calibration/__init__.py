"""The calibration campaign: boot guests of known memory and dirty rate, migrate, suspend and resume them
on real (or simulated) hosts, and record what each operation took, for `orchestrator.analysis.calibration`
to fit the scheduler's cost models to.

`testbed` opens the driver the campaign runs on; `guests` is the lab guest (its spec, its console's
ready and alive lines, and the cleanup that leaves no guest behind); `disks` the guests' disks for measuring
block migrations (made, placed on the hosts, removed from both); `campaign` is the measurement plan
and the measuring; `samples` the measurements. `leasewise calibrate` (orchestrator/cli/calibrate.py)
parses the options, runs the campaign, and prints and stores the fit.
"""
