"""BidBrain (Proteus, Harlap et al., EuroSys'17; [Proteus] §4): spot acquisition by expected cost per work.

* :mod:`policies.bidbrain.history` — β / median time-to-eviction tables from a training window.
* :mod:`policies.bidbrain.cost_model` — Eqs. 1–4: expected cost, expected work, cost per work.
* :mod:`policies.bidbrain.policy` — decision points, acquisition, renewal; the Standard baseline.
"""

from clustertwin.policies.bidbrain.cost_model import (
    HOUR_S,
    Allocation,
    CostParams,
    Outlook,
    candidates_cost_per_work,
    cost_per_work,
    expected_cost,
    expected_work,
)
from clustertwin.policies.bidbrain.history import (
    DEFAULT_DELTAS,
    EvictionTable,
    Market,
    PriceSeries,
    estimate_eviction_table,
)
from clustertwin.policies.bidbrain.policy import (
    BidBrain,
    BidBrainParams,
    MarketView,
    SpotRequest,
    just_above_request,
    standard_request,
)

__all__ = [
    "DEFAULT_DELTAS",
    "HOUR_S",
    "Allocation",
    "BidBrain",
    "BidBrainParams",
    "CostParams",
    "EvictionTable",
    "Market",
    "MarketView",
    "Outlook",
    "PriceSeries",
    "SpotRequest",
    "candidates_cost_per_work",
    "cost_per_work",
    "estimate_eviction_table",
    "expected_cost",
    "expected_work",
    "just_above_request",
    "standard_request",
]
