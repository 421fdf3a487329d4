"""clustertwin: a discrete-event simulator of deep-learning training clusters and its real-runtime twin.

Installed, the repository's top-level folders (``policies/``, ``sim/``, ``runtime/``, ``traces/``,
``scenarios/``, ``analysis/``) are this package's subpackages; ``pyproject.toml`` maps them. In a source
checkout the same names resolve to those folders directly, so the checkout's code runs with or without an
install (``PYTHONPATH=.`` on a machine where nothing can be installed).
"""

from pathlib import Path

_checkout = Path(__file__).resolve().parent.parent
if (_checkout / "pyproject.toml").is_file() and (_checkout / "policies" / "__init__.py").is_file():
    __path__.append(str(_checkout))
