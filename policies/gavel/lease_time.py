"""How long a real lease trains: the round less what starting it costs ([Narayanan] §5.5, Table 5.4).

A lease that starts a process (loads a checkpoint, and later saves one) loses time a renewed lease does
not. The time lost per worker type, for a fresh start and for a renewal, is learned from the leases that
ran their full time (their job did not finish first), smoothed as measured throughputs are (§5.3.3), and
every lease is given the round less that overhead, so that a lease and its overhead fill the round the
simulator models.
"""

from __future__ import annotations

# Shortest lease handed out, however large the learned overhead (seconds).
MIN_LEASE_S = 1.0


class LeaseTime:
    """Learned start-up overhead per (worker type, renewed) and the lease length it leaves."""

    def __init__(self, round_s: float, started_s: dict[str, float], smoothing: float) -> None:
        """``started_s``: per worker type, the overhead a fresh start is assumed to cost before any is
        measured (a renewal is assumed free); ``smoothing``: the weight of a new measurement."""
        self.round_s = round_s
        self.smoothing = smoothing
        self.overhead: dict[tuple[str, bool], float] = {}
        for worker_type, seconds in started_s.items():
            self.overhead[(worker_type, False)], self.overhead[(worker_type, True)] = seconds, 0.0
        self.seen: dict[tuple[str, bool], list[float]] = {}  # every measurement, for the run's report

    def lease_s(self, worker_type: str, renewed: bool) -> float:
        """Seconds the lease may train: the round less the learned overhead."""
        return max(self.round_s - self.overhead[(worker_type, renewed)], MIN_LEASE_S)

    def observe(self, worker_type: str, renewed: bool, spent_s: float) -> None:
        """A lease that ran its full time spent ``spent_s`` of its wall time not training."""
        key = (worker_type, renewed)
        self.overhead[key] += self.smoothing * (max(spent_s, 0.0) - self.overhead[key])
        self.seen.setdefault(key, []).append(spent_s)
