"""The runtime: the one event loop, run on a virtual clock by the simulator and on the wall clock by the
daemon, and the enactment of the plan through a driver."""
