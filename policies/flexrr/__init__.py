"""FlexRR ([Harlap], ch. 3): SSP plus RapidReassignment of work between peer workers.

One idea per module: ``config`` (Table 3.1), ``groups`` (§3.3.1), ``messages`` (§3.3.3), ``progress``
(Algorithm 1), ``consistency`` (BSP/SSP gating, §3.2.2), ``worker`` (the RapidReassignment state machine,
§3.3.3 and Algorithm 2), ``stragglers`` (the §3.4.1 straggler speed profiles and the Ideal bound),
``straggler_models`` (the straggler patterns a scenario names, registry ``STRAGGLERS``), ``modes`` (the
systems compared, registry ``MODES``).
"""

from clustertwin.policies.flexrr.config import RRConfig
from clustertwin.policies.flexrr.consistency import may_start
from clustertwin.policies.flexrr.groups import helpee_groups, helper_groups, machine_of
from clustertwin.policies.flexrr.modes import MODES, Mode
from clustertwin.policies.flexrr.straggler_models import STRAGGLERS, StragglerModel, StragglerParams
from clustertwin.policies.flexrr.worker import RRWorker, Task

__all__ = [
    "MODES",
    "STRAGGLERS",
    "Mode",
    "RRConfig",
    "RRWorker",
    "StragglerModel",
    "StragglerParams",
    "Task",
    "helper_groups",
    "helpee_groups",
    "machine_of",
    "may_start",
]
