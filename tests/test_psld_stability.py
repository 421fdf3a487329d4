"""PSLD's scheduler on noisy samples ([PSLD] §4; ``policies.psld.stability``).

The mechanism behind the real runs' repeated reassignments on fast hardware, on CPU: a balanced layout
of three equally fast PSs whose block times are mostly a fixed latency (a 4 MB block's transfer takes
about as long as the timer's resolution), with jitter shared by a PS's blocks in one iteration. Under
the point test (``gain_test: point``: apply a map predicted ``min_gain`` faster) the scheduler keeps
reassigning blocks between PSs that are all the same; under the significance test it never does,
whatever the seed and noise, and it still moves the load off a PS that starts straggling.
"""

from __future__ import annotations

import numpy as np
from clustertwin.policies.psld.profiling import Sample, ServerModel
from clustertwin.policies.psld.scheduler import PSLDScheduler, SchedulerConfig
from clustertwin.policies.psld.stability import clear_gain, period_sem
from hypothesis import example, given, settings
from hypothesis import strategies as st

MB = 1024 * 1024
SIZES = [4.0 * MB] * 6 + [0.25 * MB] * 6 + [2.25 * MB] * 12  # ResNet-like: a few large, many small
SERVERS = 3
RESOLUTION_S = 20e-6  # the timer's resolution: every sample is a multiple of it
LATENCY_S = 40e-6


def _reassignments(
    gain_test: str, seed: int, shared: float, rate: float, reports: int = 40, straggler_at: int | None = None
) -> list[int]:
    """The reports at which the scheduler reassigned, fed ``reports`` periods of 2 iterations x 4
    workers of samples: each PS moves ``rate`` bytes/s after ``LATENCY_S`` (PS 0 1000x slower from
    report ``straggler_at``), times a lognormal factor of sigma ``shared`` common to a PS's blocks in
    one iteration and one of 0.1 per sample, rounded to the resolution."""
    rng = np.random.default_rng(seed)
    owners = [b % SERVERS for b in range(len(SIZES))]
    sched = PSLDScheduler(SIZES, list(range(SERVERS)), [], SchedulerConfig(gain_test=gain_test))
    policy_rng = np.random.default_rng([seed, 2])
    moved = []
    for report in range(reports):
        rates = np.full(SERVERS, rate)
        if straggler_at is not None and report >= straggler_at:
            rates[0] = rate / 1000
        samples = []
        for _ in range(2):
            common = np.exp(rng.normal(0.0, shared, SERVERS))
            for w in range(4):
                for s, r in zip(SIZES, owners, strict=True):
                    t = (s / rates[r] + LATENCY_S) * common[r] * np.exp(rng.normal(0.0, 0.1))
                    samples.append(Sample(w, r, s, max(RESOLUTION_S, round(t / RESOLUTION_S) * RESOLUTION_S)))
        sched.observe(samples)
        decision = sched.decide(report, owners, policy_rng)
        if decision.owners is not None:
            owners = list(decision.owners)
            moved.append(report)
    return moved


def test_the_point_test_thrashes_on_noise_of_fast_servers() -> None:
    # the mechanism: 214 GB/s (1,716 Gbit/s) PSs, whose 4 MB blocks take a resolution step; no straggler
    counts = [len(_reassignments("point", seed, 0.1, 214e9)) for seed in range(3)]
    assert sum(counts) >= 6, counts


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**16), shared=st.floats(0.05, 0.4), rate=st.sampled_from([6e9, 55e9, 214e9]))
def test_the_significance_test_never_reassigns_on_noise(seed: int, shared: float, rate: float) -> None:
    assert _reassignments("significant", seed, shared, rate) == []


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**16), shared=st.floats(0.05, 0.4))
@example(seed=77, shared=0.375)  # a first period whose shared jitter alone looked like a straggler
def test_the_significance_test_still_reacts_to_a_straggler(seed: int, shared: float) -> None:
    moved = _reassignments("significant", seed, shared, 55e9, reports=16, straggler_at=6)
    assert moved and 6 <= moved[0] <= 10, moved  # within a few reports of the onset, never before


def _on_lines(model: ServerModel, server: int, sizes: list[float], noise: list[float]) -> list[Sample]:
    return [
        Sample(w, server, s, (a * s + b) * (1.0 + e))
        for w, (a, b) in enumerate(zip(model.alphas, model.betas, strict=True))
        for s, e in zip(sizes, noise, strict=True)
    ]


def test_noiseless_profiles_make_the_significance_test_the_point_test() -> None:
    flat = ServerModel((1e-9,) * 4, (1e-4,) * 4)
    fast = ServerModel((0.5e-9,) * 4, (1e-4,) * 4)
    model = {0: flat, 1: fast}
    sizes = [1e6] * 4
    probe = [0.5e6, 1e6, 2e6]
    clean = {0: [_on_lines(flat, 0, probe, [0.0] * 3)], 1: [_on_lines(fast, 1, probe, [0.0] * 3)]}
    assert period_sem([flat, flat], 1e6) == 0.0
    even, skewed = [0, 1, 0, 1], [0, 0, 0, 1]
    for history in (clean, {r: periods * 2 for r, periods in clean.items()}):  # one period, then two
        assert clear_gain(sizes, skewed, even, model, history, 1.645, 0.05)
        assert not clear_gain(sizes, even, skewed, model, history, 1.645, 0.05)
    # one period whose first iterations ran 1.6x and last 0.6x the line: no gain is clear yet
    probe4, hiccup = [1e6] * 4, [0.6, 0.6, -0.4, -0.4]
    scattered = {r: [_on_lines(model[r], r, probe4, hiccup)] for r in (0, 1)}
    assert not clear_gain(sizes, skewed, even, model, scattered, 1.645, 0.05)
    # the same means, but periods that disagree by more than the gain: not applied
    slow = ServerModel((2e-9,) * 4, (1e-4,) * 4)
    quick = ServerModel((0.2e-9,) * 4, (1e-4,) * 4)
    noisy = {
        0: [_on_lines(slow, 0, probe, [0.0] * 3), _on_lines(quick, 0, probe, [0.0] * 3)],
        1: clean[1] * 2,
    }
    assert not clear_gain(sizes, [0, 0, 1, 1], [0, 1, 1, 1], model, noisy, 1.645, 0.05)
