"""What a real run's timing samples mean to PSLD's scheduler, and the calibration's link rate.

The first GPU run (CHANGELOG.md, "Real runs on GPUs") timed every block from its push to its own pull.
That counts the wait behind every block the same PS served before it, so a loaded PS looked slow and an
empty one fast, and the scheduler moved the whole model from PS to PS every few reports, three times
onto the throttled PS. ``dequeued`` below (the second and third GPU runs' sample, since replaced in
the runtime) started a block's time when the PS could first serve it. These tests replay the scheduler
on a FIFO model of the runtime's pipeline (no processes), with the GPU scenario's blocks, configuration
and random stream.

The runtime's sample is now ``ps.shaped``, the simulator's own (push transfer + PS service + pull
transfer; ``tests/test_psld_sample_shape.py`` checks it on real processes). Its replay here models it as
a PS's service of the block plus, on the link-bound PS, both directions of its link.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from clustertwin.policies.psld.blocks import Block
from clustertwin.policies.psld.placement import loads_of
from clustertwin.policies.psld.profiling import Sample
from clustertwin.policies.psld.scheduler import PSLDScheduler
from clustertwin.runtime.psld.calibrate import Line, link_estimates, link_rate
from clustertwin.runtime.psld.run import build_job
from clustertwin.scenarios.load import load_scenario
from clustertwin.scenarios.psld_setup import scheduler_config
from hypothesis import given
from hypothesis import strategies as st

SCENARIO = "scenarios/psld-real-gpu.yaml"


def _timeline(blocks, owners, per_byte: dict[int, float], skew: float, fixed: float = 2e-3):
    """Push issue and pull completion of every block for one worker: each PS serves its blocks in block
    order, one after another, ``per_byte[r] * bytes + fixed`` each; the first waits ``skew`` longer for
    the other workers' pushes."""
    issued = {b.id: 0.0 for b in blocks}
    done, clock = {}, {}
    for b in blocks:
        r = owners[b.id]
        svc = per_byte[r] * b.nbytes + fixed
        clock[r] = clock.get(r, skew) + svc
        done[b.id] = clock[r]
    return issued, done


def dequeued(
    blocks: Sequence[Block], owners: Sequence[int], issued: dict[int, float], done: dict[int, float]
) -> list[float]:
    """The runtime's sample before ``runtime.psld.ps.shaped`` (the second and third GPU runs'): each
    block's time without its wait behind the same PS's earlier blocks of the iteration, from the later
    of its push and the previous block's pull (of the same PS, in block order, which is the order the
    PS serves them) to its own pull: the service time of a FIFO queue (departure - max(arrival,
    previous departure)).

    *Why it replaced the time from push issue:* that counts every block of the same PS served before
    it, so it grows with the PS's load and not with the block's bytes. Pred(r, s) = alpha s + beta
    fitted on that makes a PS look slow because it is loaded and fast because it is empty; the first GPU
    run (CHANGELOG.md, "Real runs on GPUs") moved the whole model between PSs every few reports, three
    times onto the throttled PS, which held only exploration blocks when it was measured. *Why it was
    replaced in turn:* a PS's first block still waited for the slowest worker's push, a later block
    held one pull's latency instead of a push's and a pull's, and a link-bound PS's block took one
    direction's transfer (the pipeline's spacing) where the simulator's takes both (``shaped``)."""
    out, last = [], {}
    for b in blocks:
        r = owners[b.id]
        start = issued[b.id] if r not in last else max(issued[b.id], last[r])
        out.append(done[b.id] - start)
        last[r] = done[b.id]
    return out


def test_a_dequeued_sample_does_not_grow_with_the_blocks_ahead() -> None:
    blocks = tuple(Block(i, i, i * 4096, 4096) for i in range(6))
    owners = (0, 0, 0, 0, 0, 1)
    issued, done = _timeline(blocks, owners, {0: 1e-6, 1: 1e-6}, skew=0.0)
    raw = [done[b.id] - issued[b.id] for b in blocks]
    assert raw[4] > 4 * raw[0]  # from push issue: PS 0's fifth block waits behind four
    times = dequeued(blocks, owners, issued, done)
    assert np.allclose(times, times[0])  # without the queue every same-size block takes the same


def _replay(
    sample_of: str, reports: int = 32, gain_test: str | None = None
) -> list[tuple[int, dict[int, float]]]:
    """The scheduler's decisions over ``reports`` reports of the GPU job (PS 2 at 1 Gbit/s, PSs 0 and 1
    bound by their CPU at 1.4 ns/B), with samples from push issue (``raw``), ``dequeued`` or ``shaped``
    (each block's own service, twice the link's per-byte time on the link-bound PS 2: in and out; no
    wait for the other workers' pushes)."""
    sc = load_scenario(SCENARIO, ["real.device=cpu"] + ([f"psld.gain_test={gain_test}"] if gain_test else []))
    job = build_job(sc)
    sizes = [b.nbytes for b in job.blocks]
    per_byte = {0: 1.4e-9, 1: 1.4e-9, 2: job.workers / 125e6}
    sched = PSLDScheduler(sizes, list(range(job.servers)), [], scheduler_config(sc))
    rng = np.random.default_rng(np.random.SeedSequence(list(job.seed)))
    noise = np.random.default_rng(1)
    owners = tuple(job.owners)
    decisions = []
    for report in range(1, reports + 1):
        samples = []
        for _ in range(job.report_every):
            for w in range(job.workers):
                issued, done = _timeline(job.blocks, owners, per_byte, skew=float(noise.uniform(0, 0.01)))
                if sample_of == "raw":
                    times = [done[b.id] - issued[b.id] for b in job.blocks]
                elif sample_of == "shaped":
                    times = [
                        (2 if owners[b.id] == 2 else 1) * per_byte[owners[b.id]] * b.nbytes + 2e-3
                        for b in job.blocks
                    ]
                else:
                    times = dequeued(job.blocks, owners, issued, done)
                for b, t in zip(job.blocks, times, strict=True):
                    jitter = float(np.exp(0.05 * noise.standard_normal()))
                    samples.append(Sample(w, owners[b.id], float(b.nbytes), t * jitter))
        sched.observe(samples)
        d = sched.decide(report, owners, rng)
        if d.owners is not None:
            owners = d.owners
            decisions.append((report, loads_of(sizes, owners)))
    return decisions


def test_dequeued_samples_unload_the_throttled_ps_once_and_settle() -> None:
    decisions = _replay("dequeued")
    model = sum(decisions[0][1].values())
    assert 1 <= len(decisions) <= 2
    # the throttled PS keeps at most exploration's share (epsilon / #PS of the bytes, with slack)
    assert all(loads.get(2, 0.0) <= 0.15 * model for _, loads in decisions)


def test_shaped_samples_unload_the_throttled_ps_once_and_settle() -> None:
    # the sample the runtime sends the scheduler now: the same outcome as with de-queued samples
    decisions = _replay("shaped")
    model = sum(decisions[0][1].values())
    assert 1 <= len(decisions) <= 2
    assert all(loads.get(2, 0.0) <= 0.15 * model for _, loads in decisions)


def test_samples_from_push_issue_make_the_scheduler_chase_the_emptiest_ps() -> None:
    # what the first GPU run did (under the point gain test of the time): from push issue, the samples
    # measure load, not speed
    decisions = _replay("raw", gain_test="point")
    assert len(decisions) >= 4
    model = sum(decisions[0][1].values())
    # everything on one PS, then on another: the map swings between single PSs
    assert max(loads.get(0, 0.0) for _, loads in decisions) > 0.9 * model
    assert max(loads.get(1, 0.0) for _, loads in decisions) > 0.9 * model


def test_link_rate_is_finite_when_the_link_is_not_the_bottleneck() -> None:
    W = 4
    significant = Line(slope=1e-9, slope_se=1e-11, intercept=0.02, window_s=0.05, load_bytes=15e6)
    assert math.isclose(link_rate(significant, W), W / 1e-9)
    flat = Line(slope=-1e-11, slope_se=1e-10, intercept=0.02, window_s=0.05, load_bytes=15e6)
    assert math.isclose(link_rate(flat, W), W / (-1e-11 + 2e-10))  # the slowest rate the data allows
    falling = Line(slope=-1e-9, slope_se=1e-11, intercept=0.02, window_s=0.05, load_bytes=15e6)
    assert math.isclose(link_rate(falling, W), W * 15e6 / 0.05)  # the rate it sustained
    for line in (significant, flat, falling):
        assert math.isfinite(link_rate(line, W)) and link_rate(line, W) > 0


def test_a_lower_bound_below_the_measured_rate_takes_the_measured_rate() -> None:
    # one PS measured, two only bounded far below it (the shape of the 1 x H200 ResNet-18 profiles)
    assert link_estimates((59.7, 12.3, 11.4), (False, True, True)) == (59.7, 59.7, 59.7)
    # a bound above the measured rates says that PS is at least that fast
    assert link_estimates((50.0, 70.0, 10.0), (False, True, True)) == (50.0, 70.0, 50.0)
    # with nothing measured the bounds are all there is
    assert link_estimates((12.0, 14.0), (True, True)) == (12.0, 14.0)


@given(
    st.lists(
        st.tuples(st.floats(1e-3, 1e4), st.booleans()),
        min_size=1,
        max_size=8,
    )
)
def test_link_estimates_keep_measurements_and_only_raise_bounds(per_ps: list[tuple[float, bool]]) -> None:
    rates, bounds = zip(*per_ps, strict=True)
    out = link_estimates(rates, bounds)
    measured = [r for r, b in per_ps if not b]
    assert len(out) == len(rates)
    for r, b, e in zip(rates, bounds, out, strict=True):
        assert e == r if not b else e >= r
        if b and measured:
            assert e >= min(measured)  # never below every measurement
