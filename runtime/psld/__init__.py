"""PSLD's real parameter server on torch.distributed (gloo, CPU): block-sharded push/pull, per-block
timing reports, the live re-sharding protocol (prepare at k*, block, migrate in vanilla mode, resume)
and token-bucket throttling inside a PS. Placement decisions come from ``policies.psld``."""
