"""Gavel ([Narayanan], ch. 5–6): heterogeneity-aware allocation policies, the round mechanism, placement.

Importing the package registers every policy with ``policies.registry``.
"""

from clustertwin.policies.gavel import (  # noqa: F401  (imported for their @register side effect)
    allox,
    cost,
    fifo,
    finish_time_fairness,
    gandiva,
    isolated,
    las,
    makespan,
    sjf,
    water_filling,
)
