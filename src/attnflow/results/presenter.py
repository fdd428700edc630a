"""Where an ``Attribution`` finds its views.

Results sit below views in the house (views take results; results never import views), yet users
expect ``result.plot()`` and ``result.to_html()``. So the views register one presenter object here
when ``attnflow.views`` is imported, which importing ``attnflow`` always does (the package root
imports the views package, whose ``__init__`` is light: the figure and report modules load only
when something is drawn).
"""

from __future__ import annotations

from typing import Any

from attnflow.errors import AttnflowError

_PRESENTER: Any = None


def register(presenter: Any) -> None:
    """Install the object whose ``plot``, ``html``, ``notebook``, ``table``, ``print`` and ``text``
    methods draw results (done by ``attnflow.views``)."""
    global _PRESENTER
    _PRESENTER = presenter


def presenter() -> Any:
    if _PRESENTER is None:  # only reachable by importing attnflow.results without the package root
        raise AttnflowError("no views are registered; import attnflow (or attnflow.views) to draw results")
    return _PRESENTER
