"""Replay a real PSLD run's recorded block samples through the shared ``PSLDScheduler``.

    python -m experiments.psld_replay [--from DIR] [--json OUT] [--set FIELD=VALUE ...] [--verbose]

``--set`` changes a field of the run's ``SchedulerConfig`` (e.g. ``--set min_gain=0``: apply every
Algorithm 3 result, as the paper does), to see what the scheduler would have decided on these samples.

DIR (default ``results/psld-gpu-fifth/run3``, the first GPU run with today's
policy code; the third GPU run, ``results/psld-gpu-run3``, ran before the fit of a
negative slope changed and now diverges at its first report) holds what
``experiments.psld_gpu`` wrote: ``results.json`` (the scenario and its overrides) and
``real_samples.parquet`` (every block sample of the real runs, worker by worker, iteration by
iteration, block by block, the order ``runtime.psld.run`` returns them in). The replay rebuilds the
run's ``Job`` (blocks, initial round-robin map, ``SchedulerConfig``, the scheduler's random stream) and
hands the scheduler, at every PREPARE of iteration ``k`` with ``k % report_every == 0``, the samples of
the previous ``report_every`` iterations, as ``runtime.psld.ps.Control.plan`` did.

**Exact while the maps agree.** As long as the replayed scheduler's map is the map the run used (each
sample's ``server`` records it), the samples are the recorded ones, so the replay reproduces the run's
reports and decisions (with the code the run had).

**An approximation after they diverge.** Once the replay applies a map the run never used, nobody
measured its blocks on their new PSs. A block whose replayed owner is the recorded one keeps its
recorded sample; any other block gets a *substitute*: a recorded sample of the same worker, the same PS
and the same size, drawn (seeded) from the runs in which that PS ran as it did in the PSLD run (PS 2
throttled: ``real_psld`` and ``real_mxnet``; the others: ``real_psld`` and ``real_profiling``). A size
that PS never served gets the PS's least-squares line over those samples times a resampled relative
residual. Substitutes carry the PS's speed but not the load or the queueing of the new map, so
after the divergence the replay shows what the scheduler *decides* from plausible samples, not what
the run would have measured: it can show a lock breaking (a PS getting blocks of a second size and
being readmitted to the superior set), not predict throughput.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # python experiments/psld_replay.py from anywhere
    sys.path.insert(0, str(ROOT))

from clustertwin.policies.psld.placement import loads_of  # noqa: E402
from clustertwin.policies.psld.profiling import Sample  # noqa: E402
from clustertwin.policies.psld.scheduler import PSLDScheduler, SchedulerConfig  # noqa: E402

from experiments.psld_gpu import recorded_overrides  # noqa: E402

DEFAULT_DIR = ROOT / "results" / "psld-gpu-fifth" / "run3"


@dataclass
class Report:
    """One report of the replay: the decision and the profile it was made on."""

    k: int
    report: int
    action: str
    moved_bytes: float  # bytes the decision moved to another PS
    superior: tuple[int, ...]
    variation: float
    pred_ref_s: dict[int, float]
    sizes_seen: dict[int, int]  # distinct block sizes in each PS's history window
    loads: dict[int, float]  # bytes per PS under the map after the decision
    exact: bool  # every sample of this report was a recorded one


@dataclass
class Replay:
    """The replay's reports, where the maps diverged and how many samples were substituted."""

    reports: list[Report] = field(default_factory=list)
    diverged_at_k: int | None = None
    substituted: int = 0
    extrapolated: int = 0
    total: int = 0

    def readmitted(self, server: int) -> list[int]:
        """Iterations ``k`` of the reports where ``server`` is in the superior set after being out."""
        out, was_in = [], True
        for rep in self.reports:
            now_in = server in rep.superior
            if now_in and not was_in:
                out.append(rep.k)
            was_in = now_in
        return out


class Substitutes:
    """Recorded samples to stand in for a block on a PS the run never gave it (see the docstring)."""

    def __init__(self, frame: Any, throttled: Sequence[int], seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.pool: dict[tuple[int, int, float], np.ndarray] = {}
        self.lines: dict[int, tuple[float, float, np.ndarray]] = {}
        for server in sorted(set(frame.server)):
            runs = ("real_psld", "real_mxnet") if server in throttled else ("real_psld", "real_profiling")
            mine = frame[(frame.server == server) & frame.run.isin(runs)]
            for (worker, nbytes), group in mine.groupby(["worker", "nbytes"]):
                self.pool[(int(server), int(worker), float(nbytes))] = group.seconds.to_numpy()
            x, y = mine.nbytes.to_numpy(float), mine.seconds.to_numpy(float)
            alpha, beta = np.polyfit(x, y, 1) if len(set(x)) > 1 else (0.0, float(y.mean()))
            alpha, beta = max(float(alpha), 0.0), max(float(beta), 0.0)
            fitted = np.maximum(alpha * x + beta, 1e-9)
            self.lines[int(server)] = (alpha, beta, y / fitted)

    def draw(self, worker: int, server: int, nbytes: float) -> tuple[float, bool]:
        """A substitute time and whether it was extrapolated from the PS's line."""
        pool = self.pool.get((server, worker, float(nbytes)))
        if pool is not None and len(pool):
            return float(pool[self.rng.integers(len(pool))]), False
        alpha, beta, ratios = self.lines[server]
        return float((alpha * nbytes + beta) * ratios[self.rng.integers(len(ratios))]), True


def _run_job(folder: Path) -> tuple[Any, Any]:
    """The scenario and ``runtime.psld.run.Job`` of the PSLD run recorded in ``folder`` (on the CPU:
    the replay needs its blocks, map and scheduler, not its devices)."""
    from clustertwin.runtime.psld.run import build_job
    from clustertwin.scenarios.load import load_scenario

    results = json.loads((folder / "results.json").read_text())
    overrides = [o for o in recorded_overrides(results["overrides"]) if not o.startswith("real.device")]
    scenario = load_scenario(ROOT / results["scenario"], [*overrides, "real.device=cpu", "policy=psld"])
    return scenario, build_job(scenario)


def replay(folder: Path = DEFAULT_DIR, config: SchedulerConfig | None = None) -> Replay:
    """Replay the PSLD run recorded in ``folder``; ``config`` (a ``SchedulerConfig``) replaces the
    run's scheduler configuration when given."""
    import pandas as pd

    scenario, job = _run_job(folder)
    frame = pd.read_parquet(folder / "real_samples.parquet")
    psld = frame[frame.run == "real_psld"]
    W, B = job.workers, len(job.blocks)
    iterations = len(psld) // (W * B)
    if iterations * W * B != len(psld):
        raise ValueError(f"{len(psld)} samples are not whole iterations of {W} workers x {B} blocks")
    # recorded[w, i, b]: (server, seconds); the run's map at iteration i is recorded[0, i, :, server]
    servers = psld.server.to_numpy().reshape(W, iterations, B)
    seconds = psld.seconds.to_numpy().reshape(W, iterations, B)
    nbytes = psld.nbytes.to_numpy().reshape(W, iterations, B)
    if not (nbytes == np.asarray([float(b.nbytes) for b in job.blocks])).all():
        raise ValueError("the recorded block sizes are not the job's blocks in order")
    throttled = [s.server for s in scenario.stragglers]
    subs = Substitutes(frame, throttled)
    sched = PSLDScheduler(
        [b.nbytes for b in job.blocks],
        list(range(job.servers)),
        list(range(job.servers, job.servers + job.standby)),
        config if config is not None else job.scheduler,
    )
    rng = np.random.default_rng(np.random.SeedSequence(list(job.seed)))
    owners = tuple(job.owners)
    out = Replay()
    period: list[tuple[int, tuple[int, ...]]] = []  # (iteration, map it ran with)
    for k in range(iterations):
        if k > 0 and k % job.report_every == 0:
            samples: list[Sample] = []
            exact = True
            for w in range(W):
                for i, ran in period:
                    for b in range(B):
                        r = ran[b]
                        out.total += 1
                        if r == servers[w, i, b]:
                            t = float(seconds[w, i, b])
                        else:
                            exact = False
                            out.substituted += 1
                            t, extrapolated = subs.draw(w, r, float(nbytes[w, i, b]))
                            out.extrapolated += int(extrapolated)
                        samples.append(Sample(w, r, float(nbytes[w, i, b]), t))
            period = []
            sched.observe(samples)
            decision = sched.decide(k // job.report_every, owners, rng)
            moved = 0.0
            if decision.owners is not None:
                moved = sum(s for s, a, b in zip(sched.sizes, owners, decision.owners, strict=True) if a != b)
                owners = tuple(decision.owners)
            ref = float(sum(sched.sizes)) / max(1, len(sched.active))
            out.reports.append(
                Report(
                    k=k,
                    report=k // job.report_every,
                    action=decision.action,
                    moved_bytes=float(moved),
                    superior=tuple(decision.superior),
                    variation=decision.variation,
                    pred_ref_s={r: m.mean(ref) for r, m in sorted(sched.model().items())},
                    sizes_seen={
                        r: len({x.nbytes for rep in hist for x in rep}) for r, hist in sched.history.items()
                    },
                    loads=loads_of(sched.sizes, owners),
                    exact=exact,
                )
            )
        period.append((k, owners))
        if out.diverged_at_k is None and any(owners[b] != servers[0, k, b] for b in range(B)):
            out.diverged_at_k = k
    return out


def run_config(folder: Path) -> SchedulerConfig:
    """The scheduler configuration of the run recorded in ``folder``."""
    return _run_job(folder)[1].scheduler


def config_with(folder: Path, sets: Sequence[str]) -> SchedulerConfig:
    """The run's ``SchedulerConfig`` with ``FIELD=VALUE`` changes (values parsed as the field's type)."""
    import dataclasses

    config = run_config(folder)
    fields = {f.name: type(getattr(config, f.name)) for f in dataclasses.fields(config)}
    changes: dict[str, Any] = {}
    for item in sets:
        name, sep, value = item.partition("=")
        if not sep or name not in fields:
            raise SystemExit(f"--set {item}: expected FIELD=VALUE with FIELD one of {', '.join(fields)}")
        kind = fields[name]
        changes[name] = value.lower() in ("1", "true", "yes") if kind is bool else kind(value)
    return dataclasses.replace(config, **changes)


def summary(result: Replay) -> dict[str, Any]:
    """A JSON-able digest of a replay."""
    return {
        "reports": len(result.reports),
        "decisions": sum(r.action != "none" for r in result.reports),
        "first_decisions": [
            (r.k, r.action, round(r.moved_bytes / 1e6, 3)) for r in result.reports if r.action != "none"
        ][:8],
        "moved_mb": sum(r.moved_bytes for r in result.reports) / 1e6,
        "diverged_at_k": result.diverged_at_k,
        "ps0_readmitted_at_k": result.readmitted(0)[:10],
        "ps0_in_superior": sum(0 in r.superior for r in result.reports),
        "substituted_samples": result.substituted,
        "extrapolated_samples": result.extrapolated,
        "total_samples": result.total,
        "final_loads_mb": {str(r): v / 1e6 for r, v in sorted(result.reports[-1].loads.items())},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="folder", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--json", type=Path, help="write the summary here too")
    parser.add_argument("--verbose", action="store_true", help="print every report")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="FIELD=VALUE")
    args = parser.parse_args(argv)
    result = replay(args.folder, config_with(args.folder, args.sets) if args.sets else None)
    if args.verbose:
        for r in result.reports:
            preds = " ".join(f"{s}:{t:.4g}" for s, t in r.pred_ref_s.items())
            loads = " ".join(f"{s}:{v / 1e6:.1f}" for s, v in sorted(r.loads.items()))
            print(
                f"k={r.k:3d} {r.action:9s} "
                f"moved={r.moved_bytes / 1e6:5.1f}MB sup={r.superior} var={r.variation:.3g} "
                f"pred_ref[{preds}] "
                f"sizes={r.sizes_seen} MB[{loads}] {'exact' if r.exact else 'substituted'}"
            )
    digest = summary(result)
    print(json.dumps(digest, indent=1))
    if args.json:
        args.json.write_text(json.dumps(digest, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
