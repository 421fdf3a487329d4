"""PSLD for real on this host's CPUs next to the calibrated simulator (docs/algorithms/psld.md).

Run: ``python -m experiments.psld_real_vs_sim [--out DIR] [--model NAME]`` (from the repository root;
~2 min on 2 cores).

The same pipeline as the GPU experiment (``experiments.psld_gpu.real_vs_sim``) on
``scenarios/psld-real-cpu.yaml`` (ResNet-18, 4 CPU workers with the closed-form toy gradient, 2 BytePS
PSs, PS 1's NIC capped at 0.5 Gbit/s): a straggler-free profiling run, the mxnet baseline and PSLD for
real (``duration_s`` 20, ``warmup_s`` 4, in one launch), then both policies simulated with the
parameters ``runtime.psld.calibrate`` measured on the profiling run. ``--model`` trains a real network
instead (``real.model``: ``resnet_small``, say), and the simulations price its tensors and its measured
compute. Prints the table of ``experiments.psld_gpu report`` and, with ``--out``, writes the same files.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from experiments.psld_gpu import real_vs_sim, report, write  # noqa: E402

SCENARIO = ROOT / "scenarios" / "psld-real-cpu.yaml"
PROFILE_S, RUN_S, WARMUP_S = 12.0, 20.0, 4.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="also write the results here")
    parser.add_argument("--model", help="a real network (runtime.models) instead of the toy gradient")
    args = parser.parse_args(argv)
    base = [f"real.model={args.model}"] if args.model else []
    done = real_vs_sim(SCENARIO, base, PROFILE_S, RUN_S, WARMUP_S)
    if args.out is not None:
        write(args.out, done)
    print()
    print(report(done["results"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
