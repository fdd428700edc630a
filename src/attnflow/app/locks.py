"""A shared/exclusive lock per loaded model.

Explaining a text or an image only reads the model (plain forward passes), so any number of those
may run on one model at once. Generation is different: attnflow's tracker hooks the model's forward
pass while ``model.generate`` runs (``attnflow.capture.generation``), and that hook would also see
every other request's forward pass on the same model. So a generation holds its model exclusively,
everything else shares it, and a waiting request can still be cancelled.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class ModelLock:
    """Readers share; a writer waits for the readers to leave and keeps new readers out meanwhile
    (so that a stream of short explanations cannot starve a generation)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False
        self._writers_waiting = 0

    @property
    def busy(self) -> bool:
        with self._cond:
            return self._writing or self._writers_waiting > 0

    def _wait(self, blocked: Callable[[], bool], check: Callable[[], None], waiting: Callable[[], None]) -> None:
        """Wait (holding the condition) while ``blocked()``, calling ``waiting`` once and ``check`` each
        tenth of a second (it raises to give up)."""
        if blocked():
            waiting()
        while blocked():
            check()
            self._cond.wait(0.1)

    @contextmanager
    def shared(self, check: Callable[[], None] = lambda: None, waiting: Callable[[], None] = lambda: None
               ) -> Iterator[None]:
        """Hold the model with other readers. ``check`` is called while waiting (it raises to give up);
        ``waiting`` once, if the model is not free at once."""
        with self._cond:
            self._wait(lambda: self._writing or self._writers_waiting > 0, check, waiting)
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self, check: Callable[[], None] = lambda: None, waiting: Callable[[], None] = lambda: None
                  ) -> Iterator[None]:
        """Hold the model alone (see ``shared`` for ``check`` and ``waiting``)."""
        with self._cond:
            self._writers_waiting += 1
            try:
                self._wait(lambda: self._writing or self._readers > 0, check, waiting)
            finally:
                self._writers_waiting -= 1
                self._cond.notify_all()  # readers held back by this writer may go if it gave up
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()
