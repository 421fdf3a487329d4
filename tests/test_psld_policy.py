"""Unit tests of the PSLD policies ([PSLD]): regression, superior set, placement, trigger, scaling."""

from __future__ import annotations

import numpy as np
import pytest
from clustertwin.policies.psld.baselines import (
    byteps_layout,
    key_hash,
    mxnet_layout,
    strawman_owners,
    tensorflow_layout,
)
from clustertwin.policies.psld.blocks import MB, Tensor, split_blocks
from clustertwin.policies.psld.migration import reassignment_step
from clustertwin.policies.psld.placement import eps_greedy, exploit, loads_of
from clustertwin.policies.psld.profiling import Sample, ServerModel, fit_line, fit_model
from clustertwin.policies.psld.scheduler import PSLDScheduler, SchedulerConfig
from clustertwin.policies.psld.superior import superior_set
from clustertwin.policies.psld.trigger import server_speeds, speed_variation
from clustertwin.traces.psld_models import psld_model


def line_model(alpha: float, beta: float, spread: float = 0.0, workers: int = 4) -> ServerModel:
    return ServerModel(
        tuple(alpha * (1 + spread * (i - (workers - 1) / 2)) for i in range(workers)), (beta,) * workers
    )


def test_fit_line_recovers_alpha_beta() -> None:
    x = np.array([1e6, 2e6, 4e6, 8e6])
    alpha, beta = fit_line(x, 3e-9 * x + 0.002)
    assert alpha == pytest.approx(3e-9)
    assert beta == pytest.approx(0.002)


def test_fit_line_one_size_goes_through_origin() -> None:
    alpha, beta = fit_line(np.array([4e6, 4e6]), np.array([0.01, 0.03]))
    assert beta == 0.0
    assert alpha == pytest.approx(0.02 / 4e6)


def test_fit_line_negative_slope_charges_the_time_per_byte() -> None:
    """Latency-bound small blocks whose times fall with size (noise) must not read as a PS that moves bytes
    for free: the prediction at a large load grows with the load instead of staying at the small blocks'
    time."""
    x = np.array([256.0, 1024.0, 4000.0])
    y = np.array([0.014, 0.013, 0.012])
    alpha, beta = fit_line(x, y)
    assert beta == 0.0
    assert alpha == pytest.approx(float((x * y).sum() / (x * x).sum()))
    assert alpha * 15.6e6 + beta > 100 * y.max()


def test_fit_model_per_worker_mean_and_sem() -> None:
    samples = [Sample(w, 0, s, (1 + w) * 1e-9 * s + 1e-3) for w in range(3) for s in (1e6, 2e6, 3e6)]
    m = fit_model(samples)[0]
    assert m.alphas == pytest.approx((1e-9, 2e-9, 3e-9))
    s = 5e6
    preds = np.array([1e-9, 2e-9, 3e-9]) * s + 1e-3
    assert m.mean(s) == pytest.approx(preds.mean())
    assert m.sem(s) == pytest.approx(preds.std(ddof=1) / np.sqrt(3))
    assert m.lower(s) < m.mean(s) < m.upper(s)
    assert m.upper(s) - m.mean(s) == pytest.approx(1.645 * m.sem(s))


def test_superior_excludes_a_confidently_slow_server() -> None:
    model = {0: line_model(1e-7, 0, 0.05), 1: line_model(1e-8, 0, 0.05), 2: line_model(1.05e-8, 0, 0.3)}
    sup = superior_set(model, [0, 1, 2], 1e7)
    assert sup[0] == 1  # lowest upper bound first
    assert 0 not in sup  # 10x slower, tight interval
    assert 2 in sup  # overlaps server 1's interval


def test_superior_first_always_admitted_and_equal_servers_all_in() -> None:
    model = {r: line_model(1e-8, 1e-3, 0.1) for r in range(5)}
    assert sorted(superior_set(model, range(5), 1e7)) == [0, 1, 2, 3, 4]
    assert superior_set({7: line_model(1.0, 1.0)}, [7], 1.0) == (7,)


def test_superior_strict_variant_admits_a_wide_interval() -> None:
    # server 2's upper bound is the worst but its lower bound is below server 1's upper bound.
    model = {0: line_model(1e-8, 0, 0.0), 1: line_model(1.5e-8, 0, 0.0), 2: line_model(1.2e-8, 0, 2.0)}
    plain = superior_set(model, [0, 1, 2], 1e7)
    strict = superior_set(model, [0, 1, 2], 1e7, strict=True)
    assert plain == (0,)
    assert len(strict) > len(plain)


def test_exploit_balances_equal_servers_and_avoids_a_slow_one() -> None:
    model = {0: line_model(1e-8, 1e-4), 1: line_model(1e-8, 1e-4), 2: line_model(1e-7, 1e-4)}
    assert exploit(4e6, [0, 1], {0: 8e6, 1: 4e6}, 12e6, model) == 1
    assert exploit(4e6, [0, 1, 2], {}, 0.0, model) in (0, 1)


def test_eps_greedy_zero_epsilon_uses_only_superior_and_balances() -> None:
    model = {r: line_model(1e-8, 1e-4) for r in range(4)}
    sizes = [4 * MB] * 40
    owners = eps_greedy(sizes, [0, 1, 2, 3], [1, 2], model, 0.0, np.random.default_rng(0))
    assert set(owners) == {1, 2}
    loads = loads_of(sizes, owners)
    assert loads[1] == loads[2]


def test_eps_greedy_explores_all_servers_at_rate_epsilon() -> None:
    model = {r: line_model(1e-8, 1e-4) for r in range(4)}
    sizes = [1.0] * 4000
    owners = eps_greedy(sizes, [0, 1, 2, 3], [0], model, 0.2, np.random.default_rng(1))
    share = np.bincount(owners, minlength=4) / len(owners)
    # exploit sends everything to 0; explore spreads 20% uniformly: 5% to each of 1..3
    assert share[1:] == pytest.approx([0.05] * 3, abs=0.015)
    again = eps_greedy(sizes, [0, 1, 2, 3], [0], model, 0.2, np.random.default_rng(1))
    assert again == owners


def test_speed_variation_and_trigger_metric() -> None:
    model = {0: line_model(1e-8, 0), 1: line_model(3e-8, 0)}
    speeds = server_speeds(model, [0, 1], {0: 1e6, 1: 1e6}, 1e6, "paper")
    assert speed_variation(speeds) == pytest.approx(2.0)
    assert speed_variation({0: 5.0}) == 0.0
    assert server_speeds(model, [0, 1], {0: 1e6}, 1e6, "paper").keys() == {0}  # unloaded: no speed
    assert server_speeds(model, [0, 1], {0: 1e6}, 1e6, "reference").keys() == {0, 1}


def _samples(slow: dict[int, float], servers: int, workers: int = 4) -> list[Sample]:
    rng = np.random.default_rng(3)
    out = []
    for r in range(servers):
        for w in range(workers):
            for s in (0.5 * MB, 1 * MB, 2 * MB, 4 * MB):
                t = slow.get(r, 1.0) * 1e-8 * s + 2e-4
                out.append(Sample(w, r, s, t * float(np.exp(0.05 * rng.standard_normal()))))
    return out


def test_scheduler_moves_load_off_a_straggler() -> None:
    sizes = [4 * MB] * 64
    sched = PSLDScheduler(sizes, [0, 1, 2, 3], [], SchedulerConfig(epsilon=0.0))
    owners = [i % 4 for i in range(64)]
    sched.observe(_samples({0: 10.0}, 4))
    d = sched.decide(0, owners, np.random.default_rng(0))
    assert d.action == "reassign"
    assert 0 not in d.superior
    assert d.owners is not None and 0 not in d.owners
    assert d.predicted_after_s < d.predicted_before_s
    # within the cooldown nothing happens
    assert sched.decide(1, d.owners, np.random.default_rng(0)).action == "none"


def test_scheduler_without_stragglers_keeps_a_balanced_map() -> None:
    sizes = [4 * MB] * 64
    sched = PSLDScheduler(sizes, [0, 1, 2, 3], [], SchedulerConfig())
    sched.observe(_samples({}, 4))
    assert sched.decide(0, [i % 4 for i in range(64)], np.random.default_rng(0)).action == "none"


def test_scale_out_when_most_servers_straggle_and_remove_server() -> None:
    sizes = [4 * MB] * 64
    sched = PSLDScheduler(sizes, [0, 1, 2, 3], [4], SchedulerConfig(epsilon=0.0))
    sched.observe(_samples({0: 10.0, 1: 10.0, 2: 10.0}, 4))
    d = sched.decide(0, [i % 4 for i in range(64)], np.random.default_rng(0))
    assert d.action == "scale_out" and d.added == 4
    assert 4 in d.servers and d.owners is not None and 4 in d.owners
    r = sched.remove_server(3, np.random.default_rng(0))
    assert r.action == "remove" and r.owners is not None and 3 not in r.owners
    assert set(r.owners) <= set(r.servers)


def test_strawman_is_proportional_to_speed() -> None:
    owners = strawman_owners([1.0] * 300, [0, 1, 2], {0: 1.0, 1: 1.0, 2: 0.5})
    counts = np.bincount(owners)
    assert list(counts) == [120, 120, 60]


def test_blocks_and_framework_layouts() -> None:
    tensors = [Tensor("big", 10 * MB), Tensor("small", 1000), Tensor("mid", 4 * MB)]
    blocks = split_blocks(tensors, 4 * MB)
    assert [b.nbytes for b in blocks] == [4 * MB, 4 * MB, 2 * MB, 1000, 4 * MB]
    with pytest.raises(ValueError):
        split_blocks(tensors, 0)
    tf_blocks, tf_owners = tensorflow_layout(tensors, [0, 1])
    assert tf_owners == [0, 1, 0] and len(tf_blocks) == 3
    mx_blocks, mx_owners = mxnet_layout(tensors, [0, 1, 2], 4 * MB, np.random.default_rng(0))
    big = [(b.nbytes, r) for b, r in zip(mx_blocks, mx_owners, strict=True) if b.tensor == 0]
    assert sorted(r for _, r in big) == [0, 1, 2]  # one even slice per PS
    assert sum(n for n, _ in big) == 10 * MB
    bp_blocks, bp_owners = byteps_layout(tensors, [0, 1, 2], 4 * MB)
    assert len(bp_blocks) == 5 and bp_owners == byteps_layout(tensors, [0, 1, 2], 4 * MB)[1]


def test_byteps_hash_is_djb2_of_the_decimal_key_and_spreads_one_partition_tensors() -> None:
    assert key_hash(0) == 5381 * 33 + ord("0")
    assert key_hash(12) == (5381 * 33 + ord("1")) * 33 + ord("2")
    # ResNet-50's 161 tensors, most of one partition: keys k << 16 share their low bits, and a hash that
    # kept only those would put all of them on one PS.
    model = psld_model("resnet50")
    blocks, owners = byteps_layout(model.tensors, list(range(8)), 4 * MB)
    counts = np.bincount(owners, minlength=8)
    assert (counts > 0).all()
    assert counts.max() <= 2 * len(blocks) / 8


def test_model_catalogue_matches_the_paper() -> None:
    assert psld_model("resnet101").params / 1e6 == pytest.approx(44.5, abs=0.1)
    vgg = psld_model("vgg16")
    assert max(t.nbytes for t in vgg.tensors) > 400e6  # fc6, Fig. 2
    assert vgg.batch_size == 64


def test_reassignment_step() -> None:
    assert reassignment_step(10, 0.0, 0.5) == 11
    assert reassignment_step(10, 1.2, 0.5) == 14
