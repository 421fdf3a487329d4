"""FlexRR on real processes ([Harlap], ch. 3): torch.distributed workers training on CPU or CUDA, a
store-backed mailbox and parameter table, straggler injection by sleeping along the same ``SpeedProfile``
the simulator uses. See ``launch.run_real`` / ``launch.run_real_many``.
"""
