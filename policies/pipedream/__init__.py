"""PipeDream and its descendants ([PipeDream-arXiv]; [Narayanan] chapters 2-4), as pure decision code.

- ``partition``: the hierarchical partitioning DP of [Narayanan] §2.4.1 (stages, replication, NOAM).
- ``ops`` and the schedule generators (``gpipe``, ``one_f_one_b``, ``flush``, ``twobw``,
  ``interleaved``): per-worker op lists, executed unchanged by ``sim.pipedream`` and
  ``runtime.pipedream``; ``schedules`` is their registry.
- ``planners``: the registry of stage planners (the DP's modes, manual stages, and ``brute_force``,
  the exhaustive search of ``brute_force`` that checks the DP).
- ``twobw_planner``: the PipeDream-2BW planner ([Narayanan] §3.3, Algorithm 1) for identical blocks;
  ``twobw_plan``: the same algorithm on a profiled model, as the planner entry ``2bw``.
- ``plan_memory``: per-device memory of a plan under a schedule (the memory-aware planner's model).
- ``vertical_sync``: PipeDream's vertical sync (§2.4.3) as a rewrite of 1F1B's weight versions.
- ``ptdp``: PTD-P's analytical model ([Narayanan] ch. 4: FLOPs, parameters, bubbles, communication).

Importing the package registers every schedule and planner.
"""

from clustertwin.policies.pipedream import (  # noqa: F401  (imported for their @register side effect)
    brute_force,
    flush,
    gpipe,
    interleaved,
    one_f_one_b,
    planners,
    twobw,
    twobw_plan,
)
