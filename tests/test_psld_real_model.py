"""A real network through PSLD's gloo parameter server, with stragglers that come and go and a PS that
leaves (``real.model``, ``stragglers[].start_s/end_s``, ``removals``).

One launch of 5 processes trains the built-in MLR on 2 workers with 3 PSs in vanilla mode (the PSs hold
the parameters and momentum): PS 0's emulated NIC is capped for a while and then restored, and PS 2
announces DEL_SERVER mid-run. The training loss must fall, every worker must end with exactly the
serial replay of the same updates (so the DEL_SERVER's state migration lost nothing), the changes must
be applied in the scenario's order at or after their times, and PS 2 must end with no block. The
acceptance run (``psld-real-cpu.yaml`` with ``real.model=resnet_small``, then its simulation and
``compare``) is slow-marked.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from clustertwin.runtime.models.data import DATASETS
from clustertwin.runtime.models.registry import REAL_MODELS, build
from clustertwin.runtime.models.trainer import Trainer
from clustertwin.runtime.psld.ps import reference
from clustertwin.runtime.psld.run import build_job, run_real
from clustertwin.scenarios.load import load_scenario
from clustertwin.scenarios.psld_results import check_psld_tables

from clustertwin.cli import main
from clustertwin.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "psld-real-cpu.yaml"
DYNAMIC = [
    "real.model=mlr",
    "mode=vanilla",
    "block_mb=0.0005",  # 524-byte blocks: MLR's 2,600 bytes in 6 blocks
    "cluster={workers: 2, servers: 3}",
    "duration_s=3.0",
    "warmup_s=0.5",
    "stragglers=[{server: 0, what: bandwidth, value: 0.001, start_s: 0.5, end_s: 1.5}]",
    "removals=[{time_s: 1.0, server: 2}]",
]


def test_a_real_model_trains_through_changing_stragglers_and_a_removal() -> None:
    scenario = load_scenario(SCENARIO, DYNAMIC)
    result = run_real(scenario)
    check_psld_tables(result)
    info = result.info
    assert info["gradient"] == "model" and info["real_model"] == "mlr" and info["blocks"] == 6
    assert info["loss_last"] < 0.8 * info["loss_first"]
    assert info["final_params_sha256"] == hashlib.sha256(reference(result.job).numpy().tobytes()).hexdigest()
    changes = result.tables["changes"]
    capped = changes[changes.what == "bandwidth"]
    assert capped.server.tolist() == [0, 0] and capped.value.tolist() == [0.001, 10.0]
    assert capped.time_s.iloc[0] >= 0.5 and capped.time_s.iloc[1] >= 1.5
    removed = changes[changes.what == "remove"]
    assert (
        removed.server.tolist() == [2] and removed.value.tolist() == [1.0] and removed.time_s.iloc[0] >= 1.0
    )
    moves = result.tables["reassignments"]
    assert "remove" in set(moves.action)
    loads = result.tables["loads"]
    last = loads[loads.map_version == loads.map_version.max()].set_index("server")
    assert last.loc[2, "blocks"] == 0 and last.loc[[0, 1], "bytes"].sum() == info["model_bytes"]


def test_the_model_tensors_are_the_blocks() -> None:
    scenario = load_scenario(SCENARIO, ["real.model=resnet_small", "block_mb=0.01"])
    job = build_job(scenario)
    net = Trainer("resnet_small", None, 0, 32, 4)
    sizes = [n * 4 for _, n in net.tensors()]
    assert sum(b.nbytes for b in job.blocks) == sum(sizes) and job.itemsize == 4
    # every tensor is cut into blocks of at most block_mb, contiguous and in order
    assert all(b.nbytes <= scenario.block_bytes and b.nbytes % 4 == 0 for b in job.blocks)
    per_tensor = [sum(b.nbytes for b in job.blocks if b.tensor == t) for t in range(len(sizes))]
    assert per_tensor == sizes
    assert [b.offset for b in job.blocks] == sorted(b.offset for b in job.blocks)


GPU_SIZED = {"resnet18"}  # seconds per gradient on one CPU core: checked by its shape and one example


@pytest.mark.parametrize("name", sorted(e.name for e in REAL_MODELS.entries() if e.name not in GPU_SIZED))
def test_every_built_in_model_runs_on_its_data(name: str) -> None:
    net = Trainer(name, None, 1, 4, 2)
    flat = net.initial()
    grad, loss = net.gradient(flat, 1, 3)
    assert grad.shape == flat.shape and grad.abs().sum() > 0 and loss > 0
    again, _ = Trainer(name, None, 1, 4, 2).gradient(flat, 1, 3)
    assert bool((grad == again).all())  # a pure function of (model, data, seed, worker, step, params)


def test_resnet18_has_the_shape_of_the_catalog_resnet18() -> None:
    import torch
    from clustertwin.traces.psld_models import psld_model

    net, data = build("resnet18")
    tensors = [p.numel() for p in net.parameters()]
    catalog = psld_model("resnet18").tensors
    assert len(tensors) == len(catalog) == 62
    # the same convolutions and batch norms (the catalog lists a projection before its block's first
    # convolution); the stem (3x3 for 32x32 images, not 7x7) and the classifier (10 classes) differ
    assert sorted(tensors[1:-2]) == sorted(t.nbytes // 4 for t in catalog[1:-2])
    x, _ = data(0, 2)
    with torch.no_grad():
        assert net.eval()(x).shape == (2, 10)


def test_the_loss_is_the_cross_entropy() -> None:
    import torch
    from clustertwin.runtime.models.trainer import cross_entropy

    g = torch.Generator().manual_seed(0)
    logits, labels = torch.randn(16, 10, generator=g), torch.randint(0, 10, (16,), generator=g)
    assert float(cross_entropy(logits, labels)) == pytest.approx(
        float(torch.nn.functional.cross_entropy(logits, labels)), rel=1e-6
    )


def test_a_users_model_and_data_by_entry_point() -> None:
    net, data = build("clustertwin.runtime.models.nets:MLR", "clustertwin.runtime.models.data:features")
    x, y = data(0, 8)
    assert net(x).shape == (8, 10) and data is DATASETS["features"]
    with pytest.raises(InputError, match="real.data"):
        build("clustertwin.runtime.models.nets:MLR")  # a user's model must name its data set


@pytest.mark.slow
def test_acceptance_resnet_small_trains_and_compares(tmp_path: Path, capsys) -> None:
    real, sim = tmp_path / "real", tmp_path / "sim"
    args = ["--set", "real.model=resnet_small", "--quiet", "--no-plots"]
    assert main(["run", str(SCENARIO), "--backend", "real", "--out", str(real), *args]) == 0
    assert main(["run", str(SCENARIO), "--out", str(sim), *args]) == 0
    assert main(["compare", str(sim), str(real)]) == 0
    assert "iterations_per_s_error=" in capsys.readouterr().out
    from clustertwin.analysis.output import read_run

    _, result = read_run(real)
    assert result.info["loss_last"] < result.info["loss_first"]
