"""Hot loops compiled to machine code by numba when it is installed, run as plain Python when not.

A decorated function is written as the loop its rule reads as, over numpy arrays. numba compiles it on
first call and caches the machine code next to the source, so later processes load it in milliseconds;
plain Python runs the same statements on the same IEEE doubles, so both give the same bits (a test
checks them against each other), only slower. Without numba (a machine where it cannot be installed)
nothing else changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable)

try:
    import numba
except ImportError:  # pragma: no cover - exercised only where numba is missing
    numba = None


def compiled(function: F) -> F:
    """``function`` compiled in nopython mode with an on-disk cache, or unchanged without numba. Division
    follows numpy (a zero divisor gives inf or nan, never an exception), as the interpreted form does on
    numpy scalars."""
    if numba is None:
        return function
    return numba.njit(cache=True, error_model="numpy")(function)


def interpreted(function: Callable) -> Callable:
    """The plain-Python form of a :func:`compiled` function (for checking the two against each other)."""
    return getattr(function, "py_func", function)
