"""FlexRR on real processes: torch.distributed (gloo) workers, a store-backed mailbox and parameter table,
straggler injection by sleeping along the same ``SpeedProfile`` the simulator uses. See ``launch.run_real``.
"""
