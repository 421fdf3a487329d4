"""Gavel for real: the round scheduler, its worker agents, leases and the profiler."""
