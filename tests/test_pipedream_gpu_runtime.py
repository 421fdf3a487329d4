"""The CUDA/NCCL executor's code path, run with gloo on CPU on the tiny GPT (float64): every schedule of
the GPU benchmark finishes without deadlock on fixed-shape channels received in the sender's order,
ends with the same weights as the single-process runtime on the same op lists, and the synchronous
schedules equal plain gradient accumulation on the unsplit model ([Narayanan] Table 7.1)."""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from clustertwin.policies.pipedream.ops import Op, build_schedule  # noqa: E402
from clustertwin.runtime.pipedream.bench import bench_schedule  # noqa: E402
from clustertwin.runtime.pipedream.distributed import run_many  # noqa: E402
from clustertwin.runtime.pipedream.gpt import TINY, GPTWorkload, gpt_sequential  # noqa: E402
from clustertwin.runtime.pipedream.local import run_local  # noqa: E402
from clustertwin.runtime.pipedream.p2p import channel_orders  # noqa: E402
from clustertwin.scenarios.pipedream_results import PIPEDREAM_TABLES  # noqa: E402
from torch.func import functional_call  # noqa: E402

LR = 0.05
M = 4  # microbatches per minibatch
BATCHES = 2
WORKLOAD = GPTWorkload(replace(TINY, dtype=torch.float64), seed=7)
NAMES = ("gpipe", "flush", "2bw", "1f1b", "interleaved")


def out_of_order() -> object:
    """Stage 1 consumes microbatch 1 before 0 (the sender sends 0 first), so its receiver must post the
    earlier message first and hold it: the channels' in-order rule, exercised."""
    stage0 = [Op("F", 0, 0, 0), Op("F", 1, 0, 0), Op("B", 1, 0, 0), Op("B", 0, 0, 0), Op("W", 1, 0, 1)]
    stage1 = [Op("F", 1, 1, 0), Op("F", 0, 1, 0), Op("B", 1, 1, 0), Op("B", 0, 1, 0), Op("W", 1, 1, 1)]
    return build_schedule("out-of-order", 2, 2, None, [stage0, stage1], "sync", 2)


def reference_accumulation(batches: int) -> dict[str, torch.Tensor]:
    """Plain SGD on the unsplit model with the gradient averaged over each minibatch's microbatches."""
    model = gpt_sequential(WORKLOAD.config, WORKLOAD.seed)
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    for t in range(batches):
        leaves = {n: v.clone().requires_grad_() for n, v in params.items()}
        loss = 0.0
        for k in range(t * M, (t + 1) * M):
            x, y = WORKLOAD.microbatch(k, torch.device("cpu"))
            loss = loss + WORKLOAD.loss(functional_call(model, leaves, (x,)), y) / M
        grads = torch.autograd.grad(loss, list(leaves.values()))
        params = {n: v.detach() - LR * g for (n, v), g in zip(leaves.items(), grads, strict=True)}
    return params


@pytest.fixture(scope="module")
def runs():
    schedules = [bench_schedule(n, 2, M, BATCHES) for n in NAMES] + [out_of_order()]
    return schedules, run_many(schedules, WORKLOAD, lr=LR)


def test_every_schedule_matches_the_single_process_runtime(runs):
    schedules, results = runs
    for schedule, (rows, final) in zip(schedules, results, strict=True):
        n = schedule.num_chunks
        modules = [WORKLOAD.chunk(c, n, torch.device("cpu")) for c in range(n)]
        data = [WORKLOAD.microbatch(k, torch.device("cpu")) for k in range(schedule.num_microbatches)]
        local = run_local(schedule, modules, [x for x, _ in data], [y for _, y in data], WORKLOAD.loss, LR)
        for c in range(n):
            for name, tensor in local.final(c).items():
                torch.testing.assert_close(final[c][name], tensor, rtol=1e-9, atol=1e-12, msg=schedule.name)
        assert len(rows) == sum(len(w.ops) for w in schedule.workers)
        assert all(len(row) == len(PIPEDREAM_TABLES["ops"]) and row[8] >= row[7] >= 0 for row in rows)


def test_synchronous_schedules_equal_gradient_accumulation(runs):
    schedules, results = runs
    expected = reference_accumulation(BATCHES)
    for schedule, (_, final) in zip(schedules, results, strict=True):
        if schedule.name not in ("gpipe", "flush", "interleaved"):
            continue
        # Chunk c's module is an nn.Sequential of the model's layers in order: map names back.
        got = {}
        offset = 0
        for c in range(schedule.num_chunks):
            layers = {int(n.split(".")[0]) for n in final[c]}
            for name, tensor in final[c].items():
                index, rest = name.split(".", 1)
                got[f"{offset + int(index)}.{rest}"] = tensor
            offset += len(layers)
        assert got.keys() == expected.keys()
        for name, tensor in expected.items():
            torch.testing.assert_close(got[name], tensor, rtol=1e-9, atol=1e-12, msg=schedule.name)


def test_channels_follow_the_senders_order():
    schedule = bench_schedule("interleaved", 2, M, 1)
    orders = channel_orders(schedule)
    # Interleaving wraps around: device 1 sends activations back to device 0 and gradients forward.
    assert set(orders) == {(0, 1, "act"), (1, 0, "act"), (1, 0, "grad"), (0, 1, "grad")}
    assert sum(len(v) for v in orders.values()) == 2 * M * (schedule.num_chunks - 1)
    assert orders[(0, 1, "act")][:2] == [("act", 0, 1), ("act", 1, 1)]
