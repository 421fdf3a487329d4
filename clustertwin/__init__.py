"""clustertwin: a discrete-event simulator of deep-learning training clusters and its real-runtime twin.

Installed, the repository's top-level folders (``policies/``, ``sim/``, ``runtime/``, ``traces/``,
``scenarios/``, ``analysis/``) are this package's subpackages; ``pyproject.toml`` maps them. In a source
checkout the same names resolve to those folders directly, so the checkout's code runs with or without an
install (``PYTHONPATH=.`` on a machine where nothing can be installed).

``clustertwin.run``, ``.load``, ``.simulate``, ``.run_real`` and ``.RunOutput`` are the Python API
(``clustertwin.api``), imported on first use so that ``import clustertwin`` stays light; ``clustertwin.Job``
is the job API a training loop iterates over (``clustertwin.runtime.job``, needs torch).
"""

from pathlib import Path
from typing import Any

_checkout = Path(__file__).resolve().parent.parent
if (_checkout / "pyproject.toml").is_file() and (_checkout / "policies" / "__init__.py").is_file():
    __path__.append(str(_checkout))

_API = ("run", "load", "simulate", "run_real", "RunOutput")


def __getattr__(name: str) -> Any:
    if name in _API:
        from clustertwin import api

        return getattr(api, name)
    if name == "Job":
        from clustertwin.runtime.job import Job

        return Job
    raise AttributeError(f"module 'clustertwin' has no attribute {name!r}")
