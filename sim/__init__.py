"""SimPy executors, one package per kind; each kind's spec (``clustertwin/kinds/``) names its simulator."""
