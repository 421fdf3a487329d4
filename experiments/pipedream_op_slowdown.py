"""Why a pipeline's forward and backward ops can run longer than the profile says: one GPT stage
(``--blocks`` blocks of ``runtime/pipedream/gpt.py``'s GPU model) timed on cuda:0 under the conditions
that differ between a profile and a pipeline, one at a time.

    python -m experiments.pipedream_op_slowdown --out DIR      # needs 2 GPUs (NCCL)

Rank 0 runs GPipe's op order for one minibatch (``--microbatches`` forwards, then as many backwards),
every op bracketed by CUDA events on the compute stream (as ``runtime.pipedream.distributed`` times
them), and reports the mean forward and backward per condition, in this order:

1. ``idle_ones``: after two idle seconds, backwards seeded with ones (a profile of old);
2. ``steady_ones``: after ``--heat`` seconds of back-to-back passes;
3. ``steady_random``: the same, backwards seeded with normal noise (as training's gradients are);
4. ``send``: as 3, and every op's output is sent to rank 1 over NCCL while the next op computes (the
   pipeline's activations and gradients, ``runtime.pipedream.p2p``);
5. ``recv``: as 3, while rank 1 sends as many messages of the same size to rank 0, whose receives are
   posted before the ops run.

The SM clock (NVML) is read after each condition. Writes ``DIR/op_slowdown.json`` and prints it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.distributed as dist
from clustertwin.runtime.launch import launch, report
from clustertwin.runtime.pipedream.distributed import init_rank
from clustertwin.runtime.pipedream.gpt import GPU, build_layer
from torch import nn

from clustertwin.atomic import write_text


def _sm_clock_mhz(index: int) -> float:
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception:  # NVML missing or not permitted: the clock is a side note
        return float("nan")


def _minibatch(stage: nn.Module, inputs: list, seed: str, peer: int | None, send: bool) -> dict:
    """GPipe's op order on one stage; mean seconds per forward and backward."""
    device = inputs[0].device
    events = []
    outs, pending = [], []
    for x in inputs:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = stage(x)
        end.record()
        events.append(("F", start, end))
        outs.append(out)
        if send:
            pending.append(dist.isend(out.detach(), peer))
    generator = torch.Generator(device).manual_seed(0)
    for x, out in zip(inputs, outs, strict=True):
        grad = (
            torch.ones_like(out)
            if seed == "ones"
            else torch.randn(out.shape, generator=generator, device=device)
        )
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        got = torch.autograd.grad(out, [x, *stage.parameters()], grad)
        end.record()
        events.append(("B", start, end))
        if send:
            pending.append(dist.isend(got[0], peer))
        del got
    for work in pending:
        work.wait()
    torch.cuda.synchronize(device)
    times: dict[str, list[float]] = {"F": [], "B": []}
    for kind, start, end in events:
        times[kind].append(start.elapsed_time(end) / 1000.0)
    return {f"{k.lower()}_s": sum(v) / len(v) for k, v in times.items()}


def rank_main(rank: int, blocks: int, microbatches: int, heat_s: float) -> None:
    member = init_rank("nccl")
    device = member.device
    config = GPU
    shape = (config.microbatch, config.seq, config.hidden)
    messages = 2 * microbatches
    conditions = ("idle_ones", "steady_ones", "steady_random", "send", "recv")
    if rank == 1:
        buf = torch.zeros(shape, device=device)
        for condition in conditions:
            dist.barrier(device_ids=[device.index])
            if condition == "send":
                for _ in range(messages):
                    dist.recv(buf, 0)
            elif condition == "recv":
                for _ in range(messages):
                    dist.send(buf, 0)
            torch.cuda.synchronize(device)
        dist.barrier(device_ids=[device.index])
        dist.destroy_process_group()
        return
    stage = nn.Sequential(*(build_layer(config, 0, 1 + i, device) for i in range(blocks)))
    g = torch.Generator(device).manual_seed(1)
    inputs = [torch.randn(shape, generator=g, device=device).requires_grad_() for _ in range(microbatches)]
    out: dict = {"blocks": blocks, "microbatches": microbatches, "heat_s": heat_s, "conditions": {}}
    _minibatch(stage, inputs[:2], "ones", None, False)  # kernels chosen and loaded before any timing
    for condition in conditions:
        if condition == "idle_ones":
            torch.cuda.synchronize(device)
            time.sleep(2.0)
        elif condition == "steady_ones":
            end = time.perf_counter() + heat_s
            while time.perf_counter() < end:
                _minibatch(stage, inputs[:2], "random", None, False)
        dist.barrier(device_ids=[device.index])
        posted = []
        if condition == "recv":
            posted = [dist.irecv(torch.empty(shape, device=device), 1) for _ in range(messages)]
        seed = "ones" if condition.endswith("ones") else "random"
        row = _minibatch(stage, inputs, seed, 1, condition == "send")
        for work in posted:
            work.wait()
        torch.cuda.synchronize(device)
        row["sm_clock_mhz"] = _sm_clock_mhz(device.index)
        out["conditions"][condition] = row
    dist.barrier(device_ids=[device.index])
    report(out)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--microbatches", type=int, default=12)
    parser.add_argument("--heat", type=float, default=3.0)
    args = parser.parse_args()
    items = launch(rank_main, 2, (args.blocks, args.microbatches, args.heat), limit_s=300)
    result = items[0]
    base = result["conditions"]["steady_random"]
    for row in result["conditions"].values():
        row["f_over_steady_random"] = row["f_s"] / base["f_s"]
        row["b_over_steady_random"] = row["b_s"] / base["b_s"]
    text = json.dumps(result, indent=1)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    write_text(Path(args.out) / "op_slowdown.json", text)
    print(text)


if __name__ == "__main__":
    main()
