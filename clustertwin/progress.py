"""A progress bar that long work reports to through a plain callback.

Executors take ``progress(fraction, text)`` and know nothing about terminals; this module turns the
calls into a rich bar on a terminal. Off a terminal (a CI log, a pipe) a bar would be noise: work whose
every call marks a finished unit (``lines=True``: a reproduction's runs) prints one plain line per call,
``<description>: <text>`` with the count in the text; other work prints nothing. ``--quiet`` prints nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

ProgressCallback = Callable[[float, str], None]

_STEPS = 1000  # bar resolution; fractions are mapped onto it


@contextmanager
def progress_bar(
    description: str, *, quiet: bool = False, console: Console | None = None, lines: bool = False
) -> Iterator[ProgressCallback]:
    """Yield a callback ``progress(fraction in [0, 1], text)`` that draws a bar while the block runs
    (off a terminal, with ``lines``: prints a line per call)."""
    console = console or Console()
    if quiet or (not console.is_terminal and not lines):
        yield _ignore
        return
    if not console.is_terminal:

        def line(fraction: float, text: str) -> None:
            print(f"{description}: {text}", file=console.file, flush=True)

        yield line
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[text]}"),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(description, total=_STEPS, text="")

        def report(fraction: float, text: str) -> None:
            bar.update(task, completed=min(max(fraction, 0.0), 1.0) * _STEPS, text=text)

        yield report


def _ignore(fraction: float, text: str) -> None:
    """The callback when no bar is shown."""
