"""What the claim sets written in code share (``reproduce_flexrr``, ``reproduce_psld``): a run spec, a
claim row, running the specs on a process pool with a per-run cache, and the printed and saved table.

Each finished run's metrics are written at once to ``<out>/runs/<key>.json``, so an interrupted
reproduction loses nothing and a rerun reuses what is there. (The cache key is the scenario and its
overrides, not the code: use a fresh ``--out`` after changing a simulator.)
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from clustertwin.atomic import write_json
from clustertwin.progress import progress_bar

Metrics = dict[str, float]


@dataclass(frozen=True)
class Spec:
    scenario: str  # file name under the claim set's scenario folder
    overrides: tuple[str, ...]

    @property
    def key(self) -> str:
        return hashlib.sha256(json.dumps([self.scenario, list(self.overrides)]).encode()).hexdigest()[:16]


@dataclass
class Row:
    id: str
    claim: str
    source: str
    paper: str
    ours: float
    accept: tuple[float, float] | None  # None: reported only
    fmt: str = "{:.2f}"
    # False: a paper claim outside the list; checked and printed (marked "(not gating)") but it
    # does not decide the exit status
    gate: bool = True

    @property
    def ok(self) -> bool | None:
        if self.accept is None:
            return None
        return self.accept[0] <= self.ours <= self.accept[1]


def run_claims(
    name: str,
    quick: bool,
    out: Path,
    seeds: list[int],
    specs: dict[str, Spec],
    simulate: Callable[[Spec], Metrics],
    make_rows: Callable[[dict[str, Metrics]], list[Row]],
    workers: int | None = None,
    first: Callable[[Spec], bool] = lambda spec: False,
) -> int:
    """Run (or reuse) every spec, print the claims table and save it as ``<out>/claims.json``; return 0
    when every checked gating claim holds, else 1. ``first`` marks the runs to start before the others
    (the longest, so that they do not finish last alone)."""
    cache = out / "runs"
    cache.mkdir(parents=True, exist_ok=True)
    done = {
        key: json.loads((cache / f"{key}.json").read_text())
        for key in specs
        if (cache / f"{key}.json").is_file()
    }
    pending = sorted((s for k, s in specs.items() if k not in done), key=lambda s: not first(s))
    with progress_bar(f"reproduce {name}") as progress:
        progress(len(done) / len(specs), f"{len(done)}/{len(specs)} runs")
        if pending:
            with ProcessPoolExecutor(workers or min(2, os.cpu_count() or 1)) as pool:
                futures = {pool.submit(simulate, spec): spec for spec in pending}
                for future in as_completed(futures):
                    spec = futures[future]
                    done[spec.key] = future.result()
                    record = {**done[spec.key], "spec": [spec.scenario, *spec.overrides]}
                    write_json(cache / f"{spec.key}.json", record)
                    progress(len(done) / len(specs), f"{len(done)}/{len(specs)} runs")
    return save_and_print(name, quick, out, seeds, make_rows(done))


def save_and_print(name: str, quick: bool, out: Path, seeds: list[int], rows: list[Row]) -> int:
    """Save ``rows`` atomically as ``<out>/claims.json``, print the table; return 0 when every checked
    claim with ``gate`` holds, else 1 (checked rows with ``gate`` False are printed, marked and saved,
    but do not decide). Claim sets that run no scenarios (``reproduce_pipedream``) call this directly."""
    out.mkdir(parents=True, exist_ok=True)
    claims = [
        {"id": r.id, "claim": r.claim, "source": r.source, "paper": r.paper, "ours": r.ours,
         "accept": list(r.accept) if r.accept else None, "ok": r.ok, "gate": r.gate}
        for r in rows
    ]  # fmt: skip
    write_json(out / "claims.json", {"name": name, "quick": quick, "seeds": seeds, "claims": claims})
    print_rows(rows, f"{name} claims (seeds {seeds}){' (quick)' if quick else ''}")
    if any(r.ok is not None and not r.gate for r in rows):
        print(
            "(not gating): paper claim outside the issue's list; reported with its reason in "
            f"docs/{name}.md, it does not decide the exit status"
        )
    print(f"results: {out / 'claims.json'}")
    return 0 if all(r.ok is not False for r in rows if r.gate) else 1


def print_rows(rows: Iterable[Row], title: str) -> None:
    table = Table(title=title)
    for column in ("claim", "paper", "ours", "tolerance", "ok"):
        table.add_column(column, justify="left" if column == "claim" else "right")
    for r in rows:
        if r.accept is None:
            tolerance = "reported"
        else:
            lo, hi = r.accept
            upper = "" if hi == float("inf") else f", {r.fmt.format(hi)}]"
            tolerance = f">= {r.fmt.format(lo)}" if not upper else f"[{r.fmt.format(lo)}{upper}"
        ok = "-" if r.ok is None else ("yes" if r.ok else "NO") + ("" if r.gate else " (not gating)")
        # escape: a source such as "[seed 004 §5]" or "[derived]" would otherwise be read as rich markup
        # and vanish from the printed table
        claim = escape(f"{r.id}: {r.claim} [{r.source}]")
        table.add_row(claim, escape(r.paper), r.fmt.format(r.ours), tolerance, ok)
    Console(width=max(Console().width, 160), file=sys.stdout).print(table)
