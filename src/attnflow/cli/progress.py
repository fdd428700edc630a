"""A rich progress bar for long computations, as a ``progress(done, total)`` callback.

For flow the callback also takes the up-front estimate (``bar.estimate(found)``, called by
``attnflow.flow`` before it solves): a long run prints the estimate first, and the bar shows
the rate and an ETA from the start (the estimate until rows finish, the measured rate after).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeRemainingColumn
from rich.text import Text

PRINT_ESTIMATE_SECONDS = 2.0  # runs expected to take longer say so before they start
PLAIN_EVERY_SECONDS = 10.0    # without a terminal (a pipe, a log): one progress line at most this often


def _clock(seconds: float) -> str:
    return str(timedelta(seconds=int(round(seconds))))


class _Rate(ProgressColumn):
    def render(self, task: Any) -> Text:
        unit = task.fields.get("unit", "")
        if not task.completed or not task.elapsed:
            return Text(f"-- {unit}/s", style="progress.data.speed")
        rate = task.completed / task.elapsed
        shown = f"{rate:.2f}" if rate < 10 else f"{rate:.0f}"
        return Text(f"{shown} {unit}/s", style="progress.data.speed")


class _Eta(ProgressColumn):
    """Remaining time: the measured rate once something is done, else the estimate counted down."""

    def render(self, task: Any) -> Text:
        found = task.fields.get("estimate")
        if task.completed and task.elapsed and task.total:
            if found is not None and found.rows == task.total and found.seconds_for(task.completed) > 0:
                # rows of higher layers cost more: scale the estimate of what is left by how the
                # estimate of what is done compares with the time it took
                expected = found.seconds_for(task.completed)
                left = (found.seconds - expected) * task.elapsed / expected
            else:
                left = (task.total - task.completed) * task.elapsed / task.completed
            return Text(f"ETA {_clock(left)}", style="progress.remaining")
        if found is not None:
            left = max(0.0, found.seconds - (task.elapsed or 0.0))
            return Text(f"ETA ~{_clock(left)} (estimated)", style="progress.remaining")
        return Text("ETA --", style="progress.remaining")


class ProgressBar:
    """The callback: ``bar(done, total)``; ``bar.estimate(found)`` for flow's estimate."""

    def __init__(self, description: str, min_total: int, unit: str, console: Console) -> None:
        self.description, self.min_total, self.unit, self.console = description, min_total, unit, console
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), _Rate(), _Eta(),
                            console=console, transient=True,
                            disable=not console.is_terminal)
        self.task: Any = None
        self.found: Any = None
        self.plain = not console.is_terminal  # no bar to draw: a line now and then, with the same ETA
        self.printed: float | None = None
        self.said: set = set()
        self.running = False  # an estimate starts the bar once a method runs (method()); early ones are printed only


    def _start(self, total: int) -> None:
        self.bar.start()
        self.task = self.bar.add_task(self.description, total=total, unit=self.unit, estimate=self.found)

    def method(self, name: str, unit: str) -> None:
        """The next method of a call computing several: its own line, rate and ETA (each method's steps
        cost differently, and the time of the ones before it is not its own)."""
        if self.task is not None:
            self.bar.remove_task(self.task)
            self.task = None
        self.description, self.unit, self.found, self.printed, self.began = name, unit, None, None, None
        self.running = True

    def estimate(self, found: Any) -> None:
        self.found = found
        said = getattr(found, "method", None), getattr(found, "tokens", None), getattr(found, "rows", None)
        first = said not in self.said  # a method's estimate is printed before the capture pass, once
        self.said.add(said)
        if found.seconds >= PRINT_ESTIMATE_SECONDS:
            if first:
                self.console.print(f"{found}. Ctrl-C stops it.", highlight=False, soft_wrap=True)
            if self.task is None and found.rows >= self.min_total and self.running:
                self._start(found.rows)

    def __call__(self, done: int, total: int) -> None:
        if total < self.min_total:
            return
        if self.task is None:
            self._start(total)
        self.bar.update(self.task, completed=done, total=total)
        if self.plain:
            self._line(done, total)

    def _line(self, done: int, total: int) -> None:
        """A progress line on a non-terminal stream, for a run estimated to take at least
        PRINT_ESTIMATE_SECONDS or already running for PLAIN_EVERY_SECONDS: then every PLAIN_EVERY_SECONDS,
        and the last."""
        import time

        now = time.monotonic()
        if self.printed is None:
            self.began = getattr(self, "began", None) or now
            long = self.found is not None and self.found.seconds >= PRINT_ESTIMATE_SECONDS
            if not long and now - self.began < PLAIN_EVERY_SECONDS:
                return  # a quick run (as flow's estimate rule has it) prints no progress lines
        elif now - self.printed < PLAIN_EVERY_SECONDS and done < total:
            return
        self.printed = now
        task = self.bar.tasks[0] if self.bar.tasks else None
        eta = _Eta().render(task).plain if task is not None else ""
        self.console.print(f"{self.description}: {done}/{total} {self.unit}, {eta}", highlight=False,
                           soft_wrap=True)

    def stop(self) -> None:
        if self.task is not None:
            self.bar.stop()


def new_progress() -> Progress:
    """A transient bar with an ETA on stderr (stdout holds the answer), drawn only on a terminal: in a
    pipe or a log a bar is noise (rich would leave an empty line behind)."""
    console = Console(stderr=True)
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    transient=True, console=console, disable=not console.is_terminal)


@contextmanager
def progress_bar(description: str, min_total: int = 2, unit: str = "steps") -> Iterator[ProgressBar]:
    """Yield a callback that draws a bar on stderr once there are at least ``min_total`` steps."""
    bar = ProgressBar(description, min_total, unit, Console(file=sys.stderr))
    try:
        yield bar
    finally:
        bar.stop()
