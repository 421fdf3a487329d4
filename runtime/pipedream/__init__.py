"""The torch side of PipeDream: executes ``policies.pipedream`` op lists on real stage modules.

``local.run_local`` runs every worker's op list in one process (numerics tests, small CPU runs);
``distributed`` runs one process per worker, gloo on CPU or NCCL on ``cuda:rank``, with activations and
gradients over ``p2p`` channels and per-stage all-reduces. ``gpt`` is the GPT-style workload of the GPU
benchmark (``bench``, ``experiments/pipedream_gpu.py``), ``torch_pipelining`` its
``torch.distributed.pipelining`` baseline. The same op lists drive ``sim.pipedream``, so the order and
weight version of every op is identical in simulation and for real ([Narayanan] §2.4.2).
"""
