"""PSLD ([PSLD], Chen et al., SoCC'20): parameter-server load distribution by exploitation-exploration.

One idea per module: ``blocks`` (tensors cut into <= 4 MB blocks, §4), ``profiling`` (per-server linear
regression Pred(r, s) = alpha_r s + beta_r with its standard error, §4.1), ``superior`` (Algorithm 1),
``placement`` (Algorithms 2 and 3: the exploitation cost and the epsilon-greedy distribution), ``trigger``
(the PS speed variation of §2.3 and the straggler threshold), ``scaling`` (scale-out when the superior set is
small, scale-in by unloading or DEL_SERVER, §4.2 and §5.1), ``baselines`` (MXNet, TensorFlow, BytePS defaults
and the proportional strawman, §2.2 and §6), ``migration`` (block ownership, the reassignment step k* and
vanilla-PS state movement, §5.2), ``scheduler`` (the control loop of Figs. 7-8 tying them together) and
``policies`` (the placement policies a scenario names, registry ``PLACEMENT``: initial layout and
reassignment). Nothing here reads a clock, sleeps, does I/O or imports simpy/torch.
"""

from clustertwin.policies.psld.baselines import (
    byteps_layout,
    mxnet_layout,
    strawman_owners,
    tensorflow_layout,
)
from clustertwin.policies.psld.blocks import Block, Tensor, split_blocks
from clustertwin.policies.psld.migration import BlockStore, migrations, reassignment_step
from clustertwin.policies.psld.placement import eps_greedy, exploit
from clustertwin.policies.psld.policies import PLACEMENT, Placement, placement
from clustertwin.policies.psld.profiling import PerfModel, Sample, ServerModel, fit_model
from clustertwin.policies.psld.scheduler import Decision, PSLDScheduler, SchedulerConfig
from clustertwin.policies.psld.superior import superior_set
from clustertwin.policies.psld.trigger import server_speeds, speed_variation

__all__ = [
    "PLACEMENT",
    "Block",
    "BlockStore",
    "Decision",
    "PSLDScheduler",
    "PerfModel",
    "Placement",
    "Sample",
    "SchedulerConfig",
    "ServerModel",
    "Tensor",
    "byteps_layout",
    "eps_greedy",
    "exploit",
    "fit_model",
    "migrations",
    "mxnet_layout",
    "placement",
    "reassignment_step",
    "server_speeds",
    "speed_variation",
    "split_blocks",
    "strawman_owners",
    "superior_set",
    "tensorflow_layout",
]
