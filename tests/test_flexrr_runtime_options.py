"""The scenario fields a calibrated or GPU FlexRR run uses, without starting processes: per-worker
iteration times, stragglers restricted to some workers, the ``real:`` block, the training problem's
mini-batch items over a cyclic pool (``runtime/flexrr/model.py``) and its models and data sets."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from clustertwin.runtime.flexrr.model import Problem, Trainer, problem_for, reference
from clustertwin.runtime.models import mlr
from clustertwin.scenarios.flexrr_setup import profiles
from clustertwin.scenarios.load import load_scenario
from clustertwin.sim.flexrr import run

from clustertwin.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["cluster.machines=2", "cluster.workers_per_machine=2", "iterations=4", "items_per_worker=100",
         "rr.message_checks=10", "iteration_s=1.0"]  # fmt: skip


def test_per_worker_iteration_times_and_one_slow_worker():
    s = load_scenario(
        ROOT / "scenarios" / "flexrr-default.yaml",
        [*SMALL, "iteration_s_per_worker=[1.0,1.5,2.0,0.5]", "stragglers.delay=1.0",
         "stragglers.probability=1.0", "stragglers.workers=[0]", "mode=bsp"],
    )  # fmt: skip
    profs = profiles(s)
    assert [p.iteration_s for p in profs] == [1.0, 1.5, 2.0, 0.5]
    # worker 0 is slowed (1 + delay)x from its first delay point on; the others run at their own speed
    assert profs[0].elapsed(0.0, 0.0, 1.0) > 1.9
    assert [p.elapsed(0.0, 0.0, 1.0) for p in profs[1:]] == pytest.approx([1.5, 2.0, 0.5])
    m = run(s).info
    # BSP: every iteration waits for the slowest of (worker 0 slowed ~2x 1.0 s, worker 2 at 2.0 s)
    assert m["makespan_s"] >= 4 * 2.0


def test_calibration_fields_are_checked():
    base = ROOT / "scenarios" / "flexrr-default.yaml"
    with pytest.raises(InputError, match="iteration_s_per_worker"):
        load_scenario(base, [*SMALL, "iteration_s_per_worker=[1.0,1.0]"])
    with pytest.raises(InputError, match="stragglers.workers"):
        load_scenario(base, [*SMALL, "stragglers.workers=[4]"])
    with pytest.raises(InputError):
        load_scenario(base, [*SMALL, "real.device=tpu"])
    s = load_scenario(base, SMALL)
    assert s.real.device == "cpu" and s.real.pacing == "profile"  # CPU behaviour by default


def test_items_as_minibatches_over_a_cyclic_pool():
    p = Problem(items=10, features=5, classes=3, batch=4, pool=7)
    assert p.pieces(0, 1) == [(0, 4)]
    assert p.pieces(1, 3) == [(4, 7), (0, 5)]  # rows 4..11 wrap once
    assert p.pieces(2, 10) == [(1, 7), (0, 7), (0, 7), (0, 7), (0, 5)]
    t = Trainer(p)
    w = torch.randn(t.size, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    rows = torch.cat([torch.arange(a, b) for a, b in p.pieces(1, 3)])
    # MLR through autograd is the closed-form softmax step of runtime/models/mlr.py
    closed = mlr.update(t.x[rows], t.y[rows], w.view(3, 5).T, p.lr, p.items * p.batch).T.reshape(-1)
    torch.testing.assert_close(t.delta_items(w, 1, 3), closed)
    # updates of any split of the items add up to the whole (what exactly-once processing relies on)
    whole = t.delta_items(w, 0, 10)
    parts = t.delta_items(w, 0, 3) + t.delta_items(w, 3, 10)
    torch.testing.assert_close(whole, parts)


@pytest.mark.parametrize(
    ("model", "data", "lr"), [("mlp", "synthetic", 1.0), ("cnn", "synthetic_images", 0.2)]
)
def test_bundled_models_learn_their_data_serially(model, data, lr):
    """The serial replay of a few BSP iterations lowers the training loss of each bundled model."""
    from clustertwin.runtime.flexrr.model import replay

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in a worker process; tiny convolutions only lose by threading
    try:
        p = Problem(items=128, features=16, classes=4, lr=lr, model=model, data=data, hidden=8)
        t = Trainer(p)
        models = replay(p, 8, 0)
    finally:
        torch.set_num_threads(threads)
    assert t.loss(models[-1]) < 0.9 * t.loss(models[0])


def test_a_users_model_and_data_as_module_function():
    p = Problem(items=32, model="torch.nn:Bilinear", data="synthetic")
    with pytest.raises(TypeError):
        Trainer(p)  # Bilinear(input_shape, classes, hidden) is not a model factory: the error says so
    with pytest.raises(KeyError, match="no_such_module"):
        Trainer(Problem(items=32, model="no_such_module:f"))
    with pytest.raises(KeyError, match="known: cnn, mlp, mlr"):
        Trainer(Problem(items=32, model="resnet"))


def test_the_real_check_names_bad_model_fields_and_a_wrong_ps_size():
    from clustertwin.kinds.flexrr import SPEC

    base = ROOT / "scenarios" / "flexrr-real-ps.yaml"
    with pytest.raises(InputError, match="real.model"):
        SPEC.check(load_scenario(base, ["real.model=nope"]), "real")
    with pytest.raises(InputError, match=r"ps.model_bytes: 13856"):  # 1732 float64 parameters
        SPEC.check(load_scenario(base, ["ps.model_bytes=1000"]), "real")
    SPEC.check(load_scenario(base, ["ps.model_bytes=13856"]), "real")
    SPEC.check(load_scenario(base, ["ps.model_bytes=1000"]), "sim")  # the simulator takes any size


def test_default_problem_is_one_example_per_item():
    s = load_scenario(ROOT / "scenarios" / "flexrr-default.yaml", SMALL)
    p = problem_for(s, 400)
    assert (p.batch, p.examples, p.dtype, p.features, p.classes, p.model) == (1, 400, "float64", 16, 4, "mlr")
    x, y = p.load()
    assert x.shape == (400, 16) and x.dtype == torch.float64
    assert torch.isfinite(reference(p, 2, 1)).all()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a host without CUDA")
def test_cuda_without_a_gpu_is_a_clear_error():
    from clustertwin.runtime.flexrr.worker import pick_device
    from clustertwin.scenarios.flexrr_schema import FlexRRReal

    assert pick_device(FlexRRReal(), 3).type == "cpu"
    with pytest.raises(RuntimeError, match="no CUDA device"):
        pick_device(FlexRRReal(device="cuda"), 0)
