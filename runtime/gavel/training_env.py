"""The environment a training process starts with: the job processes that worker agents start, and the
profiler's measured leases and background load, so that the profile measures what the run will do.

Heap. glibc's malloc serves a large block (above ``M_MMAP_THRESHOLD``) with a fresh ``mmap`` and unmaps it
when freed, and it gives the top of the heap back to the kernel (``M_TRIM_THRESHOLD``). A training step
allocates and frees the same activation and gradient buffers every time, so every step faults its memory
in again: on a 2-core VM the Recommendation stand-in took 1,124 minor page faults a step, ResNet-18
5,400. A fault's cost is the kernel's and, in a VM whose guest memory the host backs on first touch, the
host's too; it varies with what else the machine does, which a profile taken at another time cannot
know. With the thresholds raised, the buffers stay in the heap and a warm step faults nothing (0.01
faults a step), and the step time no longer depends on page-fault cost. The values are glibc's
documented environment tunables (``mallopt``); where the caller has set one, its value wins. Other C
libraries ignore them.

Subnormals. A unit that stops receiving gradient (a ReLU that no longer fires) leaves its SGD momentum
decaying by 0.9 a step, into the subnormal range: the Recommendation stand-in has none before step ~1,000
and 8% of its momentum elements subnormal from step ~2,500 on (``experiments/subnormal_rate.py``). Many
x86 cores take a microcode assist on every subnormal result, so such a job slows down as it trains: its
throughput would depend on its progress, which neither Gavel's throughput table (a function of job and
worker type) nor a profile of its first few hundred steps can know. :func:`flush_subnormals` sets the
thread's flush-to-zero and denormals-are-zero modes, as CPU training commonly does. It is process
state, so the processes' entry points call it before their first operation (``runtime.gavel.job_main`` and
the profiler's background jobs), not the ``Trainer`` that tests also use in-process.
"""

from __future__ import annotations

from collections.abc import Mapping

_MIB = 1 << 20
HEAP_TUNABLES = {
    "MALLOC_MMAP_THRESHOLD_": str(256 * _MIB),  # blocks up to 256 MiB come from the heap
    "MALLOC_TRIM_THRESHOLD_": str(256 * _MIB),  # up to 256 MiB of free heap stays with the process
    "MALLOC_TOP_PAD_": str(64 * _MIB),  # the heap grows 64 MiB at a time
}


def flush_subnormals() -> None:
    """Treat subnormal floats as zero in this thread and the threads it starts from now on (x86 FTZ/DAZ)."""
    import torch

    torch.set_flush_denormal(True)


def training_env(base: Mapping[str, str], threads: int | None = None) -> dict[str, str]:
    """``base`` with the heap tunables (unless ``base`` sets them) and, when given, ``threads``
    intra-op threads (``OMP_NUM_THREADS``)."""
    env = {**HEAP_TUNABLES, **base}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    return env
