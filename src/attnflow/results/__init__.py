"""Results: the one labelled result type (:class:`Attribution`) and its files.

Every explanation is ``scores[method][target, layer, source]`` plus labels, the input, the
prediction and the settings; see :mod:`attnflow.results.attribution` for the axes and
:mod:`attnflow.results.schema` for the JSON / ``.npz`` files.
"""

from attnflow.results.attribution import KINDS, Attribution
from attnflow.results.block import Block, Computed

load = Attribution.load

__all__ = ["KINDS", "Attribution", "Block", "Computed", "load"]
