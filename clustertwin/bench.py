"""``clustertwin bench NAME``: a kind's speed figures printed as ``key=value`` lines (not timed tests).

``NAME`` is a kind with a benchmark (``clustertwin list`` shows which); each kind's spec says what it
measures (``clustertwin/bench_<kind>.py`` for the built-in ones).
"""

from __future__ import annotations

from clustertwin.errors import InputError
from clustertwin.kinds import get_kind, kinds


def bench(name: str, scale: bool = False) -> int:
    """Run kind ``name``'s benchmark (``scale``: its scale benchmark); an unknown name is an InputError
    listing the known ones."""
    known = benchmarks()
    if name not in known:
        raise InputError(f"bench {name}", f"unknown benchmark; known: {', '.join(known)}")
    measure = get_kind(name).bench_scale if scale else get_kind(name).bench
    if measure is None:
        raise InputError(f"bench {name} --scale", "this kind has no scale benchmark")
    measure(_emit)
    return 0


def benchmarks() -> list[str]:
    """The kinds that have a benchmark."""
    return [spec.name for spec in kinds() if spec.bench is not None]


def _emit(key: str, value: object) -> None:
    print(f"{key}={value}", flush=True)
