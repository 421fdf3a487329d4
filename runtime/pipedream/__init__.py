"""The torch side of PipeDream: executes ``policies.pipedream`` op lists on real stage modules.

``local.run_local`` runs every worker's op list in one process (numerics tests, small CPU runs);
``distributed.run_distributed`` runs one gloo process per worker with point-to-point activations and
gradients and per-stage all-reduces. The same op lists drive ``sim.pipedream``, so the order and weight
version of every op is identical in simulation and for real.
"""
