"""Property tests (hypothesis) of PSLD's ownership across reassignments.

* After any sequence of iterations, reassignments (random, or PSLD's own), scale-outs and DEL_SERVER
  removals, every block has exactly one owner among the active PSs and every update was applied exactly
  once, in vanilla mode (state moves with the block) and in BytePS mode (only the map changes).
"""

from __future__ import annotations

import numpy as np
from clustertwin.policies.psld.migration import BlockStore
from clustertwin.policies.psld.profiling import Sample
from clustertwin.policies.psld.scheduler import PSLDScheduler, SchedulerConfig
from hypothesis import given, settings
from hypothesis import strategies as st

ops = st.lists(
    st.tuples(st.sampled_from(["step", "reassign", "psld", "add", "remove"]), st.integers(0, 2**31 - 1)),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(
    n_blocks=st.integers(1, 30),
    servers=st.integers(1, 4),
    mode=st.sampled_from(["vanilla", "byteps"]),
    sequence=ops,
)
def test_every_block_has_one_owner_and_no_update_is_lost(
    n_blocks: int, servers: int, mode: str, sequence: list[tuple[str, int]]
) -> None:
    sizes = [float(1 + (b * 7919) % 13) for b in range(n_blocks)]
    active = list(range(servers))
    standby = list(range(servers, servers + 3))
    sched = PSLDScheduler(sizes, list(active), list(standby), SchedulerConfig(cooldown_reports=0))
    store = BlockStore([active[b % len(active)] for b in range(n_blocks)], mode)
    iterations = 0
    for report, (op, seed) in enumerate(sequence):
        rng = np.random.default_rng(seed)
        if op == "step":
            store.step()
            iterations += 1
        elif op == "reassign":
            store.reassign([sched.active[int(i)] for i in rng.integers(len(sched.active), size=n_blocks)])
        elif op == "psld":
            samples = [
                Sample(w, r, s, (1 + 9 * (r == seed % 7)) * 1e-8 * s + 1e-4)
                for r in sched.active
                for w in range(2)
                for s in (1e5, 1e6)
            ]
            sched.observe(samples)
            decision = sched.decide(report, store.owner, rng)
            if decision.owners is not None:
                assert set(decision.owners) <= set(decision.servers)
                store.reassign(decision.owners)
        elif op == "add" and sched.standby:
            sched.active.append(sched.standby.pop(0))
        elif op == "remove" and len(sched.active) > 1:
            victim = sched.active[seed % len(sched.active)]
            decision = sched.remove_server(victim, rng)
            assert decision.owners is not None and victim not in decision.owners
            store.reassign(decision.owners)
        store.check(iterations)
        assert set(store.owner) <= set(sched.active) | set(range(servers))
        assert len(store.owner) == n_blocks


def test_block_store_catches_a_lost_update() -> None:
    store = BlockStore([0, 1], "vanilla")
    store.step()
    store.held[1].pop(1)  # a migration that dropped the state
    store.held[0][1] = 0
    try:
        store.check(1)
    except AssertionError:
        return
    raise AssertionError("check() accepted a lost update")
