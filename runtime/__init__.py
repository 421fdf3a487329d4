"""The real-runtime twin: the same policies driving real training on torch.distributed. Each kind's spec
(``clustertwin/kinds/``) names its real runner, which returns the same event tables the simulator writes."""
