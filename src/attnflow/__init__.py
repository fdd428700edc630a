"""attnflow: which input tokens a Transformer's output really draws on.

Attention rollout and attention flow (Abnar & Zuidema, ACL 2020) on stock Hugging Face models.
"""

from attnflow.capture import capture, load_model
from attnflow.core import AttentionMaps, flow, raw, rollout
from attnflow.errors import AttnflowError
from attnflow.explain import explain
from attnflow.explanation import Explanation
from attnflow.explanation_maps import ExplanationMaps, explain_maps

__version__ = "0.1.0"

__all__ = [
    "AttentionMaps",
    "AttnflowError",
    "Explanation",
    "ExplanationMaps",
    "capture",
    "explain",
    "explain_maps",
    "flow",
    "load_model",
    "raw",
    "rollout",
]
