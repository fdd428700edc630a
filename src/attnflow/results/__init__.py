"""Results: the one labelled result type (``Attribution``) and its files.

Every explanation is ``scores[method][target, layer, source]`` plus labels, the input, the
prediction and the settings; see ``attnflow.results.attribution`` for the axes and
``attnflow.results.schema`` for the JSON / ``.npz`` files.

The names load on first use: the package root imports ``attnflow.results.presenter`` (through the
views), and that must not import numpy for ``attnflow --help``.
"""

from attnflow.config.lazy import lazy

_LAZY = {"KINDS": "attnflow.results.attribution", "Attribution": "attnflow.results.attribution",
         "load": "attnflow.results.attribution", "Block": "attnflow.results.block",
         "Computed": "attnflow.results.block"}

__all__ = ["KINDS", "Attribution", "Block", "Computed", "load"]

__getattr__, __dir__ = lazy(__name__, _LAZY)
