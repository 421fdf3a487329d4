"""PipeDream schedules for real on GPUs next to the calibrated simulator.

    python -m experiments.pipedream_gpu run --out DIR [--gpus 2,4] [--quick] [--device cpu]
    python -m experiments.pipedream_gpu report --from DIR
    python -m experiments.pipedream_gpu resimulate --from DIR --out NEW

``run`` (on the GPU machine; ``--device cpu`` runs the same code at a tiny size with gloo):

1. **Profile** the GPT workload (``runtime/pipedream/gpt.py``) layer by layer on one device with
   ``runtime.pipedream.profiler.profile_layers``: forward/backward time, output, held (saved for the
   backward) and transient bytes, SGD-update time per layer ([Narayanan] §2.4.1's profiler, plus what the
   memory model of §3.3.3 needs). Times are CUDA-event intervals (on CPU the host clock) over
   back-to-back iterations, as the pipeline runs them (``time_back_to_back``). As a cross-check
   (reported, not used), every chunk of the runs' cuts is also timed whole (``profile_chunks``) next
   to the sum of its layers.
2. For each GPU count: spawn one process per GPU once (NCCL on ``cuda:rank``) and in it
   - probe the rank 0 → 1 link (latency and bandwidth of NCCL send/recv);
   - run every schedule (GPipe, Flush, 2BW, PipeDream 1F1B, interleaved v=2) on our runtime
     (``runtime.pipedream.distributed``): warm-up, then a timed run; throughput and
     ``max_memory_allocated`` per rank;
   - run ``torch.distributed.pipelining``'s GPipe, 1F1B (= Flush) and interleaved 1F1B on the same
     chunk modules, measured the same way.
3. **Simulate** the timed run's exact op lists (``sim.pipedream.executor.simulate``) with chunk costs
   summed from the profile over the real chunking, the probed link, and the memory model of SGD
   without momentum (gradient buffer 1x weights, no optimizer state, alive from the first backward
   after an update to the update, as in the runtime); the predicted peak adds the largest transient
   of the device's layers to the simulated peak.

Writes to DIR (5 files): ``graph.txt`` (the profile in PipeDream's format), ``profile.json``
(per-layer extras, the chunk cross-check, link probes, settings), ``results.csv`` (ours, real vs
simulated, one row per GPU count and schedule), ``baseline.csv`` (ours vs
torch.distributed.pipelining), ``results.json`` (everything, for ``report``), and ``ops.csv`` (the op
table of one timed run). ``report`` prints the markdown tables of docs/algorithms/pipedream.md,
"Fidelity". ``resimulate`` recomputes the simulated columns of DIR's run from its saved profile with the
current simulator (no GPU) and writes ``results.json``, ``results.csv`` and ``report.md`` (plus copies
of the other files) to NEW.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch
from clustertwin.runtime.launch import RankFailure, launch
from clustertwin.runtime.pipedream.bench import INTERLEAVE, BenchSettings, bench_schedule, rank_main
from clustertwin.runtime.pipedream.gpt import (
    GPU,
    TINY,
    GPTConfig,
    GPTWorkload,
    chunk_layers,
    gpt_sequential,
    lm_loss,
)
from clustertwin.runtime.pipedream.profiler import profile_chunks, profile_layers, to_graph_txt
from clustertwin.sim.pipedream.executor import simulate
from clustertwin.sim.pipedream.model import ChunkCost, Device, MemoryModel, Network

from clustertwin.atomic import write_text

GIB = 2.0**30
SEED = 0
OURS_VS_TORCH = ("gpipe", "flush", "interleaved")


def setup(device: str, quick: bool) -> tuple[GPTConfig, BenchSettings, int]:
    """Model, benchmark settings and profiler iterations for the device (see the module docstring)."""
    if device == "cpu":
        return replace(TINY, microbatch=2), BenchSettings(microbatches=4, warmup=1, steps=2, lr=0.01), 2
    if quick:
        config = replace(GPU, hidden=1024, layers=8)
        return config, BenchSettings(warmup=1, steps=3), 3
    return GPU, BenchSettings(), 10


def profile(
    config: GPTConfig, device: torch.device, iterations: int, chunkings: tuple[int, ...] = ()
) -> dict:
    """Per-layer profile of the whole model on one device (``profile_layers``), as a dict; with
    ``chunkings``, also each chunk of those cuts timed whole (``profile_chunks``), next to the sum of
    its layers' times: a cross-check reported in ``profile.json`` under ``chunks``, not used to fit."""
    workload = GPTWorkload(config, SEED)
    model = gpt_sequential(config, SEED, device)
    tokens, targets = workload.microbatch(0, device)
    if device.type == "cpu":
        torch.set_num_threads(1)  # as each rank runs
    prof = profile_layers(model, tokens, iterations, 2, "gpt", loss=(lm_loss, targets))
    out = prof.to_dict()
    out["graph_txt"] = to_graph_txt(prof.profile)
    layers = out["layers"]
    out["chunks"] = {}
    for n in sorted(set(chunkings)):
        cuts = [chunk_layers(config, n, i) for i in range(n)]
        # timing a chunk's backward holds iterations + warmup graphs of it at once: at most 4 + 1
        timed = profile_chunks(model, tokens, cuts, min(iterations, 4), 1, loss=(lm_loss, targets))
        for row in timed:
            group = layers[row["first_layer"] : row["last_layer"] + 1]
            for key in ("forward_s", "backward_s"):
                row[f"layers_{key}"] = sum(g[key] for g in group)
                row[f"layers_over_chunk_{key.removesuffix('_s')}"] = (
                    row[f"layers_{key}"] / row[key] if row[key] else math.nan
                )
        out["chunks"][str(n)] = timed
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def spawn(world: int, backend: str, workload: GPTWorkload, settings: BenchSettings, timeout_s: float) -> list:
    """Run ``bench.rank_main`` on ``world`` ranks; return (per-rank results, kept op rows)."""
    with tempfile.TemporaryDirectory(prefix="pipedream-gpu-") as tmp:
        failure = None
        try:
            launch(rank_main, world, (backend, workload, settings, tmp), limit_s=timeout_s)
        except RankFailure as err:  # a rank died or the limit passed; what the ranks saved is still used
            failure = str(err)
            print(f"WARNING: the {world}-rank configuration failed: {failure}", file=sys.stderr, flush=True)
        paths = [Path(tmp, f"rank{r}.json") for r in range(world)]
        if not all(p.exists() for p in paths):
            raise RuntimeError(f"the {world}-rank configuration saved no results ({failure})")
        ranks = [json.loads(p.read_text()) for p in paths]
        ops = []
        for r in range(world):
            path = Path(tmp, f"ops{r}.pt")
            if path.exists():
                ops += torch.load(path)
    return [ranks, ops]


def chunk_costs(prof: dict, config: GPTConfig, chunks: int, batch_microbatches: int) -> list[ChunkCost]:
    """Per-chunk costs summed from the profile over the real chunking (``gpt.chunk_layers``).

    Our runtime accumulates each backward's gradients into a buffer (one add of weight size) for all but
    the first microbatch of an update, and every ``W`` is one SGD step of the chunk's weights; both cost
    the profiled ``update_s`` (same memory traffic)."""
    layers = prof["layers"]
    accumulate = (batch_microbatches - 1) / batch_microbatches
    costs = []
    for i in range(chunks):
        idx = list(chunk_layers(config, chunks, i))
        group = [layers[j] for j in idx]
        update = sum(g["update_s"] for g in group)
        costs.append(
            ChunkCost(
                forward_s=sum(g["forward_s"] for g in group),
                backward_s=sum(g["backward_s"] for g in group) + accumulate * update,
                parameter_bytes=sum(g["parameter_bytes"] for g in group),
                activation_bytes=sum(g["held_bytes"] for g in group),
                input_bytes=layers[idx[0] - 1]["output_bytes"] if i > 0 else 0.0,
                output_bytes=group[-1]["output_bytes"] if i < chunks - 1 else 0.0,
                update_s=update,
            )
        )
    return costs


def simulate_schedule(
    prof: dict, config: GPTConfig, settings: BenchSettings, name: str, world: int, link: dict
) -> dict:
    """Throughput and per-device peak memory the simulator predicts for the timed run."""
    schedule = bench_schedule(name, world, settings.microbatches, settings.steps)
    costs = chunk_costs(prof, config, schedule.num_chunks, schedule.batch_microbatches)
    network = Network(intra_bandwidth=link["bandwidth_Bps"], intra_latency=link["latency_s"])
    devices = [Device(server=0) for _ in range(world)]
    # SGD without momentum: one gradient buffer per chunk, no optimizer state; the buffer lives from the
    # first backward after an update to the update, as in the runtime (``MemoryModel.gradient_buffer``).
    memory = MemoryModel(gradient_factor=1.0, optimizer_factor=0.0, gradient_buffer="per_update")
    out = simulate(schedule, costs, devices, network, memory)
    transient = []
    for worker in schedule.workers:
        idx = [j for c in worker.chunks for j in chunk_layers(config, schedule.num_chunks, c)]
        transient.append(max(prof["layers"][j]["transient_bytes"] for j in idx))
    samples = schedule.num_microbatches * config.microbatch
    peaks = [out.peak_memory[w.device] + t for w, t in zip(schedule.workers, transient, strict=True)]
    return {"samples": samples, "makespan_s": out.makespan_s, "peak_bytes": peaks}


def rel_error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured if measured else math.nan


def order(values: dict[str, float]) -> list[str]:
    return sorted(values, key=lambda k: -values[k])


def kendall_tau(a: list[str], b: list[str]) -> float:
    """Kendall's tau between two orderings of the same items (1: identical, -1: reversed)."""
    pos = {k: i for i, k in enumerate(b)}
    n = len(a)
    if n < 2:
        return 1.0
    concordant = sum(1 if (pos[a[i]] < pos[a[j]]) else -1 for i in range(n) for j in range(i + 1, n))
    return concordant / (n * (n - 1) / 2)


def analyse(prof: dict, config: GPTConfig, settings: BenchSettings, world: int, ranks: list) -> dict:
    """Rows (ours real vs sim, ours vs torch) and rankings for one GPU count."""
    link = ranks[1]["link"] if world >= 2 else {"latency_s": 0.0, "bandwidth_Bps": math.inf}
    real: dict[tuple[str, str], dict] = {}
    for runtime_schedule in [(r["runtime"], r["schedule"]) for r in ranks[0]["runs"]]:
        per_rank = [
            next((x for x in rank["runs"] if (x["runtime"], x["schedule"]) == runtime_schedule), None)
            for rank in ranks
        ]
        if any(x is None or "error" in x for x in per_rank):  # failed or unfinished on some rank
            errors = {x["error"] for x in per_rank if x is not None and "error" in x}
            print(f"WARNING: {world} GPUs, {runtime_schedule}: not measured {errors or ''}", file=sys.stderr)
            continue
        wall = max(x["wall_s"] for x in per_rank)
        real[runtime_schedule] = {
            "samples_per_s": per_rank[0]["samples"] / wall,
            "wall_s": wall,
            "peak_bytes": [x["peak_bytes"] for x in per_rank],
        }
    rows = [
        compare(prof, config, settings, world, link, name, real[("ours", name)])
        for name in settings.schedules
        if ("ours", name) in real
    ]
    baseline = []
    for name in OURS_VS_TORCH:
        if ("torch", name) in real and ("ours", name) in real:
            ours, theirs = real[("ours", name)], real[("torch", name)]
            baseline.append(
                {
                    "gpus": world,
                    "schedule": name,
                    "ours_samples_per_s": ours["samples_per_s"],
                    "torch_samples_per_s": theirs["samples_per_s"],
                    "speedup": ours["samples_per_s"] / theirs["samples_per_s"],
                    "ours_peak_gib": max(ours["peak_bytes"]) / GIB,
                    "torch_peak_gib": max(theirs["peak_bytes"]) / GIB,
                }
            )
    return {"gpus": world, "link": link, "rows": rows, "baseline": baseline, "ranking": ranking(rows)}


def compare(
    prof: dict, config: GPTConfig, settings: BenchSettings, world: int, link: dict, name: str, measured: dict
) -> dict:
    """One results row: the measured run (samples/s, wall, per-rank peak bytes) next to the simulator."""
    sim = simulate_schedule(prof, config, settings, name, world, link)
    sim_tput = sim["samples"] / sim["makespan_s"]
    real_peak, sim_peak = max(measured["peak_bytes"]), max(sim["peak_bytes"])
    return {
        "gpus": world,
        "schedule": name,
        "real_samples_per_s": measured["samples_per_s"],
        "sim_samples_per_s": sim_tput,
        "throughput_error": rel_error(sim_tput, measured["samples_per_s"]),
        "real_peak_gib": real_peak / GIB,
        "sim_peak_gib": sim_peak / GIB,
        "peak_error": rel_error(sim_peak, real_peak),
        "worst_rank_peak_error": max(
            abs(rel_error(s, r)) for s, r in zip(sim["peak_bytes"], measured["peak_bytes"], strict=True)
        ),
        "real_peak_gib_per_rank": [b / GIB for b in measured["peak_bytes"]],
        "sim_peak_gib_per_rank": [b / GIB for b in sim["peak_bytes"]],
        "real_step_s": measured["wall_s"] / settings.steps,
    }


def ranking(rows: list[dict]) -> dict:
    """Throughput and memory orders of the schedules, real and simulated."""
    real_order = order({r["schedule"]: r["real_samples_per_s"] for r in rows})
    sim_order = order({r["schedule"]: r["sim_samples_per_s"] for r in rows})
    real_mem = order({r["schedule"]: -r["real_peak_gib"] for r in rows})
    sim_mem = order({r["schedule"]: -r["sim_peak_gib"] for r in rows})
    return {
        "throughput_real": real_order,
        "throughput_sim": sim_order,
        "throughput_match": real_order == sim_order,
        "throughput_kendall_tau": kendall_tau(real_order, sim_order),
        "memory_real": real_mem,
        "memory_sim": sim_mem,
        "memory_match": real_mem == sim_mem,
    }


def _write_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        return
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(rows[0]))
    writer.writeheader()
    for row in rows:
        writer.writerow(
            {k: ";".join(f"{x:.4f}" for x in v) if isinstance(v, list) else v for k, v in row.items()}
        )
    write_text(path, text.getvalue())


def run(args: argparse.Namespace) -> int:
    began = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gpus = [int(g) for g in args.gpus.split(",")]
    cuda = args.device != "cpu"
    if cuda and torch.cuda.device_count() < max(gpus):
        raise SystemExit(f"need {max(gpus)} GPUs, found {torch.cuda.device_count()}")
    config, settings, iterations = setup(args.device, args.quick)
    sizes = {k: getattr(args, k) for k in ("hidden", "layers", "seq", "microbatch") if getattr(args, k)}
    config = replace(config, **sizes)
    if args.microbatches or args.steps:
        settings = replace(
            settings,
            microbatches=args.microbatches or settings.microbatches,
            steps=args.steps or settings.steps,
        )
    backend = "nccl" if cuda else "gloo"
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    print(f"profiling {config} on {device} ...", flush=True)
    chunkings = tuple(c for world in gpus for c in (world, INTERLEAVE * world))
    prof = profile(config, device, iterations, chunkings)
    (out / "graph.txt").write_text(prof.pop("graph_txt"))
    meta = {
        "config": {k: str(v) if isinstance(v, torch.dtype) else v for k, v in asdict(config).items()},
        "parameters": config.parameters(),
        "settings": asdict(settings),
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "torch": torch.__version__,
        "backend": backend,
    }
    results: dict = {"meta": meta, "configurations": []}
    ops_rows: list = []
    workload = GPTWorkload(config, SEED)
    for world in gpus:
        print(
            f"{world} ranks ({backend}): schedules {settings.schedules}, torch {settings.torch_schedules}",
            flush=True,
        )
        t0 = time.perf_counter()
        try:
            ranks, ops = spawn(world, backend, workload, settings, args.timeout_s)
        except RuntimeError as err:  # keep the other configurations' results
            print(f"WARNING: skipping {world} GPUs: {err}", file=sys.stderr, flush=True)
            continue
        result = analyse(prof, config, settings, world, ranks)
        result["spawn_wall_s"] = time.perf_counter() - t0
        results["configurations"].append(result)
        if ops:
            ops_rows = [(world, *row) for row in ops]
        prof["links"] = {str(c["gpus"]): c["link"] for c in results["configurations"]}
        write_text(out / "profile.json", json.dumps({**meta, "profile": prof}, indent=1))
        write_text(out / "results.json", json.dumps(results, indent=1))
    results["meta"]["run_wall_s"] = time.perf_counter() - began
    write_text(out / "results.json", json.dumps(results, indent=1))
    _write_csv(out / "results.csv", [r for c in results["configurations"] for r in c["rows"]])
    _write_csv(out / "baseline.csv", [r for c in results["configurations"] for r in c["baseline"]])
    if ops_rows:
        columns = [
            "gpus",
            "device",
            "worker",
            "stage",
            "replica",
            "kind",
            "microbatch",
            "version",
            "start_s",
            "end_s",
            "bytes",
        ]
        _write_csv(out / "ops.csv", [dict(zip(columns, row, strict=True)) for row in ops_rows])
    print(report_text(results))
    print(f"wrote {out} in {results['meta']['run_wall_s']:.0f} s")
    return 0


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def report_text(results: dict) -> str:
    """Markdown tables: real vs simulated per GPU count and schedule, rankings, ours vs torch."""
    meta = results["meta"]
    c = meta["config"]
    lines = [
        f"GPT: {meta['parameters'] / 1e6:.0f}M parameters, hidden {c['hidden']}, {c['layers']} layers,"
        f" seq {c['seq']}, vocab {c['vocab']}, microbatch {c['microbatch']}, amp {c['amp']};"
        f" {meta['settings']['microbatches']} microbatches per minibatch, {meta['settings']['steps']} timed"
        f" minibatches; {meta['device']}, torch {meta['torch']}, {meta['backend']}",
        "",
        "| GPUs | schedule | real samples/s | sim samples/s | error | real peak GiB | sim peak GiB | error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for conf in results["configurations"]:
        for r in conf["rows"]:
            lines.append(
                f"| {r['gpus']} | {r['schedule']} | {r['real_samples_per_s']:.2f}"
                f" | {r['sim_samples_per_s']:.2f}"
                f" | {_pct(r['throughput_error'])} | {r['real_peak_gib']:.2f} | {r['sim_peak_gib']:.2f}"
                f" | {_pct(r['peak_error'])} |"
            )
    lines += [
        "",
        "| GPUs | link (latency, bandwidth) | throughput order, real | simulated | same | Kendall tau |",
    ]
    lines += ["|---|---|---|---|---|---|"]
    for conf in results["configurations"]:
        rk, link = conf["ranking"], conf["link"]
        lines.append(
            f"| {conf['gpus']} | {link['latency_s'] * 1e6:.1f} µs, {link['bandwidth_Bps'] / 1e9:.1f} GB/s"
            f" | {' > '.join(rk['throughput_real'])} | {' > '.join(rk['throughput_sim'])}"
            f" | {'yes' if rk['throughput_match'] else 'no'} | {rk['throughput_kendall_tau']:.2f} |"
        )
    lines += [
        "",
        "| GPUs | schedule | ours samples/s | torch.distributed.pipelining | ours/torch"
        " | ours peak GiB | torch peak GiB |",
    ]
    lines += ["|---|---|---|---|---|---|---|"]
    for conf in results["configurations"]:
        for b in conf["baseline"]:
            lines.append(
                f"| {b['gpus']} | {b['schedule']} | {b['ours_samples_per_s']:.2f}"
                f" | {b['torch_samples_per_s']:.2f}"
                f" | {b['speedup']:.2f} | {b['ours_peak_gib']:.2f} | {b['torch_peak_gib']:.2f} |"
            )
    errors = [abs(r["throughput_error"]) for conf in results["configurations"] for r in conf["rows"]]
    mem = [abs(r["peak_error"]) for conf in results["configurations"] for r in conf["rows"]]
    if errors:
        lines += [
            "",
            f"max |throughput error| {100 * max(errors):.1f}%, max |peak memory error| {100 * max(mem):.1f}%"
            " (goal ≤ 10%)",
        ]
    return "\n".join(lines)


def resimulate(args: argparse.Namespace) -> int:
    """Rebuild the simulated columns of a finished run from its saved profile (no GPU needed): the
    measured columns are kept, every prediction is recomputed with the current simulator."""
    source, out = Path(args.source), Path(args.out)
    if source.resolve() == out.resolve():
        raise SystemExit("--out must differ from --from (the measured run is kept as it was)")
    results = json.loads(Path(source, "results.json").read_text())
    prof = json.loads(Path(source, "profile.json").read_text())["profile"]
    meta = results["meta"]
    raw = dict(meta["config"])
    raw["dtype"] = getattr(torch, str(raw["dtype"]).removeprefix("torch."))
    config = GPTConfig(**raw)
    settings = BenchSettings(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in meta["settings"].items()}
    )
    for conf in results["configurations"]:
        conf["rows"] = [
            compare(
                prof,
                config,
                settings,
                conf["gpus"],
                conf["link"],
                row["schedule"],
                {
                    "samples_per_s": row["real_samples_per_s"],
                    "wall_s": row["real_step_s"] * settings.steps,
                    "peak_bytes": [g * GIB for g in row["real_peak_gib_per_rank"]],
                },
            )
            for row in conf["rows"]
        ]
        conf["ranking"] = ranking(conf["rows"])
    results["meta"]["resimulated_from"] = str(source)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("graph.txt", "profile.json", "baseline.csv", "ops.csv"):
        if Path(source, name).exists():
            write_text(out / name, Path(source, name).read_text())
    write_text(out / "results.json", json.dumps(results, indent=1))
    _write_csv(out / "results.csv", [r for c in results["configurations"] for r in c["rows"]])
    text = report_text(results)
    write_text(out / "report.md", text + "\n")
    print(text)
    return 0


def report(args: argparse.Namespace) -> int:
    results = json.loads(Path(args.source, "results.json").read_text())
    print(report_text(results))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="profile, run every schedule for real, simulate, compare")
    p_run.add_argument("--out", required=True)
    p_run.add_argument("--gpus", default="2,4", help="comma-separated GPU (rank) counts")
    p_run.add_argument("--quick", action="store_true", help="smaller model, fewer steps")
    p_run.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: tiny model on gloo")
    p_run.add_argument(
        "--timeout-s", type=float, default=300.0, help="per GPU count, then the ranks are killed"
    )
    p_run.add_argument("--hidden", type=int, help="override the model's hidden size")
    p_run.add_argument("--layers", type=int, help="override the number of blocks (a multiple of 2 x GPUs)")
    p_run.add_argument("--seq", type=int, help="override the sequence length")
    p_run.add_argument("--microbatch", type=int, help="override the microbatch size (sequences)")
    p_run.add_argument("--microbatches", type=int, help="microbatches per minibatch (a multiple of GPUs)")
    p_run.add_argument("--steps", type=int, help="timed minibatches per schedule")
    p_run.set_defaults(func=run)
    p_rep = sub.add_parser("report", help="markdown tables from a run's results.json")
    p_rep.add_argument("--from", dest="source", required=True)
    p_rep.set_defaults(func=report)
    p_res = sub.add_parser(
        "resimulate", help="recompute the simulated columns of DIR's run from its profile into OUT"
    )
    p_res.add_argument("--from", dest="source", required=True)
    p_res.add_argument("--out", required=True)
    p_res.set_defaults(func=resimulate)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
