"""PSLD simulation ([PSLD]): ``run(scenario) -> RunResult``.

Builds the model's tensors (``traces.psld_models``), the policy's blocks and initial owners (the placement
policy's layout, ``scenarios.psld_setup.initial_layout``), the PSLD/strawman scheduler for adaptive policies,
and the straggler timeline, then runs ``sim.psld.engine.Engine``. Tables (contract in
``scenarios.psld_results``): ``iterations``, ``reassignments``, ``loads``, ``reports``, ``changes``. ``info``
holds ``policy``, ``mode``, ``model``, ``workers``, ``servers``, ``blocks``, ``model_bytes``, ``batch_size``,
``warmup_s``, ``duration_s``, ``events`` and ``wall_s``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
from clustertwin.policies.psld.blocks import Tensor
from clustertwin.policies.psld.scheduler import PSLDScheduler
from clustertwin.scenarios.psld_results import frame
from clustertwin.scenarios.psld_schema import PSLDScenario
from clustertwin.scenarios.psld_setup import (
    NOISE_STREAM,
    POLICY_STREAM,
    initial_layout,
    scheduler_config,
    straggler_timeline,
)
from clustertwin.scenarios.results import RunResult
from clustertwin.sim.psld.engine import Engine, EngineConfig
from clustertwin.traces.psld_models import psld_model


def run(
    scenario: PSLDScenario,
    progress: Callable[[float, str], None] | None = None,
    *,
    initial_owners: Sequence[int] | None = None,
    tensors: Sequence[Tensor] | None = None,
) -> RunResult:
    """Simulate one PSLD scenario and return its event tables.

    ``initial_owners`` (block id -> PS, one per block of the policy's layout) replaces the policy's
    initial map, which is how a given map is simulated: a real run's final one, say, pinned with a
    non-adaptive policy or a scheduler that never acts (``psld.straggler_threshold`` huge,
    ``psld.recheck: false``).

    ``tensors`` (fp32 bytes each) replace the model's: a real network's (``real.model``), which the kind
    builds with torch. The catalog model's per-layer times do not belong to them, so its whole
    forward and backward time is then computed first and every block pushed at once, as the real
    runtime's worker does (``costs.worker_compute_s`` overrides that time as usual)."""
    wall0 = time.perf_counter()
    c, p = scenario.cluster, scenario.psld
    model = psld_model(scenario.model, scenario.batch_size, scenario.compute_scale)
    servers = list(range(c.servers))
    if tensors is not None:
        tensors = [Tensor(t.name, t.nbytes, 0) for t in tensors]
        total = sum(model.forward_s) + sum(model.backward_s)
        model = replace(model, tensors=tuple(tensors), forward_s=(total,), backward_s=(0.0,))
    blocks, owners = initial_layout(scenario, model.tensors, scenario.block_bytes)
    if initial_owners is not None:
        if len(initial_owners) != len(blocks) or not set(initial_owners) <= set(servers):
            raise ValueError(
                f"initial_owners must give each of the {len(blocks)} blocks one of the PSs {servers}"
            )
        owners = list(initial_owners)
    sizes = [b.nbytes for b in blocks]
    controller = None
    if scenario.placement.adaptive:
        controller = PSLDScheduler(
            sizes,
            list(servers),
            list(range(c.servers, c.servers + c.standby)),
            scheduler_config(scenario),
        )
    n_layers = len(model.backward_s)
    ready, acc = {}, 0.0
    for layer in range(n_layers - 1, -1, -1):
        acc += model.backward_s[layer]
        ready[layer] = acc
    forward_s = sum(model.forward_s)
    if scenario.costs.worker_compute_s is not None:
        # the real runtime's worker: the whole gradient first, then every block pushed at once
        forward_s = scenario.costs.worker_compute_s
        ready = dict.fromkeys(ready, 0.0)
    gb = 1e9
    engine = Engine(
        EngineConfig(
            workers=c.workers,
            servers=c.servers,
            standby=c.standby,
            mode=scenario.mode,
            worker_gbps=c.worker_gbps,
            server_gbps=c.server_gbps,
            colocate=c.colocate,
            message_latency_s=scenario.costs.message_latency_s,
            message_cpu_s=scenario.costs.message_cpu_s,
            server_cores=c.server_cores,
            sum_bytes_per_core_s=scenario.costs.sum_gbytes_per_core_s * gb,
            update_bytes_per_core_s=scenario.costs.update_gbytes_per_core_s * gb,
            state_factor=scenario.costs.state_factor,
            batch_size=model.batch_size,
            duration_s=scenario.duration_s,
            report_every=p.report_every,
            control_rtt_s=scenario.costs.control_rtt_s,
            reassign_fixed_s=scenario.costs.reassign_fixed_s,
            algo_s_per_block_server=scenario.costs.algo_s_per_block_server,
            timing_noise=scenario.costs.timing_noise,
        ),
        sizes,
        [model.tensors[b.tensor].layer for b in blocks],
        forward_s,
        ready,
        owners,
        controller,
        straggler_timeline(scenario),
        [(r.time_s, r.server) for r in scenario.removals],
        np.random.default_rng(np.random.SeedSequence([scenario.seed, POLICY_STREAM])),
        np.random.default_rng(np.random.SeedSequence([scenario.seed, NOISE_STREAM])),
        progress,
    )
    log = engine.run()
    tables = {
        "iterations": frame(log.iterations, "iterations"),
        "reassignments": frame(log.reassignments, "reassignments"),
        "loads": frame(log.loads, "loads"),
        "reports": frame(log.reports, "reports"),
        "changes": frame(log.changes, "changes"),
    }
    info = {
        "policy": scenario.policy,
        "mode": scenario.mode,
        "model": scenario.model,
        "workers": c.workers,
        "servers": c.servers,
        "blocks": len(blocks),
        "model_bytes": float(sum(sizes)),
        "batch_size": model.batch_size,
        "warmup_s": scenario.warmup_s,
        "duration_s": scenario.duration_s,
        "events": log.events,
        "wall_s": time.perf_counter() - wall0,
    }
    return RunResult(tables=tables, info=info)


__all__ = ["run", "straggler_timeline"]
