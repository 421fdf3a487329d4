"""Spot jobs' pluggable policies (Proteus: BidBrain + AgileML): two registries with small base types.

* :data:`ACQUISITION` (:mod:`policies.spot.acquisition`): what to request, renew or release at a
  decision point — bidbrain, standard, just_above, on_demand (:mod:`policies.spot.bidding`).
* :data:`FAULT_TOLERANCE` (:mod:`policies.spot.fault_tolerance`): stages, parameter owners, the cost of
  an eviction — agileml, checkpoint (:mod:`policies.spot.schemes`).

The algorithms themselves are in :mod:`policies.bidbrain` and :mod:`policies.agileml`.
"""

from clustertwin.policies.spot import bidding, schemes  # noqa: F401 - registers the built-in entries
from clustertwin.policies.spot.acquisition import (
    ACQUISITION,
    AcquisitionInputs,
    AcquisitionPolicy,
    Decision,
    DecisionPoint,
)
from clustertwin.policies.spot.fault_tolerance import (
    FAULT_TOLERANCE,
    NO_FAULT_TOLERANCE,
    EvictionCost,
    FaultTolerance,
    FaultToleranceSettings,
)

__all__ = [
    "ACQUISITION",
    "FAULT_TOLERANCE",
    "NO_FAULT_TOLERANCE",
    "AcquisitionInputs",
    "AcquisitionPolicy",
    "Decision",
    "DecisionPoint",
    "EvictionCost",
    "FaultTolerance",
    "FaultToleranceSettings",
]
