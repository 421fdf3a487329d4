"""The multi-process gloo runtime executes the same op lists as the single-process one and ends with the
same weights (float64, CPU); its op rows follow the ``ops`` table's columns."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from policies.pipedream.flush import flush  # noqa: E402
from policies.pipedream.one_f_one_b import one_f_one_b  # noqa: E402
from runtime.pipedream.distributed import run_distributed  # noqa: E402
from runtime.pipedream.local import run_local  # noqa: E402
from runtime.pipedream.toy import mlp_workload  # noqa: E402
from scenarios.pipedream_results import PIPEDREAM_TABLES  # noqa: E402


def mse(out, y):
    return ((out - y) ** 2).mean()


@pytest.mark.parametrize(
    "schedule", [flush(3, 3, 2), one_f_one_b((2, 1), 6)], ids=["flush-3-stages", "1f1b-rr-2-1"]
)
def test_gloo_runtime_matches_single_process(schedule):
    rows, final = run_distributed(schedule, mlp_workload, seed=3, lr=0.1)
    modules, xs, ys = mlp_workload(schedule.num_chunks, schedule.num_microbatches, 3)
    local = run_local(schedule, modules, xs, ys, mse, 0.1)
    for c in range(schedule.num_chunks):
        for name, tensor in local.final(c).items():
            torch.testing.assert_close(final[c][name], tensor, rtol=1e-10, atol=1e-12)
    assert len(rows) == sum(len(w.ops) for w in schedule.workers)
    assert all(len(row) == len(PIPEDREAM_TABLES["ops"]) and row[8] >= row[7] for row in rows)
