"""A rich progress bar for long computations, as a ``progress(done, total)`` callback."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


def new_progress() -> Progress:
    """A transient bar with an ETA on stderr (stdout holds the answer), drawn only on a terminal: in a
    pipe or a log a bar is noise (rich would leave an empty line behind)."""
    console = Console(stderr=True)
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    transient=True, console=console, disable=not console.is_terminal)


@contextmanager
def progress_bar(description: str, min_total: int = 2) -> Iterator[Callable[[int, int], None]]:
    """Yield a callback that draws a bar on stderr once there are at least ``min_total`` steps."""
    bar = new_progress()
    task = None

    def update(done: int, total: int) -> None:
        nonlocal task
        if total < min_total:
            return
        if task is None:
            bar.start()
            task = bar.add_task(description, total=total)
        bar.update(task, completed=done, total=total)

    try:
        yield update
    finally:
        if task is not None:
            bar.stop()
