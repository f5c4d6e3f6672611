"""The model: what a lease, a reservation, resources, states, errors, time and the configuration are.

The bottom layer of the orchestrator: it imports nothing from the other layers.
"""
