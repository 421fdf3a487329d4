"""Numerics of the real runtime (CPU, float64): each schedule's updates equal an independent reference
of its update rule ([Narayanan] Table 7.1)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from clustertwin.policies.pipedream.flush import flush  # noqa: E402
from clustertwin.policies.pipedream.gpipe import gpipe  # noqa: E402
from clustertwin.policies.pipedream.interleaved import interleaved  # noqa: E402
from clustertwin.policies.pipedream.one_f_one_b import one_f_one_b  # noqa: E402
from clustertwin.policies.pipedream.twobw import twobw, twobw_version  # noqa: E402
from clustertwin.runtime.pipedream.local import run_local  # noqa: E402
from torch import nn  # noqa: E402

LR = 0.1
WIDTH = 6


def make_chunks(n: int, seed: int = 0) -> list[nn.Module]:
    torch.manual_seed(seed)
    return [nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()).double() for _ in range(n)]


def data(m: int, seed: int = 1) -> tuple[list, list]:
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(3, WIDTH, generator=g, dtype=torch.float64) for _ in range(m)]
    ys = [torch.randn(3, WIDTH, generator=g, dtype=torch.float64) for _ in range(m)]
    return xs, ys


def loss_fn(out, y):
    return ((out - y) ** 2).mean()


def forward_all(chunks, params, x):
    from torch.func import functional_call

    for c, module in enumerate(chunks):
        x = functional_call(module, params[c], (x,))
    return x


def initial(chunks):
    return [{n: p.detach().clone() for n, p in m.named_parameters()} for m in chunks]


def reference_sync(chunks, xs, ys, m, batches):
    """Plain gradient accumulation over each minibatch, then one SGD step."""
    params = initial(chunks)
    for t in range(batches):
        leaves = [{n: v.clone().requires_grad_() for n, v in p.items()} for p in params]
        loss = sum(loss_fn(forward_all(chunks, leaves, xs[t * m + k]), ys[t * m + k]) for k in range(m)) / m
        loss.backward()
        params = [{n: v.detach() - LR * v.grad for n, v in p.items()} for p in leaves]
    return params


def assert_same(run, expected):
    for c, exp in enumerate(expected):
        got = run.final(c)
        for n in exp:
            torch.testing.assert_close(got[n], exp[n], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("make", [lambda: gpipe(4, 4, 2), lambda: flush(4, 4, 2)], ids=["gpipe", "flush"])
def test_flush_and_gpipe_equal_gradient_accumulation(make):
    schedule = make()
    chunks = make_chunks(4)
    xs, ys = data(8)
    run = run_local(schedule, chunks, xs, ys, loss_fn, LR)
    assert_same(run, reference_sync(chunks, xs, ys, 4, 2))


def test_interleaved_equals_gradient_accumulation():
    schedule = interleaved(2, 2, 4, 2)
    chunks = make_chunks(4)
    xs, ys = data(8)
    run = run_local(schedule, chunks, xs, ys, loss_fn, LR)
    assert_same(run, reference_sync(chunks, xs, ys, 4, 2))


def test_2bw_equals_delayed_gradient_reference():
    p, m, batches = 3, 4, 3
    chunks = make_chunks(p)
    xs, ys = data(m * batches)
    run = run_local(twobw(p, m, batches), chunks, xs, ys, loss_fn, LR)
    # W^(t+1) = W^(t) − ν ∇f(W^(t−1)), with W^(−1) = W^(0).
    history = [initial(chunks)]
    for t in range(batches):
        used = history[twobw_version(t * m, m)]
        leaves = [{n: v.clone().requires_grad_() for n, v in p_.items()} for p_ in used]
        loss = sum(loss_fn(forward_all(chunks, leaves, xs[t * m + k]), ys[t * m + k]) for k in range(m)) / m
        loss.backward()
        history.append([{n: history[-1][c][n] - LR * leaves[c][n].grad for n in leaves[c]} for c in range(p)])
    assert_same(run, history[-1])
    # The weights differ from plain synchronous SGD: the delay is real.
    sync = reference_sync(chunks, xs, ys, m, batches)
    assert not torch.allclose(run.final(0)["0.weight"], sync[0]["0.weight"])


def test_weight_stashing_equals_per_stage_delay_reference():
    p, m = 4, 10
    chunks = make_chunks(p)
    xs, ys = data(m)
    run = run_local(one_f_one_b((1,) * p, m), chunks, xs, ys, loss_fn, LR)
    # Stage s uses its weights delayed by p−1−s updates: W_s^(max(0, k−(p−1−s))) for input k.
    hist = [[initial(chunks)[s]] for s in range(p)]
    for k in range(m):
        leaves = [
            {n: v.clone().requires_grad_() for n, v in hist[s][max(0, k - (p - 1 - s))].items()}
            for s in range(p)
        ]
        loss_fn(forward_all(chunks, leaves, xs[k]), ys[k]).backward()
        for s in range(p):
            hist[s].append({n: hist[s][-1][n] - LR * leaves[s][n].grad for n in leaves[s]})
    assert_same(run, [h[-1] for h in hist])


def test_replicated_stage_averages_gradients_like_data_parallelism():
    # 1F1B-RR, config 2-1: the two replicas of stage 0 all-reduce before every update, so stage 0 takes
    # one step per pair of inputs with their mean gradient; the run must finish and stay finite.
    chunks = make_chunks(2)
    xs, ys = data(8)
    run = run_local(one_f_one_b((2, 1), 8), chunks, xs, ys, loss_fn, LR)
    assert max(run.versions[0]) == 4 and max(run.versions[1]) == 8
    assert all(torch.isfinite(t).all() for t in run.final(0).values())
