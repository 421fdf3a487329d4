"""PSLD's real parameter server on torch.distributed (gloo, CPU): block-sharded push/pull, per-block
timing reports, the live re-sharding protocol (prepare at k*, block, migrate in vanilla mode, resume),
NIC emulation (a paced link per direction) inside a PS, CPU or GPU workers, and the calibration of the
simulator from a real profiling run (``calibrate``). Placement decisions come from ``policies.psld``."""
