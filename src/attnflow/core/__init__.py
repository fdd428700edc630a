"""The pure core: residual augmentation, head fusion, raw attention, rollout, flow and gradient-weighted rollout.

Imports numpy, torch, scipy, networkx and numba only: no transformers, no plotting, no CLI.
"""

from attnflow.core.flow import flow
from attnflow.core.gradient import grad_rollout
from attnflow.core.inputs import as_stack
from attnflow.core.maps import AttentionMaps
from attnflow.core.raw import raw
from attnflow.core.rollout import rollout

__all__ = ["AttentionMaps", "as_stack", "flow", "grad_rollout", "raw", "rollout"]
