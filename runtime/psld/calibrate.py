"""Calibrate the PSLD simulator from a real profiling run: the runtime measures what the simulator needs
(docs/algorithms/psld.md, "Calibration").

The profiling run is the real job without its straggler, on PSLD's initial round-robin layout, with the
scheduler told never to act. Every simulator parameter set here is a measurement with a physical meaning;
nothing is fitted to make a throughput come out right:

* ``compute_s``: a worker's gradient computation per iteration (GPU: the host-to-device copy, the
  kernels and the device-to-host copy), median over workers and iterations. The simulator's worker
  computes that long, then pushes every block at once, as the runtime's worker does
  (``costs.worker_compute_s``).
* ``barrier_s``: the PREPARE barrier every iteration boundary costs (the broadcast of the plan, and every
  ``report_every`` iterations the gather of the samples), the mean gap between an iteration's last worker
  arriving and the next iteration's first worker leaving. The simulator has no such barrier, so it is
  added to the worker's compute. Its mean at reporting boundaries is the fixed part of a reassignment's
  pause (``costs.reassign_fixed_s``; the round trips are inside it, so ``control_rtt_s`` is 0).
* ``link_gbps`` (per PS, and their mean): how fast one process moves block bytes through gloo on this
  host. A worker issues every push at once and each PS serves its blocks in order, so a block's time
  (push issue to its own pull, [PSLD] §4.1's sample) grows with the bytes of that PS's blocks ahead of
  it in the same iteration; the slope of that line, per PS, is W / (the PS's rate), because the PS
  carries all W workers' copies of each block in each direction. The simulator gives every node a link
  of that rate per direction (``cluster.server_gbps``; workers run the same transport, so
  ``cluster.worker_gbps`` too): the per-node NIC model that the real host matches when each process has
  its own core. Where the slope is not significantly positive, the link does not bound that PS and the
  rate is the slowest the measurement allows (``link_rate``), never infinite, and is marked a lower
  bound (``link_gbps_per_ps_bound``: the true rate may be anything above it). The one rate the
  simulator gets (``link_gbps``) is the mean over PSs of ``link_estimates``: a measured rate as it is,
  a lower bound raised to the mean of the measured rates when it is below it (``link_estimates`` says
  why). The line is fitted on the
  raw times from push issue (``result.raw_samples``), whose growth with the bytes ahead is the PS's
  throughput; the scheduler gets the simulator's per-block samples (``ps.shaped``), which leave that
  queue out.
* ``latency_s``: half the line's zero-byte intercept (median over PSs): a block's fixed round-trip
  cost, split over its push and its pull (``costs.message_latency_s``). The per-message CPU cost is inside
  the measured slope and intercept, so ``costs.message_cpu_s`` is 0.
* ``sum_gbytes_per_s`` / ``update_gbytes_per_s``: the PSs' measured summing and (vanilla) SGD rates;
  a PS is one process on one thread, so ``cluster.server_cores`` is 1.
* ``algo_s_per_block_server``: Algorithm 3's run time on this host, for this model's blocks and PSs,
  divided by blocks x PSs (``costs.algo_s_per_block_server``).

* ``timing_noise``: the scatter of the scheduler's per-block samples (``result.samples``, ``ps.shaped``)
  around their typical value (``timing_noise``), in the units of the simulator's ``costs.timing_noise``
  (the sigma of a lognormal factor on every sample), fed to the simulator. Its scheduler then sees
  what the real one sees: samples with a spread, so Algorithm 1's confidence bounds have a width.
  Without it the simulated workers' lines are identical, every SEM is zero, and Algorithm 1 keeps one
  of two PSs that are physically the same (an exact tie is "confidently slower" under its ``>=``):
  on 1 x H200 with ResNet-18 every noiseless seed put the model on one PS at its first decision, where
  both real runs split it over the two unthrottled PSs (docs/algorithms/psld.md, "GPU experiments").
  The simulator's factor is independent per sample, while much of the real scatter is shared by one
  worker's blocks on one PS in one iteration; under the point gain test that made the simulated
  scheduler reassign 4-18 times where the real one did 1-2, which is why the noise was once withheld.
  The significance gain test (``policies.psld.stability``) holds the decision against that scatter:
  with the measured noise the simulated scheduler reassigns 1-2 times per seed, as the real one.

What is not calibrated: a straggler's value is the same number in both backends.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from clustertwin.policies.psld.placement import eps_greedy
from clustertwin.policies.psld.profiling import fit_model
from clustertwin.scenarios.results import RunResult

GBIT = 1e9 / 8  # bytes per second in one Gbit/s
# A PSLD scheduler that never acts (no variation is that large, no recheck).
FROZEN = ("psld.straggler_threshold=1000000000.0", "psld.recheck=false")
# The profiling run: PSLD's initial layout with no straggler, no planned removal and the scheduler never
# acting (scenario overrides, applied after the scenario's own).
PROFILE = ("policy=psld", "stragglers=[]", "regimes=null", "removals=[]", *FROZEN)


def _num(x: float) -> str:
    """A float as a YAML scalar that always reads back as a float (PyYAML reads 1e9 as a string)."""
    return f"{x:.6e}"


@dataclass(frozen=True)
class Calibration:
    """Simulator parameters measured on a real profiling run (see the module docstring)."""

    compute_s: float
    barrier_s: float
    report_barrier_s: float
    link_gbps: float
    link_gbps_per_ps: tuple[float, ...]
    # per PS: True where the rate is a lower bound (``link_is_bound``), not a measured slope
    link_gbps_per_ps_bound: tuple[bool, ...]
    latency_s: float
    sum_gbytes_per_s: float
    update_gbytes_per_s: float | None
    algo_s_per_block_server: float
    timing_noise: float

    def values(self) -> dict[str, float]:
        """The scenario fields (``section.field``) these measurements set, and their values."""
        out = {
            "cluster.worker_gbps": self.link_gbps,
            "cluster.server_gbps": self.link_gbps,
            "cluster.server_cores": 1.0,
            "costs.worker_compute_s": self.compute_s + self.barrier_s,
            "costs.message_latency_s": self.latency_s,
            "costs.message_cpu_s": 0.0,
            "costs.sum_gbytes_per_core_s": self.sum_gbytes_per_s,
            "costs.control_rtt_s": 0.0,
            "costs.reassign_fixed_s": self.report_barrier_s,
            "costs.algo_s_per_block_server": self.algo_s_per_block_server,
            "costs.timing_noise": self.timing_noise,
        }
        if self.update_gbytes_per_s is not None:
            out["costs.update_gbytes_per_core_s"] = self.update_gbytes_per_s
        return out

    def overrides(self) -> list[str]:
        """The scenario overrides (``--set key=value``) that give the simulator these parameters."""
        exact = {"cluster.server_cores": "1", "costs.message_cpu_s": "0", "costs.control_rtt_s": "0"}
        return [f"{k}={exact.get(k) or _num(v)}" for k, v in self.values().items()]

    def as_dict(self) -> dict:
        return {**asdict(self), "overrides": self.overrides()}


@dataclass(frozen=True)
class Line:
    """One PS's line of block time against the bytes of that PS's blocks up to and including the block
    (see ``per_ps_lines``): ``slope`` s/B with its standard error, ``intercept`` s, and ``window_s`` /
    ``load_bytes``: the median over worker iterations of the PS's slowest block time (push issue to the
    last pull of that PS) and the PS's bytes per iteration."""

    slope: float
    slope_se: float
    intercept: float
    window_s: float
    load_bytes: float


def per_ps_lines(result: RunResult, skip: int = 1) -> dict[int, Line]:
    """PS -> ``Line`` of block time (push issue to the block's own pull: ``result.raw_samples``) against
    the bytes of that PS's blocks up to and including the block in its iteration, over every worker and
    every iteration after the first ``skip`` (the first pays first-touch costs). The run must keep one
    layout (no reassignment)."""
    job = result.job  # type: ignore[attr-defined]
    samples = getattr(result, "raw_samples", None) or result.samples  # type: ignore[attr-defined]
    nb = len(job.blocks)
    cum = np.zeros(nb)
    seen: dict[int, float] = {}
    for b in job.blocks:  # the PS serves its blocks in block order
        r = job.owners[b.id]
        seen[r] = seen.get(r, 0.0) + b.nbytes
        cum[b.id] = seen[r]
    xs: dict[int, list[float]] = {}
    ys: dict[int, list[float]] = {}
    spans: dict[int, dict[tuple[int, int], float]] = {}
    per_worker: dict[int, list] = {}
    for s in samples:
        per_worker.setdefault(s.worker, []).append(s)
    for w, group in per_worker.items():
        for i, s in enumerate(group):
            if i // nb < skip:
                continue
            b = i % nb
            xs.setdefault(s.server, []).append(cum[b])
            ys.setdefault(s.server, []).append(s.seconds)
            key = (w, i // nb)
            span = spans.setdefault(s.server, {})
            span[key] = max(span.get(key, 0.0), s.seconds)
    out = {}
    for r in sorted(xs):
        x, y = np.asarray(xs[r]), np.asarray(ys[r])
        (slope, intercept), cov = np.polyfit(x, y, 1, cov="unscaled")
        resid = y - (slope * x + intercept)
        dof = max(1, len(x) - 2)
        se = float(np.sqrt(max(cov[0][0], 0.0) * float(resid @ resid) / dof))
        out[r] = Line(float(slope), se, float(intercept), float(np.median(list(spans[r].values()))), seen[r])
    return out


def link_rate(line: Line, workers: int) -> float:
    """A PS's transfer rate in bytes/s from its ``Line``: every block of the PS crosses its link once per
    worker, so a byte ahead of a block costs ``workers`` bytes of transfer, and the rate is
    ``workers / slope``.

    When the slope is not significantly above zero (slope < 2 standard errors: the bytes ahead of a
    block do not measurably delay it, so the link is not what bounds this PS at this load), the point
    estimate is meaningless (it was infinite or negative in the first GPU run). The rate is then the
    slowest one the measurement allows: ``workers / (slope + 2 se)`` if that bound is positive, and
    otherwise the rate the PS demonstrably sustained, ``workers x its bytes / its slowest block's time``
    (every byte it held crossed in that window, latency and waiting included, so it is a lower bound).
    Either way it is finite; ``link_estimates`` raises such a bound to the rate the other PSs measured
    when it is below it, and otherwise the simulator moves the PS's bytes no faster than the profiling
    run shows they moved."""
    if not link_is_bound(line):
        return workers / line.slope
    upper = line.slope + 2.0 * line.slope_se
    if upper > 0:
        return workers / upper
    return workers * line.load_bytes / max(line.window_s, 1e-9)


def link_is_bound(line: Line) -> bool:
    """Whether ``link_rate`` of ``line`` is a lower bound of the PS's rate (either fallback: the slope is
    not significantly above zero), not a measurement of it (``link_estimates`` treats it as one)."""
    return not (line.slope > 2.0 * line.slope_se and line.slope > 0)


def link_estimates(rates: Sequence[float], bounds: Sequence[bool]) -> tuple[float, ...]:
    """Each PS's best estimate of its link rate from ``link_rate``'s ``rates`` and ``link_is_bound``'s
    ``bounds``: a measured rate as it is; a lower bound raised to the mean of the measured rates when it
    is below that mean; every rate as it is when none was measured.

    *Why:* the profiling run's PSs are the same process on the same host, so a PS whose slope was
    significant measures the rate of all of them, and a bound below it says only that the rate is at
    least that, which the measured rate satisfies. Averaging a bound in as if it were a rate pulled the
    simulator's one link rate far below every measurement: on 1 x H200 (ResNet-18, 3 PSs) one PS
    measured 56-60 Gbit/s and two gave bounds of about 12, the mean fed was 26-28 Gbit/s, and the
    simulation with the real final map pinned was 3.9-6.8% slow (1.6-3.4% with the measured rate). A
    bound above the measured mean is kept: the data say that PS is at least that fast."""
    measured = [r for r, b in zip(rates, bounds, strict=True) if not b]
    if not measured:
        return tuple(rates)
    typical = float(np.mean(measured))
    return tuple(max(r, typical) if b else r for r, b in zip(rates, bounds, strict=True))


def calibrate(result: RunResult) -> Calibration:
    """Measure the simulator's parameters on ``result``, a real profiling run (``run_real``)."""
    info, measured, job = result.info, result.measured, result.job  # type: ignore[attr-defined]
    if len(result.tables["reassignments"]):
        raise ValueError("a profiling run must keep one layout; this one reassigned")
    W = int(info["workers"])
    compute = [t for per in measured["compute_s"] for t in per[1:]] or [
        t for per in measured["compute_s"] for t in per
    ]
    it = result.tables["iterations"].sort_values("iteration")
    gaps = (it["start_s"].to_numpy()[1:] - it["end_s"].to_numpy()[:-1]).clip(min=0.0)
    ks = it["iteration"].to_numpy()[1:]
    gaps, ks = gaps[ks >= 2], ks[ks >= 2]  # from the second boundary on (the first pays first touches)
    reporting = gaps[(ks % job.report_every) == 0] if job.report_every else gaps
    lines = per_ps_lines(result)
    rates = tuple(link_rate(line, W) / GBIT for line in lines.values())
    bounds = tuple(link_is_bound(line) for line in lines.values())
    link = float(np.mean(link_estimates(rates, bounds)))
    latency = max(0.0, float(np.median([line.intercept for line in lines.values()]))) / 2.0
    sum_rate = sum(measured["sum_bytes"]) / max(sum(measured["sum_s"]), 1e-12) / 1e9
    update = None
    if job.mode == "vanilla" and sum(measured["update_s"]) > 0:
        update = sum(measured["update_bytes"]) / sum(measured["update_s"]) / 1e9
    return Calibration(
        compute_s=float(np.median(compute)),
        barrier_s=float(np.mean(gaps)) if len(gaps) else 0.0,
        report_barrier_s=float(np.mean(reporting)) if len(reporting) else 0.0,
        link_gbps=link,
        link_gbps_per_ps=rates,
        link_gbps_per_ps_bound=bounds,
        latency_s=latency,
        sum_gbytes_per_s=float(sum_rate),
        update_gbytes_per_s=update,
        algo_s_per_block_server=algorithm3_seconds(result) / (len(job.blocks) * job.servers),
        timing_noise=timing_noise(
            [s.worker for s in result.samples],  # type: ignore[attr-defined]
            [s.server for s in result.samples],  # type: ignore[attr-defined]
            [s.seconds for s in result.samples],  # type: ignore[attr-defined]
            len(job.blocks),
        ),
    )


def timing_noise(
    workers: Sequence[int], servers: Sequence[int], seconds: Sequence[float], blocks: int, skip: int = 1
) -> float:
    """The sigma of the multiplicative scatter of a run's per-block timing samples, as the simulator's
    ``costs.timing_noise`` means it (every sample times ``exp(sigma z - sigma^2 / 2)``, z standard
    normal): the robust spread (MAD x 1.4826, which is sigma for a normal) of ``log(sample)`` around the
    median of its (PS, worker, block) over the run's iterations, pooled over every PS.

    The samples come in each worker's order, iteration-major and in block order (``result.samples``,
    ``samples_frame``), ``blocks`` per iteration on one layout; the first ``skip`` iterations (first
    touches) are left out when later ones exist. Why (PS, worker, block): on one layout a block's time
    differs between blocks (the bytes ahead of it) and between workers (their order in the PS's queue),
    and the simulator computes those differences itself; what is left over the iterations is the jitter
    it does not model. Why pooled: in a profiling run the PSs are identical processes with no straggler,
    so one sigma serves them all, as the simulator's one ``costs.timing_noise`` does. Why robust: a
    first-touch or descheduled sample is an outlier of a different kind, and MAD ignores a few of them.
    Samples of zero or less (no log) and (PS, worker, block) groups of one sample (no spread) are left
    out; 0.0 if nothing is left.

    The simulator draws its factor independently for every sample; the real scatter is not independent
    (on the 4-H100 runs most of it is shared by one worker's blocks on one PS in one iteration: about
    0.2 of the 0.39-0.48 is left per sample around that shared part), so this sigma gives the simulated
    scheduler the right spread per sample, not the right correlation (docs/algorithms/psld.md,
    "Calibration")."""
    w = np.asarray(workers, dtype=int)
    y = np.asarray(seconds, dtype=float)
    position = np.zeros(len(w), dtype=int)  # the sample's index in its worker's sequence
    for x in np.unique(w):
        position[w == x] = np.arange(int((w == x).sum()))
    keep = y > 0
    if (keep & (position // blocks >= skip)).any():
        keep &= position // blocks >= skip
    keys = np.stack([np.asarray(servers, dtype=int), w, position % blocks], axis=1)[keep]
    if len(keys) == 0:
        return 0.0
    logs = np.log(y[keep])
    _, group, count = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
    group = group.reshape(-1)
    order = np.argsort(group, kind="stable")
    medians = np.array([np.median(part) for part in np.split(logs[order], np.cumsum(count)[:-1])])
    deviation = np.abs(logs - medians[group])[count[group] > 1]
    return float(1.4826 * np.median(deviation)) if len(deviation) else 0.0


def algorithm3_seconds(result: RunResult, repeats: int = 3) -> float:
    """Algorithm 3's run time on this host for the run's blocks and PSs, with the PS models fitted on
    the run's own samples (median of ``repeats``)."""
    job = result.job  # type: ignore[attr-defined]
    model = fit_model(result.samples)  # type: ignore[attr-defined]
    servers = sorted(model)
    sizes = [float(b.nbytes) for b in job.blocks]
    rng = np.random.default_rng(0)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        eps_greedy(sizes, servers, servers, model, 0.1, rng)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


__all__ = [
    "FROZEN",
    "PROFILE",
    "Calibration",
    "Line",
    "algorithm3_seconds",
    "calibrate",
    "link_estimates",
    "link_is_bound",
    "link_rate",
    "per_ps_lines",
    "timing_noise",
]
