"""The multi-process gloo runtime executes the same op lists as the single-process one and ends with the
same weights (float64, CPU); its op rows follow the ``ops`` table's columns."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from clustertwin.policies.pipedream.flush import flush  # noqa: E402
from clustertwin.policies.pipedream.one_f_one_b import one_f_one_b  # noqa: E402
from clustertwin.runtime.pipedream.distributed import run_many  # noqa: E402
from clustertwin.runtime.pipedream.local import run_local  # noqa: E402
from clustertwin.runtime.pipedream.toy import MLPWorkload, mlp_workload, mse  # noqa: E402
from clustertwin.scenarios.pipedream_results import PIPEDREAM_TABLES  # noqa: E402


def test_gloo_runtime_matches_single_process():
    # Flush on 3 stages, then 1F1B-RR 2-1 with its replica all-reduce, in one spawn of 3 processes.
    schedules = [flush(3, 3, 2), one_f_one_b((2, 1), 6)]
    results = run_many(schedules, MLPWorkload(3, 6), lr=0.1)
    for schedule, (rows, final) in zip(schedules, results, strict=True):
        modules, xs, ys = mlp_workload(schedule.num_chunks, schedule.num_microbatches, 3)
        local = run_local(schedule, modules, xs, ys, mse, 0.1)
        for c in range(schedule.num_chunks):
            for name, tensor in local.final(c).items():
                torch.testing.assert_close(final[c][name], tensor, rtol=1e-10, atol=1e-12)
        assert len(rows) == sum(len(w.ops) for w in schedule.workers)
        assert all(len(row) == len(PIPEDREAM_TABLES["ops"]) and row[8] >= row[7] for row in rows)
