"""Experiments: many simulations at once, for comparing settings.

A sweep (`spec`) names workloads and axes of configuration values; every combination is a run. The runs
go to Ray as tasks (`engine`, `task`), the driver (`sweep`) writes each finished run's result at once
(`results`), so a killed sweep resumes where it stopped, and the results table can be drawn (`plot`).
This layer sits above `analysis` and `workloads`: it reads workloads and runs the simulator.
"""
