"""The simulations behind a claim set (``reproduce``, ``reproduce_flexrr``, ``reproduce_psld``): a run spec
and running the specs on a process pool with a per-run cache (the rows they make: ``claim_results``).

Each finished run's metrics are written at once to ``<out>/runs/<key>.json``, so an interrupted
reproduction loses nothing and a rerun reuses what is there. The key is the scenario and its overrides;
each file also records the code that made it (`code_fingerprint`), and a run made by other code is run
again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path

from clustertwin.atomic import write_json
from clustertwin.claim_results import ClaimRow
from clustertwin.code_fingerprint import code_fingerprint
from clustertwin.progress import progress_bar
from clustertwin.solver_banner import silence_solver_banner

Metrics = dict[str, float]


@dataclass(frozen=True)
class Spec:
    scenario: str  # a scenario file, as the claim set's ``simulate`` resolves it
    overrides: tuple[str, ...]

    @property
    def label(self) -> str:
        """The scenario's file name and overrides, as a progress line names the run."""
        return " ".join([Path(self.scenario).stem, *self.overrides])

    @property
    def key(self) -> str:
        return hashlib.sha256(json.dumps([self.scenario, list(self.overrides)]).encode()).hexdigest()[:16]


def run_specs(
    name: str,
    out: Path,
    specs: dict[str, Spec],
    simulate: Callable[[Spec], Metrics],
    workers: int | None = None,
    first: Callable[[Spec], bool] = lambda spec: False,
) -> dict[str, Metrics]:
    """Run (or reuse from ``<out>/runs``) every spec on ``workers`` processes (default: up to two); return
    each one's metrics by its key. ``first`` marks the runs to start before the others (the longest, so
    that they do not finish last alone)."""
    cache = out / "runs"
    cache.mkdir(parents=True, exist_ok=True)
    code = code_fingerprint()
    done, stale = {}, 0
    for key in specs:
        if (cache / f"{key}.json").is_file():
            record = json.loads((cache / f"{key}.json").read_text())
            if record.get("code") == code:
                done[key] = record
            else:
                stale += 1
    pending = sorted((s for k, s in specs.items() if k not in done), key=lambda s: not first(s))
    with progress_bar(f"reproduce {name}", lines=True) as progress:
        note = f"; {stale} kept runs were made by other code and run again" if stale else ""
        progress(len(done) / max(len(specs), 1), f"{len(done)}/{len(specs)} runs{note}")
        if pending:
            processes = workers or min(2, os.cpu_count() or 1)
            with ProcessPoolExecutor(processes, initializer=silence_solver_banner) as pool:
                futures = {pool.submit(simulate, spec): spec for spec in pending}
                for future in as_completed(futures):
                    spec = futures[future]
                    done[spec.key] = future.result()
                    record = {**done[spec.key], "spec": [spec.scenario, *spec.overrides], "code": code}
                    write_json(cache / f"{spec.key}.json", record)
                    progress(len(done) / len(specs), f"{len(done)}/{len(specs)} runs; done: {spec.label}")
    return done


def with_per_seed(
    rows: list[ClaimRow],
    make_rows: Callable[[dict[str, Metrics]], list[ClaimRow]],
    done: dict[str, Metrics],
    specs: dict[str, Spec],
    seeds: list[int],
) -> list[ClaimRow]:
    """``rows`` (made from every seed's runs) with each claim's value per seed: ``make_rows`` again on
    the runs of one seed, each run standing in for all its seeds."""
    unseeded = {
        key: (s.scenario, tuple(o for o in s.overrides if not o.startswith("seed=")))
        for key, s in specs.items()
    }
    by_seed = {(unseeded[key], _seed(s)): key for key, s in specs.items()}
    values: dict[str, list[float]] = {r.id: [] for r in rows}
    for seed in seeds:
        one_seed = {key: done[by_seed[(unseeded[key], seed)]] for key in specs}
        for r in make_rows(one_seed):
            values[r.id].append(r.ours)
    return [replace(r, per_seed=tuple(values[r.id])) for r in rows]


def _seed(spec: Spec) -> int:
    return next(int(o.removeprefix("seed=")) for o in spec.overrides if o.startswith("seed="))
