"""Gavel on the simulator: job-level rounds, its cloud fleet and its estimator."""
